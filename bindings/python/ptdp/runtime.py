"""The runtime (this process's place in the job), process groups and collectives."""

import numpy as np

from ._lib import Handle, _raw, filled, handle_of, make_enum, make_struct

GroupKind = make_enum("GroupKind", "ptdp_group_kind", "PTDP_GROUP_", "Kinds of process group (ptdp_group_kind).")
ReduceOp = make_enum("ReduceOp", "ptdp_reduce_op", "PTDP_REDUCE_", "Reductions (ptdp_reduce_op).")
P2PKind = make_enum("P2PKind", "ptdp_p2p_kind", "PTDP_P2P_", "Direction of a batched transfer (ptdp_p2p_kind).")
Feature = make_enum("Feature", "ptdp_feature", "PTDP_FEATURE_", "Optional parts of the library (ptdp_feature).")
ChunkPlacement = make_enum("ChunkPlacement", "ptdp_chunk_placement", "PTDP_CHUNK_PLACEMENT_",
                           "Where the model chunks live on the pipeline ranks (ptdp_chunk_placement, the "
                           "pipeline_chunk_placement field of the parallel options): ROUND_ROBIN or V.")


def has_feature(feature):
    """Whether an optional part (Feature.CUDA, .NCCL, .MPI, or "cuda", "nccl", "mpi") was
    compiled in.

    >>> import ptdp
    >>> ptdp.has_feature("cuda") == ptdp.has_feature(ptdp.Feature.CUDA)
    True
    """
    return bool(_raw.ptdp_has_feature(feature))


def _fortran_handle(comm):
    """The Fortran (MPI_Fint) handle of an mpi4py communicator or an integer handle."""
    if isinstance(comm, (int, np.integer)):
        return int(comm)
    if hasattr(comm, "py2f"):
        return int(comm.py2f())
    raise TypeError("comm must be an mpi4py communicator or a Fortran communicator handle (int)")


class Runtime(Handle):
    """A runtime (``ptdp_runtime``) over a duplicate of a communicator.

    ``Runtime()`` uses MPI_COMM_WORLD (initialising MPI when nobody has); ``Runtime(comm)``
    takes an mpi4py communicator (handed over as its Fortran handle, ``comm.py2f()``) or a
    Fortran handle. Keyword arguments are fields of ``ptdp_runtime_options`` (comm_timeout_s,
    verify_collectives, use_mpi, use_nccl, cpu_threads); ``options`` may be such a struct or a dict (e.g.
    ``TrainConfig.runtime_options()``). Creation and ``close()`` are collective.

    Closing the runtime (or leaving its ``with`` block) first closes what was created on it and
    is still open, newest first: :class:`Groups` (and, through them, models, optimizers, layers
    and :class:`Work`) and :class:`Trainer` objects given this runtime.

    >>> import ptdp
    >>> with ptdp.Runtime() as rt, rt.groups() as groups:
    ...     model = ptdp.Model(groups, num_layers=1, hidden_size=16, num_attention_heads=2, seq_length=8,
    ...                        vocab_size=32)
    ...     optimizer = ptdp.Optimizer(model, optimizer="adam", lr=1e-3)
    ...     (rt.rank, rt.size) == (groups.rank("world"), groups.size("world"))
    True
    >>> model.closed, optimizer.closed   # closed with their groups, optimizer first
    (True, True)
    """

    _destroy = staticmethod(_raw.ptdp_runtime_destroy)
    _collective = True

    def __init__(self, comm=None, options=None, **fields):
        opts = make_struct("ptdp_runtime_options", options, **fields)
        if comm is None:
            ptr = _raw.ptdp_runtime_create(opts)
        else:
            ptr = _raw.ptdp_runtime_create_from_fortran(opts, _fortran_handle(comm))
        super().__init__(ptr, comm)

    @property
    def rank(self):
        """This process's rank in the runtime's world."""
        return _raw.ptdp_runtime_world(self.handle)[0]

    @property
    def size(self):
        """The number of processes in the runtime's world."""
        return _raw.ptdp_runtime_world(self.handle)[1]

    @property
    def local_rank(self):
        """This process's rank among the runtime's processes on its node."""
        return _raw.ptdp_runtime_local(self.handle)[0]

    @property
    def local_size(self):
        """The number of the runtime's processes on this node."""
        return _raw.ptdp_runtime_local(self.handle)[1]

    @property
    def cpu_threads(self):
        """The OpenMP threads of this process's CPU engine (OpenBLAS and ptdp's kernels), as
        chosen from ``cpu_threads``: that many, else OMP_NUM_THREADS, else this rank's share of
        the node's CPUs."""
        return _raw.ptdp_runtime_cpu_threads(self.handle)

    @property
    def gpu(self):
        """The GPU this rank uses, or -1 without GPUs."""
        return _raw.ptdp_runtime_gpu(self.handle)

    def groups(self, tensor=None, pipeline=None, virtual=None, options=None):
        """The process groups of a (t, p, v) layout; see :class:`Groups`."""
        return Groups(self, tensor=tensor, pipeline=pipeline, virtual=virtual, options=options)

    def abort(self):
        """Stops every communicator of the runtime without the other ranks (``ptdp_runtime_abort``):
        waits and later calls fail fast; groups and the runtime then close promptly."""
        _raw.ptdp_runtime_abort(self.handle)

    def dump_flight_record(self, directory=None):
        """Writes this rank's flight record to ``directory/flight-rankNNNNN.json`` (None: the
        directory PTDP_FLIGHT_RECORDER_DIR names); see :func:`flight_analyze`."""
        _raw.ptdp_flight_recorder_dump(self.handle, None if directory is None else str(directory))


