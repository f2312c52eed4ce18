#!/usr/bin/env python3
"""Every field of the Hugging Face config classes ptdp imports is read, known to leave the math
alone, or refused by name (ctest labels "tools;checkpoint;python").

    test_hf_config_fields.py PROBE VENV

VENV is /opt/ptdp-ref-venv (transformers 5.25) or /opt/ptdp-test-venv (transformers 4.46); the
test runs itself with that venv's Python and exits 77 (skipped) with the reason when it is
missing. For each class of GPT2, Llama, Mistral, Qwen2, Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE,
DeepSeek-V2 and DeepSeek-V3
that the version has, a tiny config is made, and every field of the class (its dataclass fields
or __init__ arguments, and every key of to_dict(), PreTrainedConfig's own included) must be in
one of three tables:

  READ     changing it (to the value given, with the companions given) changes the model ptdp
           builds (PROBE: hf_config_probe, ptdp's hf_config_from_json)
  INERT    the documented allow-list (docs/guides/checkpoint-format.md): the model ptdp builds is
           the same with the value given, and the reason says why the math does not change
  REFUSED  the value given changes the math in a way ptdp does not compute: ptdp refuses the
           config with a message naming the field

A field of the class in no table fails the test: a new transformers field is looked at before
ptdp claims to import the class.

The first case is the defect of issue 39: a Llama saved by transformers 5 with rope_theta
500000 writes it only inside rope_parameters, and ptdp must read 500000.
"""
import copy
import dataclasses
import inspect
import json
import os
import subprocess
import sys
import tempfile

PROBE, VENV = sys.argv[1], sys.argv[2]
python = os.path.join(VENV, "bin", "python")
if not os.path.exists(python):
    print(f"SKIP: {VENV} is missing; scripts/install-deps.sh makes it")
    sys.exit(77)
if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    os.execv(python, [python] + sys.argv)

import transformers as T  # noqa: E402

T.logging.set_verbosity_error()
V5 = int(T.__version__.split(".")[0]) >= 5
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def probe(configs):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(configs, f)
    try:
        out = subprocess.run([PROBE, f.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    finally:
        os.unlink(f.name)
    return [json.loads(line) for line in out.stdout.splitlines()]


SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)
MOE = dict(num_experts_per_tok=2)
# DeepSeek's multi-latent attention has a key and value per head; the first layer dense.
DEEPSEEK = dict(MOE, num_key_value_heads=4, moe_intermediate_size=24, n_routed_experts=8, n_shared_experts=1,
                kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1)
CLASSES = {  # name: (config class, constructor arguments)
    "gpt2": ("GPT2Config", dict(n_layer=2, n_embd=32, n_head=4, vocab_size=101, n_positions=32)),
    "llama": ("LlamaConfig", SMALL),
    "mistral": ("MistralConfig", SMALL),
    "qwen2": ("Qwen2Config", SMALL),
    "mixtral": ("MixtralConfig", dict(SMALL, num_local_experts=4, **MOE)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(SMALL, num_experts=4, moe_intermediate_size=24,
                                         shared_expert_intermediate_size=40, **MOE)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(SMALL, num_experts=4, moe_intermediate_size=24, **MOE)),
    "olmoe": ("OlmoeConfig", dict(SMALL, num_experts=4, **MOE)),
    "deepseek_v3": ("DeepseekV3Config", dict(SMALL, **DEEPSEEK, q_lora_rank=24, n_group=4, topk_group=2)),
    "deepseek_v2": ("DeepseekV2Config", dict(SMALL, **DEEPSEEK, q_lora_rank=None)),
}

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
# A RoPE type ptdp does not compute (YaRN it does since issue 40: the refusal names "attention_factor").
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0}
YARN_WITH_ATTENTION_FACTOR = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32,
                              "attention_factor": 1.5}

