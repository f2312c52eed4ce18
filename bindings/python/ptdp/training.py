"""Optimizers, training iterations, ptdp-train's configuration, the shared training loop
(:func:`train`, :class:`Trainer`) and checkpoints."""

from collections import namedtuple

from ._lib import Handle, _raw, as_int32, enum_member, filled, handle_of, make_enum, make_struct, struct_to_dict
from .model import _Masks, pipeline_options

OptimizerKind = make_enum("OptimizerKind", "ptdp_optimizer_kind", "PTDP_OPTIMIZER_",
                          "Optimizer algorithm (ptdp_optimizer_kind, ``--optimizer``): ADAM (AdamW, also spelt "
                          "\"adamw\"), SGD or MUON.", aliases={"adamw": "ADAM"})
MuonScaleMode = make_enum("MuonScaleMode", "ptdp_muon_scale_mode", "PTDP_MUON_SCALE_",
                          "Scale of Muon's orthogonalised update (ptdp_muon_scale_mode, ``--muon-scale-mode``): "
                          "SPECTRAL, UNIT_RMS_NORM or SHAPE_SCALING.")
MuonTpMode = make_enum("MuonTpMode", "ptdp_muon_tp_mode", "PTDP_MUON_TP_",
                       "How Muon orthogonalises a tensor-parallel matrix (ptdp_muon_tp_mode, ``--muon-tp-mode``): "
                       "DISTRIBUTED, DUPLICATED or BLOCKWISE.")
NsCoefficients = make_enum("NsCoefficients", "ptdp_ns_coefficients", "PTDP_NS_COEFFICIENTS_",
                           "Muon's Newton-Schulz coefficients (ptdp_ns_coefficients, ``--muon-coefficient-type``): "
                           "QUINTIC, SIMPLE, POLAR_EXPRESS or AOL.")
NsPrecision = make_enum("NsPrecision", "ptdp_ns_precision", "PTDP_NS_PRECISION_",
                        "Precision of Muon's Newton-Schulz products (ptdp_ns_precision, ``--muon-fp32-matmul-prec``): "
                        "HIGHEST, HIGH or MEDIUM.")
LRDecayStyle = make_enum("LRDecayStyle", "ptdp_lr_decay_style", "PTDP_LR_",
                         "Learning-rate decay (ptdp_lr_decay_style, ``--lr-decay-style``): CONSTANT, LINEAR or "
                         "COSINE.")
ParamFlags = make_enum("ParamFlags", "ptdp_param_flags", "PTDP_PARAM_",
                       "Flags of a registered parameter (ptdp_param_flags): DEFAULT, REPLICATED, NO_WEIGHT_DECAY; "
                       "names combine as \"replicated|no_weight_decay\".", flags=True)

IterationResult = namedtuple("IterationResult", "loss grad_norm learning_rate loss_scale skipped skipped_iterations "
                             "seconds comm_wait_seconds")
IterationResult.__doc__ = "What one training iteration reports (ptdp_iteration_result)."

CheckpointState = namedtuple("CheckpointState", "iteration consumed_train_samples consumed_valid_samples")


def _result(struct):
    return IterationResult(**{k: getattr(struct, k) for k in IterationResult._fields})


