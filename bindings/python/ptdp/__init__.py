"""ptdp: pipeline, tensor and data parallel training of GPT models.

A Pythonic layer over the library's C API (``ptdp.raw``, the SWIG extension generated from
``ptdp/ptdp.h``): failed calls raise :class:`ptdp.Error` subclasses carrying the library's
message; handles are objects with ``close()`` that work as context managers; arrays travel as
numpy arrays through the buffer protocol; an mpi4py communicator can be handed to
:class:`Runtime`; pipeline schedules can drive a model written in Python (:func:`pipeline_run`).
Text comes in through :class:`Tokenizer` and :func:`preprocess` (Megatron's tokenizers and
preprocess_data.py), Hugging Face checkpoints through :func:`hf_read_options`, :func:`hf_load`
and :func:`hf_save`; :func:`eod_masks` and :data:`IGNORE_INDEX` mask losses and documents.
:func:`train` runs ptdp-train itself, :class:`Trainer` its training loop with a callback.

Lifetimes. An object made on another depends on it, as the library's handles do: groups on
their runtime; a model, a layer or a :class:`Work` on its groups; an optimizer on its model (or
on its groups, :meth:`Optimizer.for_tensors`); a trainer on the runtime it was given. Two rules
keep them in order, as mpi4py's and torch.distributed's users expect:

- a child keeps its parent alive: dropping the last reference to groups a model still uses
  destroys nothing;
- closing a parent (``close()``, or leaving its ``with`` block) first closes its children that
  are still open, newest first, then itself; a closed object raises ValueError when used.

So one ``with`` statement for the runtime and its groups is enough:

>>> import ptdp
>>> config = ptdp.TrainConfig("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 "
...                           "--vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --mock-data")
>>> with ptdp.Runtime() as rt, rt.groups(options=config.parallel_options()) as groups:
...     model = ptdp.Model(groups, config.gpt_options())
...     optimizer = ptdp.Optimizer(model, config.optimizer_options(), lr=1e-3)
...     schedule = ptdp.Schedule("1f1b", groups.pipeline_size, 2)
...     tokens, labels = ptdp.GPTData(config.data_options()).batch(0, 4)
...     result = ptdp.train_iteration(model, optimizer, schedule, tokens, labels, 2, 0)
>>> model.closed and optimizer.closed     # closed with the groups, the optimizer first
True
>>> 0 < result.loss < 10
True

Runtimes, groups and trainers are destroyed collectively (by every rank together), so the
garbage collector never destroys them: it runs at different times on different ranks. Close
them, or their parent, at the same point on every rank, as a ``with`` statement does; the
children still open are then closed in reverse creation order, which is the same on every rank
(creating them is collective too). Other objects (models, optimizers, tensors, tokenizers,
schedules, ...) are also released by the garbage collector once nothing refers to them.

Enums. Every argument and option field of one of the header's enums takes the member
(``ptdp.DType.BF16``), its int, or its name as a string: the header's name without its prefix,
in any case, "-" and "_" alike, or the spelling of ptdp-train's flags and Megatron where it
differs (``optimizer="adam"``, ``dtype="bf16"``, ``Schedule("1f1b", ...)``,
``recompute_granularity="full"``, ``Tokenizer("GPT2BPETokenizer", ...)``). Other strings raise
:class:`InvalidArgumentError` listing the names:

>>> ptdp.Schedule("zb-h1", 2, 4).kind
<ScheduleKind.ZB_H1: 3>
>>> ptdp.Tensor([1.5, 2.5], dtype="float16").dtype
<DType.F16: 2>
>>> ptdp.Schedule("zero-bubble", 2, 4)  # doctest: +ELLIPSIS
Traceback (most recent call last):
    ...
ptdp.errors.InvalidArgumentError: kind = 'zero-bubble' is not a ptdp.ScheduleKind; expected one of 'gpipe', '1f1b', ...
"""

from . import _ptdp as raw
from .data import DataSource, GPTData, IndexedDataset, Split
from .errors import (CallbackError, CommTimeoutError, CommunicationError, DeviceError, Error, FileError,
                     InternalError, InvalidArgumentError, InvalidStateError, OutOfMemoryError, UnsupportedError)
from .hf import HFArchitecture, hf_architecture, hf_load, hf_read_options, hf_save
from .layers import (Layer, column_parallel_linear, row_parallel_linear, vocab_parallel_cross_entropy,
                     vocab_parallel_embedding)
from .model import (IGNORE_INDEX, Attention, EodFlags, Model, MoeDispatcher, MoeDropPolicy, MoeLoadBalancing,
                    MoeScoreFunction, Normalization, ParamInfo, PositionEmbedding, Recompute, RopeType, eod_masks,
                    model_presets, preset_options)
from .pipeline import Stage, pipeline_run
from .preprocessing import PreprocessResult, merge_datasets, merge_datasets_main, preprocess, preprocess_main
from .runtime import (ChunkPlacement, Feature, GroupKind, Groups, P2PKind, ReduceOp, Runtime, Work, flight_analyze,
                      has_feature, layout_members)
from .schedule import ACTION_DTYPE, ActionKind, Schedule, ScheduleKind
from .tensor import Device, DType, Tensor
from .tokenizer import Tokenizer, TokenizerType
from .training import (CheckpointState, IterationReport, IterationResult, LRDecayStyle, MoeMetrics, MuonScaleMode,
                       MuonTpMode, NsCoefficients, NsPrecision, Optimizer, OptimizerKind, ParamFlags, TrainConfig,
                       Trainer, load_checkpoint, moe_metrics, read_checkpoint_options, save_checkpoint, supervise,
                       train, train_iteration)

__version__ = raw.ptdp_version()


def version():
    """The library's version as (major, minor, patch).

    >>> import ptdp
    >>> ptdp.version() == tuple(int(x) for x in ptdp.__version__.split("."))
    True
    """
    return tuple(raw.ptdp_get_version())


def status_string(status):
    """The fixed description of a status code.

    >>> import ptdp
    >>> ptdp.status_string(ptdp.InvalidArgumentError.status) == ptdp.status_string(1)
    True
    """
    return raw.ptdp_status_string(int(status))


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("data", "errors", "hf", "layers",
                                                                                  "model", "pipeline", "preprocessing",
                                                                                  "runtime", "schedule", "tensor",
                                                                                  "tokenizer", "training")]