# Fields whose change makes another model: field -> (value, {companion fields set with it}).
READ = {
    "vocab_size": (113, {}),
    "hidden_size": (64, {}),
    "n_embd": (64, {}),
    "intermediate_size": (40, {}),
    "n_inner": (80, {}),
    "num_hidden_layers": (3, {}),
    "n_layer": (3, {}),
    "num_attention_heads": (8, {}),
    "n_head": (8, {}),
    "num_key_value_heads": (4, {}),
    "head_dim": (16, {}),
    "max_position_embeddings": (128, {}),
    "n_positions": (64, {}),
    "rms_norm_eps": (3e-5, {}),
    "layer_norm_epsilon": (3e-5, {}),
    "initializer_range": (0.03, {}),
    "tie_word_embeddings": (None, {}),  # None: the opposite of the default
    "attention_dropout": (0.1, {}),
    "attn_pdrop": (0.2, {}),
    "resid_pdrop": (0.2, {"embd_pdrop": 0.2}),
    "rope_theta": (12345.0, {}),
    "rope_parameters": ({"rope_theta": 12345.0, "rope_type": "default"}, {}),
    "rope_scaling": (dict(LLAMA3), {}),
    "sliding_window": (16, {"use_sliding_window": True}),
    "use_sliding_window": (True, {"sliding_window": 16}),
    "layer_types": (["sliding_attention", "full_attention"], {"sliding_window": 16}),
    "attention_bias": (True, {"mlp_bias": True}),
    "mlp_bias": (True, {"attention_bias": True}),
    "qkv_bias": (False, {}),
    "num_local_experts": (8, {"num_experts": 8}),
    "num_experts": (8, {"num_local_experts": 8}),
    "num_experts_per_tok": (3, {}),  # k = 1 with renormalised top k is refused (Megatron: a router without gradient)
    "moe_intermediate_size": (16, {}),
    "shared_expert_intermediate_size": (20, {}),
    "norm_topk_prob": (None, {}),
    "decoder_sparse_step": (2, {}),
    "mlp_only_layers": ([1], {}),
    "router_aux_loss_coef": (0.05, {}),
    # DeepSeek-V2/V3
    "n_routed_experts": (16, {}),
    "n_shared_experts": (2, {}),
    "routed_scaling_factor": (1.5, {}),
    "kv_lora_rank": (8, {}),
    "q_lora_rank": (12, {}),
    "qk_nope_head_dim": (8, {}),
    "qk_rope_head_dim": (4, {}),
    "v_head_dim": (8, {}),
    "n_group": (2, {}),
    "topk_group": (1, {}),
    "first_k_dense_replace": (0, {}),
    "rope_interleave": (None, {}),
    "topk_method": ("group_limited_greedy", {"n_group": 2, "topk_group": 1}),
    "num_mtp_layers": (2, {"num_nextn_predict_layers": 2}),
    "num_nextn_predict_layers": (2, {}),
}