class Optimizer(Handle):
    """AdamW, SGD or Muon (``ptdp_optimizer``) over a model's parameters.

    ``options``: a ``ptdp_optimizer_options`` struct or dict (``TrainConfig.optimizer_options()``);
    keyword fields with Megatron's names (optimizer, lr, min_lr, lr_decay_style, weight_decay,
    clip_grad, use_distributed_optimizer, ...), the enums by name as ptdp-train's flags take
    them: ``optimizer="adam"``, ``"sgd"`` or ``"muon"``, ``lr_decay_style="cosine"``,
    ``muon_scale_mode="spectral"``. The optimizer depends on its model: closing the model (or
    its groups) closes the optimizer first.

    >>> import numpy as np, ptdp
    >>> with ptdp.Runtime() as rt, rt.groups() as groups:
    ...     model = ptdp.Model(groups, num_layers=1, hidden_size=16, num_attention_heads=2, seq_length=8,
    ...                        vocab_size=32)
    ...     optimizer = ptdp.Optimizer(model, optimizer="adam", lr=1e-3, lr_decay_style="cosine",
    ...                                lr_decay_iters=10)
    ...     tokens = np.zeros((2, 8), dtype=np.int32)
    ...     with ptdp.Schedule("1f1b", 1, 1) as schedule:
    ...         result = ptdp.train_iteration(model, optimizer, schedule, tokens, tokens, 2, 0)
    ...     result.learning_rate
    0.001
    >>> optimizer.closed
    True
    """

    _destroy = staticmethod(_raw.ptdp_optimizer_destroy)

    def __init__(self, model, options=None, **fields):
        opts = make_struct("ptdp_optimizer_options", options, **fields)
        super().__init__(_raw.ptdp_optimizer_create(model.handle, opts), parent=model)
        self.model = model

    @classmethod
    def for_tensors(cls, groups, params, grads, flags=None, options=None, **fields):
        """An optimizer over a user's own f32 (or bf16/f16) parameter tensors and f32 gradients.
        The tensors are re-pointed into the optimizer's flat buffers (values kept). ``flags``: one
        :class:`ParamFlags` per tensor, or its name ("replicated", "no_weight_decay", joined by
        "|" to combine them), or its int. Closing ``groups`` closes the optimizer first.

        >>> import numpy as np, ptdp
        >>> with ptdp.Runtime() as rt, rt.groups() as groups:
        ...     w, g = ptdp.Tensor(np.ones(4, np.float32)), ptdp.Tensor(np.full(4, 0.5, np.float32))
        ...     sgd = ptdp.Optimizer.for_tensors(groups, [w], [g], flags=["no_weight_decay"], optimizer="sgd",
        ...                                      lr=0.1, sgd_momentum=0)
        ...     sgd.step(0).grad_norm, w.numpy()
        (1.0, array([0.95, 0.95, 0.95, 0.95], dtype=float32))
        """
        opts = make_struct("ptdp_optimizer_options", options, **fields)
        f = None if flags is None else as_int32([int(enum_member(ParamFlags, x, f"flags[{i}]"))
                                                 for i, x in enumerate(flags)], "flags", len(params))
        o = cls.__new__(cls)
        Handle.__init__(o, _raw.ptdp_optimizer_create_for_tensors(
            groups.handle, opts, [handle_of(p) for p in params], [handle_of(g) for g in grads], f, len(params)),
            tuple(params), tuple(grads), parent=groups)
        o.model = None
        return o

    def reduce_gradients(self):
        """Averages registered tensors' gradients over the data-parallel group."""
        _raw.ptdp_optimizer_reduce_gradients(self.handle)

    def step(self, iteration):
        """One optimizer step; returns an :class:`IterationResult`."""
        result = _raw.ptdp_iteration_result()
        _raw.ptdp_optimizer_step(self.handle, int(iteration), result)
        return _result(result)

    @property
    def state_bytes(self):
        return _raw.ptdp_optimizer_state_bytes(self.handle)


def train_iteration(model, optimizer, schedule, tokens, labels, micro_batch_size, iteration, trace_path=None,
                    scatter_gather=None, position_ids=None, document_starts=None):
    """One iteration: zero gradients, forward and backward of this replica's m * b samples
    ([m * b, seq_length] int32) through ``schedule``, optimizer step. Returns an IterationResult.

    Labels may be ``ptdp.model.IGNORE_INDEX`` (no part in the loss); ``position_ids`` and
    ``document_starts`` (the tokens' shape; see ``ptdp.model.eod_masks``) restart positions and
    keep attention inside documents. The loss is the mean of the microbatches' masked means over
    every replica, the serial run's for the same global batch."""
    rows = schedule.m * int(micro_batch_size)
    t = as_int32(tokens, "tokens", rows * model.seq_length)
    l = as_int32(labels, "labels", rows * model.seq_length)
    m = _Masks(position_ids, document_starts, t.size)
    result = _raw.ptdp_iteration_result()
    _raw.ptdp_train_iteration(model.handle, optimizer.handle, schedule.handle, t, l, int(micro_batch_size),
                              int(iteration), pipeline_options(trace_path, scatter_gather, m), result)
    return _result(result)


