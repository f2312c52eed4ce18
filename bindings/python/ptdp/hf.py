"""Hugging Face checkpoints: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM and the mixtures of experts MixtralForCausalLM, Qwen3MoeForCausalLM and
Qwen2MoeForCausalLM directories (config.json with model.safetensors, or its shards) in and out.

>>> import tempfile, numpy as np, ptdp
>>> tiny = dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=16, vocab_size=64)
>>> with ptdp.Runtime() as rt, rt.groups() as groups, tempfile.TemporaryDirectory() as hf_dir:
...     model = ptdp.Model(groups, **tiny)
...     ptdp.hf_save(hf_dir, model, dtype="f32")                 # a GPT2LMHeadModel directory
...     options = ptdp.hf_read_options(hf_dir, seq_length=8)     # config.json -> Model's options
...     copy = ptdp.Model(groups, options)                         # any layout (t, p, d, v)
...     ptdp.hf_load(hf_dir, copy)                                 # the weights
...     name = "decoder.layers.1.mlp.linear_fc1.weight"
...     ptdp.hf_architecture(hf_dir), np.array_equal(copy.get_param(name), model.get_param(name))
(<HFArchitecture.GPT2: 1>, True)

The layouts are converted, not reinterpreted (GPT-2's Conv1D weights transposed, q/k/v grouped
per query group, gate and up stacked, the vocabulary padded and cut), so a model imported and
exported again gives the same tensors, bit for bit, in the dtype they were stored in.
"""

import os

from ._lib import _raw, enum_member, make_enum, make_struct, struct_to_dict
from .tensor import DType

HFArchitecture = make_enum("HFArchitecture", "ptdp_hf_architecture", "PTDP_HF_ARCHITECTURE_",
                           "A Hugging Face model class (ptdp_hf_architecture): AUTO (on export: the class the "
                           "model's settings call for), GPT2, LLAMA, MISTRAL, QWEN2, MIXTRAL, QWEN3_MOE, QWEN2_MOE, "
                           "OLMOE (recognised, refused on import), also named by the classes' names "
                           "(\"LlamaForCausalLM\", ...).",
                           aliases={"GPT2LMHeadModel": "GPT2", "LlamaForCausalLM": "LLAMA",
                                    "MistralForCausalLM": "MISTRAL", "Qwen2ForCausalLM": "QWEN2",
                                    "MixtralForCausalLM": "MIXTRAL", "Qwen3MoeForCausalLM": "QWEN3_MOE",
                                    "Qwen2MoeForCausalLM": "QWEN2_MOE", "OlmoeForCausalLM": "OLMOE"})


def _read(directory):
    options = make_struct("ptdp_gpt_options")  # struct_size set: the library fills that many bytes
    architecture = _raw.ptdp_hf_read_options(os.fspath(directory), options)
    return options, HFArchitecture(architecture)


def hf_read_options(directory, **fields):
    """The model options a Hugging Face directory's config.json describes, as a dict for
    :class:`ptdp.Model`, with ``fields`` replaced (lower ``seq_length``, set dropout, ...).
    seq_length is the model's context; the training settings take their defaults. A config ptdp
    does not compute raises :class:`ptdp.UnsupportedError` naming the setting; a missing or
    malformed config.json :class:`ptdp.FileError`."""
    options, _ = _read(directory)
    return struct_to_dict(make_struct("ptdp_gpt_options", options, **fields))


def hf_architecture(directory):
    """The :class:`HFArchitecture` of a Hugging Face directory's config.json."""
    return _read(directory)[1]


def hf_load(directory, model):
    """Sets every parameter of ``model`` (built from :func:`hf_read_options`; the training
    settings and the layout may differ) from a Hugging Face checkpoint. Collective over the
    model's world; on any failure the model is unchanged."""
    _raw.ptdp_hf_load(os.fspath(directory), model.handle)


def hf_save(directory, model, architecture=None, dtype=None, max_shard_size=None, base_config=None):
    """Writes ``model`` (any layout) as a Hugging Face checkpoint in ``directory`` (created when
    missing): config.json and model.safetensors. ``architecture``: the class to write (an
    :class:`HFArchitecture` or its name, e.g. "llama"; default AUTO); ``dtype``: the tensors'
    storage type (``ptdp.DType.F32`` or "f32", the default, ``BF16`` or ``F16``);
    ``max_shard_size``: bytes per file, above which the tensors are split over shards with an
    index, as Hugging Face splits them (default: one file); ``base_config``: a config.json whose
    fields ptdp does not describe (token ids, ...) are kept. Collective over the model's world;
    world rank 0 writes."""
    options = make_struct("ptdp_hf_save_options",
                          architecture=None if architecture is None else enum_member(HFArchitecture, architecture,
                                                                                     "hf_save: architecture"),
                          dtype=None if dtype is None else enum_member(DType, dtype, "hf_save: dtype"),
                          max_shard_size=None if max_shard_size is None else int(max_shard_size),
                          base_config=None if base_config is None else os.fspath(base_config))
    _raw.ptdp_hf_save(os.fspath(directory), model.handle, options)


__all__ = ["HFArchitecture", "hf_read_options", "hf_architecture", "hf_load", "hf_save"]