# The documented allow-list: field -> (value, reason the math does not change).
INERT = {
    "_name_or_path": ("other/name", "where the model came from"),
    "architectures": (["LlamaForCausalLM"], "the head class to instantiate; model_type decides the model"),
    "transformers_version": ("0.0.1", "the version that wrote the file"),
    "model_type": (None, "names the class (what the file is); walked by converting each class"),
    "dtype": ("bfloat16", "the storage type to load in; ptdp computes with fp32 masters"),
    "torch_dtype": ("bfloat16", "the storage type to load in; ptdp computes with fp32 masters"),
    "use_bfloat16": (True, "the storage type to load in (legacy)"),
    "use_cache": (False, "keeps keys and values between generation steps; no change to the logits"),
    "output_attentions": (True, "returns the attention probabilities as well"),
    "output_hidden_states": (True, "returns every layer's hidden states as well"),
    "output_scores": (True, "returns generation scores as well"),
    "return_dict": (False, "returns a tuple instead of a ModelOutput"),
    "return_dict_in_generate": (True, "generate()'s output type"),
    "torchscript": (True, "clones the tied head instead of sharing it (same values)"),
    "chunk_size_feed_forward": (4, "computes the MLP in chunks of the sequence: the same values"),
    "id2label": ({"0": "a", "1": "b", "2": "c"}, "labels of sequence-classification heads"),
    "label2id": ({"a": 0, "b": 1, "c": 2}, "labels of sequence-classification heads"),
    "num_labels": (3, "labels of sequence-classification heads"),
    "problem_type": ("regression", "the loss of sequence-classification heads"),
    "finetuning_task": ("glue", "a name"),
    "task_specific_params": ({"x": {}}, "pipeline defaults"),
    "tokenizer_class": ("GPT2Tokenizer", "the tokenizer, not the model"),
    "prefix": ("x", "a text prefix for pipelines"),
    "bos_token_id": (7, "token ids used by generation and tokenizers"),
    "eos_token_id": (7, "token ids used by generation and tokenizers"),
    "pad_token_id": (7, "the embedding's padding row gets no gradient in torch; ptdp trains it as Megatron "
                        "does: the forward is the same"),
    "sep_token_id": (7, "token ids used by generation and tokenizers"),
    "decoder_start_token_id": (7, "encoder-decoder generation"),
    "is_decoder": (True, "decoder-only classes ignore it"),
    "tie_encoder_decoder": (True, "encoder-decoder classes only"),
    "cross_attention_hidden_size": (16, "encoder-decoder classes only"),
    "tf_legacy_loss": (True, "TensorFlow classes only"),
    "_attn_implementation_autoset": (True, "which attention kernel torch runs (eager, sdpa, flash): the same math"),
    "pretraining_tp": (2, "transformers 4 splits Llama's matmuls into this many slices: the same sums, "
                          "transformers 5 ignores it"),
    "output_router_logits": (True, "returns router logits (and adds the aux loss to transformers' own loss); "
                                   "ptdp's aux loss is router_aux_loss_coef"),
    "max_window_layers": (1, "which layers slide; ptdp cuts the context to the window whenever "
                             "use_sliding_window or layer_types make any layer slide"),
    "activation_function": ("gelu_pytorch_tanh", "another name of the tanh GeLU"),
    "summary_type": ("last", "GPT2DoubleHeadsModel's head only"),
    "summary_use_proj": (False, "GPT2DoubleHeadsModel's head only"),
    "summary_activation": ("tanh", "GPT2DoubleHeadsModel's head only"),
    "summary_proj_to_labels": (False, "GPT2DoubleHeadsModel's head only"),
    "summary_first_dropout": (0.3, "GPT2DoubleHeadsModel's head only"),
    "reorder_and_upcast_attn": (True, "computes the attention scores in fp32 in half-precision models; ptdp's "
                                      "scores are fp32 already"),
    "n_ctx": (None, "transformers 3's name of n_positions, read when n_positions is missing"),
    "qk_head_dim": (40, "DeepSeek's qk_nope_head_dim + qk_rope_head_dim, which transformers recomputes on load"),

    # Generation defaults stored in transformers 4's configs: how generate() samples, not the model.
    **{k: (v, "a default of generate()") for k, v in {
        "max_length": 7, "min_length": 2, "do_sample": True, "early_stopping": True, "num_beams": 3,
        "num_beam_groups": 1, "diversity_penalty": 0.5, "temperature": 0.5, "top_k": 7, "top_p": 0.5,
        "typical_p": 0.5, "repetition_penalty": 1.5, "length_penalty": 2.0, "no_repeat_ngram_size": 2,
        "encoder_no_repeat_ngram_size": 2, "bad_words_ids": [[1]], "num_return_sequences": 2,
        "remove_invalid_values": True, "exponential_decay_length_penalty": [1, 1.5], "suppress_tokens": [1],
        "begin_suppress_tokens": [1], "forced_bos_token_id": 1, "forced_eos_token_id": 1}.items()},
}