MoeMetrics = namedtuple("MoeMetrics", "moe_layers load_balancing_loss z_loss expert_load")
MoeMetrics.__doc__ = ("An iteration's mixture-of-experts figures (ptdp_moe_metrics): Megatron's logged "
                      "load_balancing_loss and z_loss (NaN when not configured), and expert_load, a list of "
                      "(layer, fewest, most) tokens per expert over the global batch, one per MoE layer.")


def _moe_metrics(call, handle):
    import numpy as np
    count = call(handle, None).moe_layers
    loads = np.zeros((count, 3), dtype=np.int64)
    metrics = call(handle, loads)
    return MoeMetrics(int(metrics.moe_layers), metrics.load_balancing_loss, metrics.z_loss,
                      [tuple(int(v) for v in row) for row in loads])


def moe_metrics(model):
    """The :class:`MoeMetrics` of ``model``'s last :func:`train_iteration` (zero layers before it)."""
    return _moe_metrics(_raw.ptdp_model_moe_metrics, model.handle)


def _text(call):
    """Runs a call that fills a char buffer, growing the buffer until the text fits."""
    return filled(call).decode("utf-8", "replace")


class TrainConfig(Handle):
    """ptdp-train's command line (``ptdp_train_config``), parsed by the library: Megatron-LM's
    flag names, e.g. ``TrainConfig(["--num-layers", "2", "--hidden-size", "64", ...])`` or one
    string. The option structs it implies come out as dicts, ready for ``Model(groups,
    config.gpt_options())``, ``Optimizer(model, config.optimizer_options())`` and so on.

    >>> import ptdp
    >>> config = ptdp.TrainConfig("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
    ...                           "--micro-batch-size 2 --global-batch-size 8 --optimizer sgd --mock-data")
    >>> config.gpt_options()["hidden_size"], config.settings()["global_batch_size"]
    (64, 8)
    >>> config.optimizer_options()["optimizer"] == ptdp.OptimizerKind.SGD
    True
    """

    _destroy = staticmethod(_raw.ptdp_train_config_destroy)

    def __init__(self, args=(), program="ptdp-train"):
        argv = [program] + (args.split() if isinstance(args, str) else [str(a) for a in args])
        super().__init__(_raw.ptdp_train_config_parse(argv))

    @staticmethod
    def help(program="ptdp-train"):
        """The --help text: every flag with its meaning and default."""
        return _text(lambda buffer: _raw.ptdp_train_config_help(program, buffer))

    def to_json(self):
        """The configuration as JSON text (flag names without dashes as keys)."""
        return _text(lambda buffer: _raw.ptdp_train_config_to_json(self.handle, buffer))

    def _struct(self, name, getter):
        s = getattr(_raw, name)()
        getter(self.handle, s)
        return struct_to_dict(s)

    def gpt_options(self):
        return self._struct("ptdp_gpt_options", _raw.ptdp_train_config_gpt_options)

    def optimizer_options(self):
        return self._struct("ptdp_optimizer_options", _raw.ptdp_train_config_optimizer_options)

    def parallel_options(self):
        return self._struct("ptdp_parallel_options", _raw.ptdp_train_config_parallel_options)

    def runtime_options(self):
        return self._struct("ptdp_runtime_options", _raw.ptdp_train_config_runtime_options)

    def data_options(self):
        return self._struct("ptdp_gpt_data_options", _raw.ptdp_train_config_data_options)

    def settings(self):
        """The driver's own settings (ptdp_train_settings) as a dict."""
        return self._struct("ptdp_train_settings", _raw.ptdp_train_config_settings)


IterationReport = namedtuple("IterationReport", "iteration train_iters consumed_samples global_batch_size lm_loss "
                             "loss_scale learning_rate grad_norm skipped validated skipped_iterations elapsed_seconds "
                             "tokens_per_second model_flops executed_flops tflops_per_device mfu peak_flops "
                             "mem_high_water_mib validation_loss saved")