def flight_analyze(directory):
    """Reads every rank's flight record in ``directory`` (``ptdp_flight_analyze``) and returns
    ``(report, culprit_rank)``: the text ptdp-flight-analyze prints and the rank to look at
    first, or -1 when the records agree.

    >>> import tempfile, ptdp
    >>> with ptdp.Runtime() as rt, tempfile.TemporaryDirectory() as directory:
    ...     rt.dump_flight_record(directory)
    ...     report, culprit = ptdp.flight_analyze(directory)
    ...     culprit, "consistent" in report
    (-1, True)
    """
    culprit = [-1]

    def call(buffer):
        (status, message), length, rank = _raw.ptdp_flight_analyze(str(directory), buffer)
        culprit[0] = rank
        return (status, message), length

    report = filled(call).decode("utf-8", "replace")
    return report, culprit[0]


def parallel_options(tensor=None, pipeline=None, virtual=None, options=None):
    """A ``ptdp_parallel_options`` from t, p, v (Megatron's names also accepted via ``options``)."""
    return make_struct("ptdp_parallel_options", options, tensor_model_parallel_size=tensor,
                       pipeline_model_parallel_size=pipeline, virtual_pipeline_model_parallel_size=virtual)


def layout_members(world_size, world_rank, kind, tensor=1, pipeline=1, virtual=1, options=None):
    """World ranks of ``world_rank``'s group of ``kind`` in a layout, without any communication;
    ``options`` holds further ``ptdp_parallel_options`` fields (the context and expert sizes).

    >>> import ptdp
    >>> [ptdp.layout_members(8, 5, kind, tensor=2, pipeline=2) for kind in ("tensor", "pipeline", "data")]
    [[4, 5], [1, 5], [5, 7]]
    >>> ptdp.layout_members(8, 5, "expert_model", tensor=2, options={"expert_model_parallel_size": 4,
    ...                                                               "expert_tensor_parallel_size": 1})
    [4, 5, 6, 7]
    """
    opts = parallel_options(tensor, pipeline, virtual, options)
    ranks = np.zeros(max(int(world_size), 1), dtype=np.int32)
    count = _raw.ptdp_layout_members(opts, int(world_size), int(world_rank), kind, ranks)
    return [int(r) for r in ranks[:count]]


class Work(Handle):
    """A non-blocking operation (``ptdp_work``) of :class:`Groups`: ``wait()``, ``test()``;
    closing waits for it. Closing its groups closes it.

    >>> import numpy as np, ptdp
    >>> with ptdp.Runtime() as rt, rt.groups() as groups:
    ...     x = ptdp.Tensor(np.ones(4, dtype=np.float32))
    ...     work = groups.all_reduce(x, op="sum", nonblocking=True)
    ...     work.wait()
    ...     x.numpy() / rt.size
    array([1., 1., 1., 1.], dtype=float32)
    """

    _destroy = staticmethod(_raw.ptdp_work_destroy)
    _destroy_always_releases = True  # ptdp_work_destroy reports the operation's failure, released

    def wait(self):
        """Blocks until the operation completes; raises its failure."""
        _raw.ptdp_work_wait(self.handle)

    def test(self):
        """Whether the operation has completed."""
        return bool(_raw.ptdp_work_test(self.handle))


def _work(result, groups, *keep):
    return Work(result, *keep, parent=groups) if result is not None else None