# Values that change the math in ways ptdp does not compute: field -> value (the message names it).
REFUSED = {
    "hidden_act": "gelu",
    "activation_function": "relu",
    "rope_parameters": {"rope_theta": 10000.0, **YARN_WITH_ATTENTION_FACTOR},
    "rope_scaling": dict(DYNAMIC),
    "partial_rotary_factor": 0.5,
    "router_jitter_noise": 0.1,
    "clip_qkv": 8.0,
    "pruned_heads": {"0": [1]},
    "is_encoder_decoder": True,
    "add_cross_attention": True,
    "scale_attn_weights": False,
    "scale_attn_by_inverse_layer_idx": True,
    "embd_pdrop": 0.0,
    "attention_bias": True,
    "mlp_bias": True,
    "num_key_value_heads": 2,
    "norm_topk_prob": False,
}
# Per class: the refused value where it is not REFUSED's.
REFUSED_FIXUPS = {("deepseek_v2", "norm_topk_prob"): True}
# Per class: the inert value and reason where the field is READ elsewhere.
INERT_FIXUPS = {
    ("deepseek_v3", "head_dim"): (16, "DeepSeek's qk_rope_head_dim, which transformers recomputes on load"),
    ("deepseek_v2", "head_dim"): (16, "DeepSeek's qk_rope_head_dim, which transformers recomputes on load"),
}

# Per class: fields whose READ entry does not apply, and the table that does.
OVERRIDES = {
    "llama": {"attention_bias": "REFUSED", "mlp_bias": "REFUSED"},  # alone; together they are READ
    "mistral": {},
    "qwen2": {"sliding_window": "READ"},
    "mixtral": {"sliding_window": "READ"},
    "qwen3_moe": {"attention_bias": "REFUSED"},
    "olmoe": {"attention_bias": "REFUSED"},
    "gpt2": {"activation_function": "INERT"},
    # DeepSeek: a key and value per head; V3 renormalises its top k (k > 1), V2 never; no biases.
    "deepseek_v3": {"attention_bias": "REFUSED", "num_key_value_heads": "REFUSED", "norm_topk_prob": "REFUSED",
                    "head_dim": "INERT"},
    "deepseek_v2": {"attention_bias": "REFUSED", "mlp_bias": "REFUSED", "num_key_value_heads": "REFUSED",
                    "norm_topk_prob": "REFUSED", "head_dim": "INERT"},
}
# Classes whose READ of one field needs another setting there.
READ_FIXUPS = {
    ("mistral", "sliding_window"): (16, {}),
    ("mixtral", "sliding_window"): (16, {}),
    ("deepseek_v3", "num_attention_heads"): (8, {"num_key_value_heads": 8}),
    ("deepseek_v2", "num_attention_heads"): (8, {"num_key_value_heads": 8}),
    ("deepseek_v3", "num_experts_per_tok"): (4, {}),
    ("deepseek_v2", "n_group"): (2, {"topk_group": 1, "topk_method": "group_limited_greedy"}),
    ("deepseek_v2", "topk_group"): (1, {"n_group": 2, "topk_method": "group_limited_greedy"}),
}