IterationReport.__doc__ = ("What one iteration of the training loop reports (ptdp_iteration_report): the loss, "
                           "learning rate, grad norm, loss scale, tokens/s, the paper's FLOPs, TFLOP/s per device and "
                           "MFU against the device's peak, and whether it validated or saved.")


def _report(struct):
    values = {k: getattr(struct, k) for k in IterationReport._fields}
    for flag in ("skipped", "validated", "saved"):
        values[flag] = bool(values[flag])
    return IterationReport(**values)


def train(args=(), program="ptdp-train"):
    """Runs ptdp-train with ``args`` (its flags, a list or one string) through the library's
    training loop, the one every front end shares: the same log lines, JSON lines and
    checkpoints as ``ptdp-train``. Returns the exit status: 0 done, 1 failed (the message went to
    stderr as "ptdp-train: rank R: ..."), 2 bad flags. Under mpirun every rank calls it.

    >>> import ptdp
    >>> ptdp.train("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
    ...            "--micro-batch-size 2 --global-batch-size 4 --train-iters 2 --mock-data --log-interval 100")
    0
    """
    argv = [program] + (args.split() if isinstance(args, str) else [str(a) for a in args])
    return _raw.ptdp_train_main(argv)


def supervise(command, launcher=None, max_restarts=0, backoff_seconds=1.0):
    """Supervises a training job (``ptdp_train_supervise``, torchrun's --max-restarts for MPI
    jobs): runs ``command`` (the program and its flags, a list or one string; with restarts it
    must hold ``--save DIR``) after the ``launcher`` words (e.g. ``"mpiexec -n 8"``; None: the
    environment's PTDP_LAUNCHER, else one process) and relaunches it after a failure from the
    latest checkpoint of ``--save`` (as ``--load``), at most ``max_restarts`` times, waiting
    ``backoff_seconds`` (doubling) between attempts. Call it outside any MPI job. Returns the exit
    status: the job's (0 done), or 5 when the restarts are spent. Bad arguments raise
    InvalidArgumentError and launch nothing."""
    argv = command.split() if isinstance(command, str) else [str(a) for a in command]
    return _raw.ptdp_train_supervise(argv, launcher, int(max_restarts), float(backoff_seconds))


class _TrainerOptions:
    """What the extension reads for ptdp_trainer_options (see ptdp.i)."""

    def __init__(self, runtime, print_log, callback):
        self.runtime = None if runtime is None else runtime.handle
        self.print_log = bool(print_log)
        self.has_callback = callback is not None
        self.callback = callback
        self.error = None

    def _on_iteration(self, report):
        return bool(self.callback(_report(report)))


