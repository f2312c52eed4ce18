"""The GPT model: training steps, evaluation, logits, generation and parameter access.

Token ids and labels are int32 arrays of shape [rows, seq_length] (any array-like; no copy when
already C-contiguous int32). Parameters and gradients come out in their global shape, written
straight into a numpy array (``out=`` to reuse one), and go in from float32 arrays.

Supervised fine-tuning and packed documents: a label of :data:`IGNORE_INDEX` (-100, PyTorch's and
Hugging Face's ignore_index) takes no part in the loss, which is Megatron's masked mean (the mean
over the counted tokens of a microbatch; 0 when none is); ``position_ids`` and
``document_starts`` (int32, the tokens' shape) restart positions and keep attention inside each
document. :func:`eod_masks` builds all three from an end-of-document token, as Megatron's
--eod-mask-loss, --reset-position-ids and --reset-attention-mask do.
"""

from collections import namedtuple
import warnings

import numpy as np

from ._lib import Handle, _raw, as_float32, as_int32, make_enum, make_struct, out_array, struct_to_dict

Recompute = make_enum("Recompute", "ptdp_recompute", "PTDP_RECOMPUTE_",
                      "Activation recomputation (ptdp_recompute, ``--recompute-granularity``): NONE, FULL or "
                      "SELECTIVE.")
Attention = make_enum("Attention", "ptdp_attention", "PTDP_ATTENTION_",
                      "How attention is computed (ptdp_attention, ``--attention-backend``): AUTO, FUSED or UNFUSED.")
Normalization = make_enum("Normalization", "ptdp_normalization", "PTDP_NORMALIZATION_",
                          "The norm of every norm layer (ptdp_normalization, ``--normalization``): LAYERNORM or "
                          "RMSNORM.")
PositionEmbedding = make_enum("PositionEmbedding", "ptdp_position_embedding", "PTDP_POSITION_EMBEDDING_",
                              "How positions enter the model (ptdp_position_embedding, "
                              "``--position-embedding-type``): LEARNED_ABSOLUTE, ROPE or NONE.")
RopeType = make_enum("RopeType", "ptdp_rope_type", "PTDP_ROPE_TYPE_",
                     "How RoPE's frequencies are made (ptdp_rope_type, ``--rope-type``): ROPE or YARN.")

MoeScoreFunction = make_enum("MoeScoreFunction", "ptdp_moe_score_function", "PTDP_MOE_SCORE_",
                             "The MoE router's score function (ptdp_moe_score_function, "
                             "``--moe-router-score-function``): SOFTMAX or SIGMOID.")
MoeLoadBalancing = make_enum("MoeLoadBalancing", "ptdp_moe_load_balancing", "PTDP_MOE_BALANCING_",
                             "The MoE router's balancing (ptdp_moe_load_balancing, "
                             "``--moe-router-load-balancing-type``): AUX_LOSS, SEQ_AUX_LOSS, GLOBAL_AUX_LOSS or NONE.")
MoeDropPolicy = make_enum("MoeDropPolicy", "ptdp_moe_drop_policy", "PTDP_MOE_DROP_",
                          "Which tokens an expert keeps with a capacity factor (ptdp_moe_drop_policy, "
                          "``--moe-token-drop-policy``): PROBS or POSITION.")
MoeDispatcher = make_enum("MoeDispatcher", "ptdp_moe_dispatcher", "PTDP_MOE_DISPATCHER_",
                          "How tokens reach their experts (ptdp_moe_dispatcher, ``--moe-token-dispatcher-type``): "
                          "ALLTOALL or ALLGATHER.")

EodFlags = make_enum("EodFlags", "ptdp_eod_flags", "PTDP_EOD_",
                     "Megatron's end-of-document rules (ptdp_eod_flags): MASK_LOSS, RESET_POSITION_IDS, "
                     "RESET_ATTENTION_MASK.", flags=True)

#: The label that takes no part in the loss (PyTorch's and Hugging Face's ignore_index).
IGNORE_INDEX = -100

ParamInfo = namedtuple("ParamInfo", "name shape partition_dim")
ParamInfo.__doc__ = "A named parameter: global shape, and the dimension split over tensor ranks (-1: none)."