def fields_of(cls, instance):
    names = set(instance.to_dict())
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    else:
        names |= {p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")}
    return sorted(names)


def table_of(kind, field):
    forced = OVERRIDES.get(kind, {}).get(field)
    if forced:
        return forced
    if field in READ:
        return "READ"
    if field in INERT:
        return "INERT"
    if field in REFUSED:
        return "REFUSED"
    return None


def case_issue39():
    """The issue's failure: transformers 5 writes rope_theta only in rope_parameters."""
    config = T.LlamaConfig(**SMALL, rope_theta=500000.0) if not V5 else T.LlamaConfig(
        **SMALL, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    written = json.loads(config.to_json_string())
    if V5:
        check("rope_theta" not in written and written["rope_parameters"]["rope_theta"] == 500000.0,
              f"transformers 5 writes rope_theta inside rope_parameters: {written.get('rope_parameters')}")
    got = probe([written])[0]
    check(got.get("rotary_base") == 500000.0, f"ptdp reads rope_theta 500000 from transformers {T.__version__}'s "
                                              f"config, got {got}")
    print(f"issue 39: a Llama of transformers {T.__version__} with rope_theta 500000: ptdp reads "
          f"{got.get('rotary_base')}")


# The hub's config.json of DeepSeek-V3 (without its fp8 quantization_config) and DeepSeek-V2-Lite
# (transformers 4's rope_scaling spelling): the fields of DeepSeek's own code that transformers
# does not read (scoring_func, topk_method, moe_layer_freq, aux_loss_alpha, seq_aux, ep_size) too.
HUB_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "attention_bias": False,
          "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
          "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02,
          "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
          "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
          "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
          "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
          "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000,
          "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                           "original_max_position_embeddings": 4096, "type": "yarn"},
          "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False,
          "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "use_cache": True,
          "v_head_dim": 128, "vocab_size": 129280}
HUB_V2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "attention_bias": False,
               "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
               "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
               "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
               "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
               "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
               "num_hidden_layers": 27, "num_key_value_heads": 16, "q_lora_rank": None, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "rope_theta": 10000,
               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                                "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096, "type": "yarn"},
               "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True, "tie_word_embeddings": False,
               "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16", "use_cache": True,
               "v_head_dim": 128, "vocab_size": 102400}


def case_deepseek_hub():
    """The hub's DeepSeek-V3 and V2-Lite configs read as published; DeepSeek's own fields that would
    make another model than transformers' are refused by name."""
    v3, lite = probe([HUB_V3, HUB_V2_LITE])
    want_v3 = {"multi_latent_attention": True, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128,
               "qk_pos_emb_head_dim": 64, "v_head_dim": 128, "num_experts": 256, "moe_router_topk": 8,
               "moe_ffn_hidden_size": 2048, "moe_shared_expert_intermediate_size": 2048, "ffn_hidden_size": 18432,
               "moe_router_score_function": 1, "moe_router_enable_expert_bias": True, "moe_router_num_groups": 8,
               "moe_router_group_topk": 4, "moe_router_group_score_topk": 2, "moe_router_topk_scaling_factor": 2.5,
               "moe_router_pre_softmax": False, "rope_type": 1, "yarn_factor": 40.0, "yarn_mscale": 1.0,
               "yarn_mscale_all_dim": 1.0, "yarn_original_max_position_embeddings": 4096, "rope_interleave": True,
               "nextn_predict_layers": 1, "moe_load_balancing": 1, "qk_layernorm": True, "add_bias_linear": False}
    bad = {k: (v3.get(k), v) for k, v in want_v3.items() if v3.get(k) != v}
    check(not bad and v3.get("moe_layers") == [False] * 3 + [True] * 58, f"DeepSeek-V3's hub config: {bad or v3}")
    want_lite = {"multi_latent_attention": True, "q_lora_rank": 0, "num_experts": 64, "moe_router_topk": 6,
                 "moe_shared_expert_intermediate_size": 2816, "moe_router_score_function": 0,
                 "moe_router_pre_softmax": True, "moe_router_enable_expert_bias": False, "moe_router_group_topk": 0,
                 "moe_router_topk_scaling_factor": 0.0, "rope_interleave": True, "yarn_mscale": 0.707,
                 "yarn_mscale_all_dim": 0.707}
    bad = {k: (lite.get(k), v) for k, v in want_lite.items() if lite.get(k) != v and not (
        isinstance(v, float) and abs((lite.get(k) or 0) - v) < 1e-6)}
    check(not bad and lite.get("moe_layers") == [False] + [True] * 26, f"DeepSeek-V2-Lite's hub config: {bad or lite}")
    refusals = [(HUB_V3, "quantization_config", {"quant_method": "fp8"}), (HUB_V3, "scoring_func", "softmax"),
                (HUB_V3, "topk_method", "greedy"), (HUB_V3, "moe_layer_freq", 2),
                (HUB_V3, "norm_topk_prob", False), (HUB_V2_LITE, "topk_method", "noaux_tc"),
                (HUB_V2_LITE, "scoring_func", "sigmoid"), (HUB_V2_LITE, "norm_topk_prob", True),
                (HUB_V2_LITE, "num_key_value_heads", 8), (HUB_V2_LITE, "attention_bias", True)]
    got = probe([dict(base, **{field: value}) for base, field, value in refusals])
    for (base, field, value), g in zip(refusals, got):
        check(g.get("error") == "unsupported" and field in g.get("message", ""),
              f"{base['model_type']} {field} = {value!r} is refused naming it: {g}")
    print(f"DeepSeek hub configs: V3 and V2-Lite read as published, {len(refusals)} refusals named")