class Groups(Handle):
    """The tensor, pipeline, data, model and embedding groups (``ptdp_groups``) of a layout.

    Collectives take tensors (``ptdp.Tensor``) and a group kind (a :class:`GroupKind` or its
    name: "tensor", "pipeline", "data", ...); ``nonblocking=True`` returns a :class:`Work` to
    wait on (keep the tensors untouched until then), else they block. Creation and ``close()``
    are collective over the runtime's world; closing first closes what was created on the
    groups and is still open (models and their optimizers, layers, work), newest first.

    >>> import numpy as np, ptdp
    >>> with ptdp.Runtime() as rt, rt.groups(tensor=1, pipeline=1) as groups:
    ...     x = ptdp.Tensor(np.arange(3, dtype=np.float32))
    ...     groups.all_reduce(x, kind="data", op="max")
    ...     x.numpy(), groups.size("tensor"), groups.members("world") == list(range(rt.size))
    (array([0., 1., 2.], dtype=float32), 1, True)
    """

    _destroy = staticmethod(_raw.ptdp_groups_destroy)
    _collective = True

    def __init__(self, runtime, tensor=None, pipeline=None, virtual=None, options=None):
        """Sizes t, p, v (1 when not given), or ``options``: a ptdp_parallel_options struct or dict
        such as ``TrainConfig.parallel_options()``; explicit sizes override it."""
        opts = parallel_options(tensor, pipeline, virtual, options)
        super().__init__(_raw.ptdp_groups_create(runtime.handle, opts), parent=runtime)
        self.runtime = runtime
        self.tensor_size = opts.tensor_model_parallel_size
        self.pipeline_size = opts.pipeline_model_parallel_size
        self.virtual_size = opts.virtual_pipeline_model_parallel_size

    def rank(self, kind):
        """This rank's rank in its group of ``kind`` (-1 when in none)."""
        return _raw.ptdp_groups_rank(self.handle, kind)

    def size(self, kind):
        """The size of this rank's group of ``kind`` (0 when in none)."""
        return _raw.ptdp_groups_size(self.handle, kind)

    def members(self, kind):
        """World ranks of this rank's group of ``kind``, in group-rank order."""
        ranks = np.zeros(max(self.size(kind), 1), dtype=np.int32)
        count = _raw.ptdp_groups_members(self.handle, kind, ranks)
        return [int(r) for r in ranks[:count]]

    def all_reduce(self, tensor, kind=GroupKind.WORLD, op=ReduceOp.SUM, nonblocking=False):
        """Reduces ``tensor`` in place over the group of ``kind`` with ``op`` (a :class:`ReduceOp`
        or "sum", "avg", "max", "min")."""
        return _work(_raw.ptdp_all_reduce(self.handle, kind, tensor.handle, op, nonblocking), self,
                     tensor)

    def reduce_scatter(self, input, output, kind=GroupKind.WORLD, op=ReduceOp.SUM, nonblocking=False):
        """Reduces ``input`` over the group and leaves this rank's slice of the result in ``output``."""
        return _work(_raw.ptdp_reduce_scatter(self.handle, kind, input.handle, output.handle,
                                              op, nonblocking), self, input, output)

    def all_gather(self, input, output, kind=GroupKind.WORLD, nonblocking=False):
        """Concatenates every rank's ``input`` into ``output``, in group-rank order."""
        return _work(_raw.ptdp_all_gather(self.handle, kind, input.handle, output.handle, nonblocking), self,
                     input, output)

    def broadcast(self, tensor, root=0, kind=GroupKind.WORLD, nonblocking=False):
        """Copies group rank ``root``'s ``tensor`` into every rank's."""
        return _work(_raw.ptdp_broadcast(self.handle, kind, tensor.handle, int(root), nonblocking), self,
                     tensor)

    def send(self, tensor, peer, tag=0, kind=GroupKind.WORLD, nonblocking=False):
        """Sends ``tensor`` to group rank ``peer``."""
        return _work(_raw.ptdp_send(self.handle, kind, tensor.handle, int(peer), int(tag), nonblocking), self,
                     tensor)

    def recv(self, tensor, peer, tag=0, kind=GroupKind.WORLD, nonblocking=False):
        """Receives into ``tensor`` from group rank ``peer``."""
        return _work(_raw.ptdp_recv(self.handle, kind, tensor.handle, int(peer), int(tag), nonblocking), self,
                     tensor)

    def batch_send_recv(self, transfers, kind=GroupKind.WORLD, nonblocking=False):
        """``transfers``: (direction, tensor, peer, tag) tuples, issued together; a direction is
        a :class:`P2PKind` or "send" or "recv"."""
        ops, tensors = [], []
        for direction, tensor, peer, tag in transfers:
            op = _raw.ptdp_p2p_op()
            op.kind, op.tensor, op.peer, op.tag = direction, handle_of(tensor), int(peer), int(tag)
            ops.append(op)
            tensors.append(tensor)
        return _work(_raw.ptdp_batch_send_recv(self.handle, kind, ops, nonblocking), self, *tensors)

    def barrier(self, kind=GroupKind.WORLD, nonblocking=False):
        """Waits until every rank of the group has entered the barrier."""
        return _work(_raw.ptdp_barrier(self.handle, kind, nonblocking), self)