def eod_masks(tokens, seq_length, eod_token_id, labels=None, eod_mask_loss=True, reset_position_ids=True,
              reset_attention_mask=True):
    """Megatron's masks of samples ``tokens`` [rows, seq_length] from their end-of-document token
    (ptdp_eod_masks): a document ends with its eod token, the next token starts another.

    Returns ``(labels, position_ids, document_starts)``: ``labels`` a copy of the given ones with
    :data:`IGNORE_INDEX` wherever the token is the eod (with ``eod_mask_loss``; required then),
    ``position_ids`` each token's position within its document (with ``reset_position_ids``, else
    None) and ``document_starts`` the first position of its document (with
    ``reset_attention_mask``, else None), ready for :meth:`Model.forward_backward` and the other
    calls that take them.

    >>> import numpy as np, ptdp
    >>> tokens = np.array([[5, 0, 7, 8]], dtype=np.int32)     # 0 ends the first document
    >>> labels, positions, starts = ptdp.eod_masks(tokens, 4, 0, labels=[[0, 7, 8, 9]])
    >>> labels.tolist(), positions.tolist(), starts.tolist()
    ([[0, -100, 8, 9]], [[0, 1, 0, 1]], [[0, 0, 2, 2]])
    """
    t = as_int32(tokens, "tokens")
    seq_length = int(seq_length)
    if seq_length <= 0 or t.size % seq_length:
        raise ValueError(f"tokens has {t.size} elements, not a multiple of seq_length = {seq_length}")
    rows = t.size // seq_length
    flags = 0
    out_labels = positions = starts = None
    if eod_mask_loss:
        if labels is None:
            raise ValueError("eod_masks: eod_mask_loss needs the labels")
        out_labels = as_int32(labels, "labels", t.size).copy()
        flags |= _raw.PTDP_EOD_MASK_LOSS
    elif labels is not None:
        out_labels = as_int32(labels, "labels", t.size).copy()
    if reset_position_ids:
        positions = np.zeros(t.shape if t.ndim == 2 else (rows, seq_length), dtype=np.int32)
        flags |= _raw.PTDP_EOD_RESET_POSITION_IDS
    if reset_attention_mask:
        starts = np.zeros(t.shape if t.ndim == 2 else (rows, seq_length), dtype=np.int32)
        flags |= _raw.PTDP_EOD_RESET_ATTENTION_MASK
    scratch = np.zeros(1, dtype=np.int32)  # stands for an output the flags do not ask for
    _raw.ptdp_eod_masks(t, rows, seq_length, int(eod_token_id), flags,
                        out_labels if out_labels is not None else scratch,
                        positions if positions is not None else None,
                        starts if starts is not None else None)
    return out_labels, positions, starts


class _Masks:
    """A ``ptdp_batch_masks`` over ``count`` int32 elements of position ids and document starts
    (either None), holding the arrays while a call reads them; ``struct`` is None when both
    are."""

    def __init__(self, position_ids, document_starts, count):
        self.arrays = (None if position_ids is None else as_int32(position_ids, "position_ids", count),
                       None if document_starts is None else as_int32(document_starts, "document_starts", count))
        self.struct = None
        if any(a is not None for a in self.arrays):  # not `!= (None, None)`: numpy compares elementwise
            self.struct = make_struct("ptdp_batch_masks")
            if self.arrays[0] is not None:
                self.struct.position_ids = self.arrays[0]
            if self.arrays[1] is not None:
                self.struct.document_starts = self.arrays[1]


def model_presets():
    """The names of the model presets (``--model-preset`` of ptdp-train and ptdp-plan), in order.

    >>> import ptdp
    >>> ptdp.model_presets()[:2]
    ['gpt2-124m', 'gpt2-355m']
    """
    from .training import _text  # imported here: training imports this module
    return [_text(lambda buffer, i=i: _raw.ptdp_model_preset_name(i, buffer))
            for i in range(_raw.ptdp_model_preset_count())]


def preset_options(name, **fields):
    """The ``ptdp_gpt_options`` of a named preset (any case) as a dict, with ``fields`` replaced.
    An unknown name raises :class:`ptdp.InvalidArgumentError` listing the presets.

    >>> import ptdp
    >>> options = ptdp.preset_options("GPT2-124M", seq_length=128, recompute_granularity="selective")
    >>> options["num_layers"], options["hidden_size"], options["seq_length"]
    (12, 768, 128)
    >>> options["recompute_granularity"] == ptdp.Recompute.SELECTIVE
    True
    """
    opts = make_struct("ptdp_gpt_options")
    _raw.ptdp_gpt_options_from_preset(str(name), opts)
    return struct_to_dict(make_struct("ptdp_gpt_options", opts, **fields))


def pipeline_options(trace_path=None, scatter_gather=None, masks=None):
    """A ``ptdp_pipeline_options``; ``masks`` is a :class:`_Masks` (kept alive by the caller)."""
    return make_struct("ptdp_pipeline_options", trace_path=None if trace_path is None else str(trace_path),
                       scatter_gather=scatter_gather, masks=None if masks is None else masks.struct)