def walk(kind):
    cls_name, kwargs = CLASSES[kind]
    if not hasattr(T, cls_name):
        print(f"{kind}: transformers {T.__version__} has no {cls_name}")
        return
    cls = getattr(T, cls_name)
    instance = cls(**kwargs)
    base = json.loads(instance.to_json_string(use_diff=False))
    fields = fields_of(cls, instance)
    missing = [f for f in fields if table_of(kind, f) is None]
    check(not missing, f"{cls_name} ({T.__version__}): fields in no table: {missing}")
    variants, what = [], []
    for field in fields:
        table = table_of(kind, field)
        if table is None or field == "model_type":
            continue
        config = copy.deepcopy(base)
        if table == "READ":
            value, companions = READ_FIXUPS.get((kind, field), READ[field])
            if value is None:
                value = not bool(config.get(field))
            if field == "rope_theta" and "rope_parameters" in config:
                config["rope_parameters"] = dict(config["rope_parameters"] or {}, rope_theta=value)
            if field == "rope_scaling" and "rope_parameters" in config:
                config["rope_parameters"] = dict(config["rope_parameters"] or {}, **value)
            config[field] = value
            config.update(companions)
        elif table == "INERT":
            value = INERT_FIXUPS.get((kind, field), INERT.get(field, (None, "")))[0]
            if value is None:
                continue
            config[field] = value
        else:
            config[field] = REFUSED_FIXUPS.get((kind, field), REFUSED.get(field))
        variants.append(config)
        what.append((field, table))
    results = probe([base] + variants)
    reference, results = results[0], results[1:]
    check("error" not in reference, f"{cls_name}: ptdp reads the default config: {reference}")
    counts = {"READ": 0, "INERT": 0, "REFUSED": 0}
    for (field, table), got in zip(what, results):
        counts[table] += 1
        if table == "REFUSED":
            check(got.get("error") == "unsupported" and field in got.get("message", ""),
                  f"{cls_name}.{field} = {REFUSED_FIXUPS.get((kind, field), REFUSED.get(field))!r} is refused "
                  f"naming {field}: {got}")
        elif table == "READ":
            check("error" not in got and got != reference,
                  f"{cls_name}.{field}: changing it changes the model ptdp builds: {got}")
        else:
            inert = INERT_FIXUPS.get((kind, field), INERT.get(field))
            check(got == reference, f"{cls_name}.{field} = {inert[0]!r} ({inert[1]}): the same model, got {got}")
    print(f"{cls_name} ({T.__version__}): {len(fields)} fields: {counts['READ']} read, {counts['INERT']} on the "
          f"allow-list, {counts['REFUSED']} refused")


if __name__ == "__main__":
    case_issue39()
    if hasattr(T, "DeepseekV3Config"):
        case_deepseek_hub()
    for kind in CLASSES:
        walk(kind)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