class Trainer(Handle):
    """A training run of the shared loop (``ptdp_trainer``): ``Trainer(config)`` with a
    :class:`TrainConfig` or ptdp-train's flags, then :meth:`run`. ``on_iteration(report)`` is
    called on every rank after each iteration with an :class:`IterationReport`; returning True
    stops the run (the ranks agree; with --save a checkpoint is written first), as does
    :meth:`stop`. ``runtime``: a :class:`Runtime` to train on (default: one over MPI_COMM_WORLD);
    ``print_log=False`` keeps stdout quiet. A trainer given a runtime depends on it: closing the
    runtime closes the trainer first. Creating and closing a trainer are collective.

    >>> import ptdp
    >>> flags = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 64 "
    ...          "--micro-batch-size 2 --global-batch-size 4 --train-iters 100 --lr 1e-3 --mock-data")
    >>> with ptdp.Runtime() as rt:
    ...     trainer = ptdp.Trainer(flags, runtime=rt, print_log=False, on_iteration=lambda r: r.iteration == 3)
    ...     report = trainer.run()                 # stopped by on_iteration after iteration 3
    ...     report.iteration, report.consumed_samples, 0 < report.lm_loss < 10
    (3, 12, True)
    >>> trainer.closed
    True
    """

    _destroy = staticmethod(_raw.ptdp_trainer_destroy)
    _collective = True  # frees groups and communicators: every rank together

    def __init__(self, config, on_iteration=None, runtime=None, print_log=True):
        if not isinstance(config, TrainConfig):
            config = TrainConfig(config)
        self._options = _TrainerOptions(runtime, print_log, on_iteration)
        super().__init__(_raw.ptdp_trainer_create(config.handle, self._options), self._options, parent=runtime)

    def run(self):
        """Trains to --train-iters, or until --exit-interval or a stop; returns the last
        :class:`IterationReport`. An exception raised by ``on_iteration`` stops the run and is
        raised here."""
        self._options.error = None
        _raw.ptdp_trainer_run(self.handle)
        if self._options.error is not None:
            error, self._options.error = self._options.error, None
            raise error
        return self.last_report

    def stop(self):
        """Asks the run to stop after the iteration in progress (from another thread, say)."""
        _raw.ptdp_trainer_request_stop(self.handle)

    @property
    def last_report(self):
        """The last iteration's :class:`IterationReport`."""
        return _report(_raw.ptdp_trainer_last_report(self.handle))

    @property
    def moe_metrics(self):
        """The last iteration's :class:`MoeMetrics` (zero layers for a dense model)."""
        return _moe_metrics(_raw.ptdp_trainer_moe_metrics, self.handle)


def save_checkpoint(directory, model, optimizer=None, config=None, iteration=0, consumed_train_samples=0,
                    consumed_valid_samples=0):
    """Saves DIR/iter_NNNNNNN and makes it the latest (collective over the model's world).

    >>> import os, tempfile, numpy as np, ptdp
    >>> with ptdp.Runtime() as rt, rt.groups() as groups, tempfile.TemporaryDirectory() as directory:
    ...     model = ptdp.Model(groups, num_layers=1, hidden_size=16, num_attention_heads=2, seq_length=8,
    ...                        vocab_size=32)
    ...     ptdp.save_checkpoint(directory, model, iteration=5)
    ...     options, iteration = ptdp.read_checkpoint_options(directory)
    ...     copy = ptdp.Model(groups, options, seed=99)            # other initial values
    ...     state = ptdp.load_checkpoint(directory, copy)
    ...     name = "embedding.word_embeddings.weight"
    ...     "iter_0000005" in os.listdir(directory), state.iteration, np.array_equal(copy.get_param(name),
    ...                                                                              model.get_param(name))
    (True, 5, True)
    """
    state = make_struct("ptdp_checkpoint_state", iteration=int(iteration),
                        consumed_train_samples=int(consumed_train_samples),
                        consumed_valid_samples=int(consumed_valid_samples))
    _raw.ptdp_checkpoint_save(str(directory), model.handle, handle_of(optimizer), handle_of(config), state)


def load_checkpoint(directory, model, optimizer=None):
    """Loads DIR's latest checkpoint into ``model`` (and ``optimizer``), re-sharding as needed;
    returns its :class:`CheckpointState`."""
    state = make_struct("ptdp_checkpoint_state")
    _raw.ptdp_checkpoint_load(str(directory), model.handle, handle_of(optimizer), state)
    return CheckpointState(state.iteration, state.consumed_train_samples, state.consumed_valid_samples)


def read_checkpoint_options(directory):
    """(gpt options dict, iteration) of DIR's latest checkpoint, to build a model that loads it."""
    options = _raw.ptdp_gpt_options()
    iteration = _raw.ptdp_checkpoint_read_options(str(directory), options)
    return struct_to_dict(options), iteration


__all__ = ["OptimizerKind", "MuonScaleMode", "MuonTpMode", "NsCoefficients", "NsPrecision", "LRDecayStyle",
           "ParamFlags", "IterationResult", "IterationReport", "CheckpointState", "MoeMetrics", "Optimizer",
           "train_iteration", "moe_metrics", "train", "Trainer", "TrainConfig", "save_checkpoint",
           "load_checkpoint", "read_checkpoint_options", "supervise"]
