"""ptdp: pipeline, tensor and data parallel training of GPT models.

A Pythonic layer over the library's C API (``ptdp.raw``, the SWIG extension generated from
``ptdp/ptdp.h``): failed calls raise :class:`ptdp.Error` subclasses carrying the library's
message; handles are objects with ``close()`` that work as context managers; arrays travel as
numpy arrays through the buffer protocol; an mpi4py communicator can be handed to
:class:`Runtime`; pipeline schedules can drive a model written in Python (:func:`pipeline_run`).
Text comes in through :class:`Tokenizer` and :func:`preprocess` (Megatron's tokenizers and
preprocess_data.py), Hugging Face checkpoints through :func:`hf_read_options`, :func:`hf_load`
and :func:`hf_save`; :func:`eod_masks` and :data:`IGNORE_INDEX` mask losses and documents.

    import ptdp
    ptdp.train("--num-layers 2 --hidden-size 64 --num-attention-heads 4 ...")   # ptdp-train itself
    config = ptdp.TrainConfig("--num-layers 2 --hidden-size 64 --num-attention-heads 4 ...")
    with ptdp.Runtime() as rt, rt.groups() as groups:
        model = ptdp.Model(groups, config.gpt_options())
        ...
"""

from . import _ptdp as raw
from .data import DataSource, GPTData, IndexedDataset, Split
from .errors import (CallbackError, CommTimeoutError, CommunicationError, DeviceError, Error, FileError,
                     InternalError, InvalidArgumentError, InvalidStateError, OutOfMemoryError, UnsupportedError)
from .hf import HFArchitecture, hf_architecture, hf_load, hf_read_options, hf_save
from .layers import (Layer, column_parallel_linear, row_parallel_linear, vocab_parallel_cross_entropy,
                     vocab_parallel_embedding)
from .model import (IGNORE_INDEX, EodFlags, Model, Normalization, ParamInfo, PositionEmbedding, Recompute, eod_masks,
                    model_presets, preset_options)
from .pipeline import Stage, pipeline_run
from .preprocessing import PreprocessResult, merge_datasets, merge_datasets_main, preprocess, preprocess_main
from .runtime import (Feature, GroupKind, Groups, P2PKind, ReduceOp, Runtime, Work, flight_analyze, has_feature,
                      layout_members)
from .schedule import ACTION_DTYPE, ActionKind, Schedule, ScheduleKind
from .tensor import Device, DType, Tensor
from .tokenizer import Tokenizer, TokenizerType
from .training import (CheckpointState, IterationReport, IterationResult, LRDecayStyle, Optimizer, OptimizerKind,
                       ParamFlags, TrainConfig, Trainer, load_checkpoint, read_checkpoint_options, save_checkpoint,
                       supervise, train, train_iteration)

__version__ = raw.ptdp_version()


def version():
    """The library's version as (major, minor, patch)."""
    return tuple(raw.ptdp_get_version())


def status_string(status):
    """The fixed description of a status code."""
    return raw.ptdp_status_string(int(status))


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("data", "errors", "hf", "layers",
                                                                                  "model", "pipeline", "preprocessing",
                                                                                  "runtime", "schedule", "tensor",
                                                                                  "tokenizer", "training")]