class Model(Handle):
    """This rank's share of a GPT (``ptdp_model``) over ``groups``.

    ``options`` is a ``ptdp_gpt_options`` struct or a dict of its fields (for example
    ``TrainConfig.gpt_options()``); ``preset`` starts from a named model instead (see
    :func:`model_presets`); keyword arguments set single fields with Megatron's names
    (num_layers, hidden_size, num_attention_heads, seq_length, vocab_size, hidden_dropout, ...),
    the Llama family's included: ``normalization=Normalization.RMSNORM``, ``swiglu=1``,
    ``position_embedding_type=PositionEmbedding.ROPE``, ``rotary_base``, ``num_query_groups``,
    ``kv_channels``, ``disable_bias_linear=1``, ``add_qkv_bias``, ``qk_layernorm`` (and
    ``qk_layernorm_across_heads=1``, OLMoE's norms over the whole projections),
    ``use_rope_scaling`` and the rope factors, YaRN (``rope_type="yarn"``, ``rotary_scaling_factor``,
    ``mscale``, ``mscale_all_dim``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``;
    docs/deepseek.md), and mixture of experts: ``num_experts``,
    ``moe_router_topk``, ``moe_ffn_hidden_size``, ``moe_layer_freq`` ("2" or Megatron's list
    pattern "[1,0,1]"), ``moe_router_score_function="sigmoid"``, ``moe_aux_loss_coeff``, ...
    (docs/moe.md), and multi-latent attention: ``multi_latent_attention=1``, ``q_lora_rank``,
    ``kv_lora_rank``, ``qk_head_dim``, ``qk_pos_emb_head_dim``, ``v_head_dim`` (docs/deepseek.md).
    Enum fields take names: ``normalization="rmsnorm"``,
    ``position_embedding_type="rope"``, ``recompute_granularity="full"``, ``precision="bf16"``,
    ``attention="unfused"``, ``moe_token_dispatcher_type="allgather"``.

    The model depends on its groups: closing them closes the model (and its optimizer) first.

    >>> import numpy as np, ptdp
    >>> with ptdp.Runtime() as rt, rt.groups() as groups:
    ...     model = ptdp.Model(groups, num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=8,
    ...                        vocab_size=64, normalization="RMSNorm", swiglu=1, position_embedding_type="rope",
    ...                        recompute_granularity="full")
    ...     tokens = np.arange(16, dtype=np.int32).reshape(2, 8)
    ...     loss = model.forward_backward(tokens, (tokens + 1) % 64)
    ...     model.logits(tokens).shape, model.get_options()["normalization"] == ptdp.Normalization.RMSNORM
    ...     [p.name for p in model.parameters()][:2]
    ((2, 8, 64), True)
    ['embedding.word_embeddings.weight', 'decoder.layers.0.input_layernorm.weight']
    >>> model.closed
    True
    """

    _destroy = staticmethod(_raw.ptdp_model_destroy)

    def __init__(self, groups, options=None, preset=None, **fields):
        if preset is not None:
            if options is not None:
                raise TypeError("Model: give options or preset, not both")
            options = preset_options(preset)
        opts = make_struct("ptdp_gpt_options", options, **fields)
        super().__init__(_raw.ptdp_model_create(groups.handle, opts), parent=groups)
        self.groups = groups
        self.options = struct_to_dict(opts)
        self.seq_length = opts.seq_length
        self.vocab_size = opts.vocab_size

    def get_options(self):
        """The options the model was built with, its defaults resolved (ptdp_model_get_options),
        as a dict."""
        opts = make_struct("ptdp_gpt_options")
        _raw.ptdp_model_get_options(self.handle, opts)
        return struct_to_dict(opts)

    def _rows(self, tokens, labels, rows=None):
        t = as_int32(tokens, "tokens")
        if t.size % self.seq_length:
            raise ValueError(f"tokens has {t.size} elements, not a multiple of seq_length = {self.seq_length}")
        n = t.size // self.seq_length if rows is None else rows
        t = as_int32(t, "tokens", n * self.seq_length)
        return t, None if labels is None else as_int32(labels, "labels", n * self.seq_length), n

    def forward_backward(self, tokens, labels, micro_batch_size=None, iteration=0, microbatch=0, grad_scale=1.0,
                         position_ids=None, document_starts=None):
        """Forward and backward of one microbatch (a model not split into stages); returns the
        masked mean loss. Labels may be :data:`IGNORE_INDEX`; ``position_ids`` and
        ``document_starts`` (the tokens' shape, None: the defaults) restart positions and keep
        attention inside documents."""
        t, l, b = self._rows(tokens, labels, micro_batch_size)
        m = _Masks(position_ids, document_starts, t.size)
        return _raw.ptdp_model_forward_backward(self.handle, t, l, b, int(iteration), int(microbatch),
                                                float(grad_scale), pipeline_options(masks=m))

    def forward(self, tokens, labels, micro_batch_size=None, iteration=0, microbatch=0, training=False,
                position_ids=None, document_starts=None):
        """Forward only; returns the masked mean loss (masks as in :meth:`forward_backward`)."""
        t, l, b = self._rows(tokens, labels, micro_batch_size)
        m = _Masks(position_ids, document_starts, t.size)
        return _raw.ptdp_model_forward(self.handle, t, l, b, int(iteration), int(microbatch), int(bool(training)),
                                       pipeline_options(masks=m))

    def pipeline_forward_backward(self, schedule, tokens, labels, micro_batch_size, iteration=0, trace_path=None,
                                  scatter_gather=None, position_ids=None, document_starts=None):
        """Forward and backward of a global batch through a pipeline schedule (no optimizer step);
        returns the loss (the mean of the microbatches' masked means). Gradients accumulate: call
        :meth:`zero_grad` between steps. Masks as in :meth:`forward_backward`, for the whole batch."""
        t, l, _ = self._rows(tokens, labels, schedule.m * int(micro_batch_size))
        m = _Masks(position_ids, document_starts, t.size)
        options = pipeline_options(trace_path, scatter_gather, m)
        return _raw.ptdp_model_pipeline_forward_backward(self.handle, schedule.handle, t, l, int(micro_batch_size),
                                                         int(iteration), options)

    def train_step(self, *args, **kwargs):
        """Deprecated since 0.2: the old name of :meth:`pipeline_forward_backward`."""
        warnings.warn("Model.train_step is deprecated: use Model.pipeline_forward_backward", DeprecationWarning,
                      stacklevel=2)
        return self.pipeline_forward_backward(*args, **kwargs)

    def evaluate(self, tokens, labels, micro_batch_size, num_microbatches, position_ids=None, document_starts=None):
        """Forward-only mean loss of m microbatches through the pipeline, averaged over replicas
        (masks as in :meth:`forward_backward`)."""
        t, l, _ = self._rows(tokens, labels, int(micro_batch_size) * int(num_microbatches))
        m = _Masks(position_ids, document_starts, t.size)
        return _raw.ptdp_model_evaluate(self.handle, t, l, int(micro_batch_size), int(num_microbatches),
                                        pipeline_options(masks=m))

    def logits(self, tokens, out=None):
        """Logits [batch, seq_length, vocab_size] of ``tokens`` [batch, seq_length]."""
        t, _, batch = self._rows(tokens, None)
        shape = (batch, self.seq_length, self.vocab_size)
        a = out_array(out, shape, np.float32, "Model.logits")
        _raw.ptdp_model_logits(self.handle, t, batch, a)
        return a.reshape(shape) if out is None else a

    def generate(self, prompt, max_new_tokens=None, top_k=None, temperature=None, seed=None, kv_cache=True):
        """New tokens continuing ``prompt`` (int32 ids), as an int32 array. With ``kv_cache``
        (the default) every layer's keys and values are cached; without, the window is
        recomputed for every token (the same tokens, slower)."""
        opts = make_struct("ptdp_generate_options", max_new_tokens=max_new_tokens, top_k=top_k,
                           temperature=temperature, seed=seed, no_kv_cache=0 if kv_cache else 1)
        p = as_int32(prompt, "prompt").reshape(-1)
        out = np.zeros(max(opts.max_new_tokens, 1), dtype=np.int32)
        count = _raw.ptdp_model_generate(self.handle, p, p.size, opts, out)
        return out[:count]

    def zero_grad(self):
        _raw.ptdp_model_zero_grad(self.handle)

    def parameters(self):
        """Every named parameter of this rank's chunks (:class:`ParamInfo`)."""
        infos = []
        for i in range(_raw.ptdp_model_num_params(self.handle)):
            name, ndim, shape, partition_dim = _raw.ptdp_model_param_info(self.handle, i)
            infos.append(ParamInfo(name, tuple(int(x) for x in shape[:ndim]), partition_dim))
        return infos

    def _shape(self, name):
        for info in self.parameters():
            if info.name == name:
                return info.shape
        raise KeyError(f"no parameter named '{name}'")

    def get_param(self, name, out=None):
        """The full global value of a parameter (collective over the model-parallel group)."""
        shape = self._shape(name)
        a = out_array(out, shape, np.float32, "Model.get_param")
        _raw.ptdp_model_get_param(self.handle, name, a)
        return a

    def get_grad(self, name, out=None):
        """The full global gradient of a parameter (collective over the model-parallel group)."""
        shape = self._shape(name)
        a = out_array(out, shape, np.float32, "Model.get_grad")
        _raw.ptdp_model_get_grad(self.handle, name, a)
        return a

    def set_param(self, name, value):
        """Sets a parameter from its full global value (every rank passes the same)."""
        _raw.ptdp_model_set_param(self.handle, name, as_float32(value, name))

    def state_dict(self):
        """Every parameter as a dict of numpy arrays (collective over the model-parallel group)."""
        return {info.name: self.get_param(info.name) for info in self.parameters()}
