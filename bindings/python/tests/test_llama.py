"""The Llama family's options through the Python API: a tiny Llama-style model (RMSNorm, SwiGLU,
RoPE, grouped-query attention, no bias, untied head) built from keyword fields, from ptdp-train's
flags and from a preset, trained for a few steps; the presets listed and filled."""
import numpy as np
import pytest

import ptdp

# h = 32, a = 4 heads of 8 dims, g = 2 query groups, SwiGLU width 48.
LLAMA = dict(num_layers=2, hidden_size=32, num_attention_heads=4, ffn_hidden_size=48, seq_length=16, vocab_size=64,
             make_vocab_size_divisible_by=32, hidden_dropout=0.0, attention_dropout=0.0, seed=11,
             normalization=ptdp.Normalization.RMSNORM, layernorm_epsilon=1e-6, swiglu=1,
             position_embedding_type=ptdp.PositionEmbedding.ROPE, rotary_base=500000.0, num_query_groups=2,
             disable_bias_linear=1, untie_embeddings_and_output_weights=1)


def batch(rows, seq_length, vocab, seed=3):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=(rows, seq_length + 1), dtype=np.int32)
    return np.ascontiguousarray(tokens[:, :-1]), np.ascontiguousarray(tokens[:, 1:])


def train_steps(model, steps, micro_batch_size=2, microbatches=2):
    tokens, labels = batch(micro_batch_size * microbatches, model.seq_length, model.vocab_size)
    with ptdp.Optimizer(model, lr=1e-2, weight_decay=0.0) as optimizer, \
            ptdp.Schedule("1f1b", 1, microbatches) as schedule:
        return [ptdp.train_iteration(model, optimizer, schedule, tokens, labels, micro_batch_size, it).loss
                for it in range(steps)]


def test_tiny_llama_trains(groups):
    with ptdp.Model(groups, **LLAMA) as model:
        shapes = {p.name: p.shape for p in model.parameters()}
        assert "embedding.position_embeddings.weight" not in shapes  # RoPE: no position table
        assert shapes["decoder.layers.0.self_attention.linear_qkv.weight"] == ((4 + 2 * 2) * 8, 32)
        assert shapes["decoder.layers.0.mlp.linear_fc1.weight"] == (2 * 48, 32)
        assert not any(name.endswith(".bias") for name in shapes)  # no linear bias, RMSNorm has none
        assert "output_layer.weight" in shapes  # untied
        losses = train_steps(model, 8)
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0]  # one repeated batch: the loss must fall


def test_options_come_back_resolved(groups):
    with ptdp.Model(groups, **LLAMA) as model:
        options = model.get_options()
    for key, value in LLAMA.items():
        assert options[key] == pytest.approx(value), key
    assert options["rotary_percent"] == 1.0  # 0 in the struct: the default
    assert options["rope_scaling_factor"] == 8.0
    assert options["rope_original_max_position_embeddings"] == 8192


def test_llama_flags_give_the_same_model(groups):
    flags = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 48 --seq-length 16 "
             "--vocab-size 64 --make-vocab-size-divisible-by 32 --hidden-dropout 0 --attention-dropout 0 --seed 11 "
             "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --position-embedding-type rope "
             "--rotary-base 500000 --group-query-attention --num-query-groups 2 --disable-bias-linear "
             "--untie-embeddings-and-output-weights")
    with ptdp.TrainConfig(flags) as config:
        gpt = config.gpt_options()
    for key, value in LLAMA.items():
        assert gpt[key] == pytest.approx(value), key
    with ptdp.Model(groups, gpt) as a, ptdp.Model(groups, **LLAMA) as b:
        name = "decoder.layers.1.self_attention.linear_qkv.weight"
        np.testing.assert_array_equal(a.get_param(name), b.get_param(name))  # same seed, same shapes


def test_yarn_from_fields_and_flags(groups):
    yarn = dict(LLAMA, rope_type="yarn", rotary_scaling_factor=4.0, original_max_position_embeddings=8)
    flags = ("--num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 48 --seq-length 16 "
             "--vocab-size 64 --make-vocab-size-divisible-by 32 --hidden-dropout 0 --attention-dropout 0 --seed 11 "
             "--normalization RMSNorm --norm-epsilon 1e-6 --swiglu --position-embedding-type rope "
             "--rotary-base 500000 --group-query-attention --num-query-groups 2 --disable-bias-linear "
             "--untie-embeddings-and-output-weights --rope-type yarn --rotary-scaling-factor 4 "
             "--original-max-position-embeddings 8")
    with ptdp.TrainConfig(flags) as config:
        gpt = config.gpt_options()
    assert gpt["rope_type"] == ptdp.RopeType.YARN and gpt["rotary_scaling_factor"] == 4.0
    tokens, _ = batch(2, 16, 64)
    with ptdp.Model(groups, gpt) as a, ptdp.Model(groups, **yarn) as b, ptdp.Model(groups, **LLAMA) as plain:
        assert b.get_options()["beta_fast"] == 32.0  # Megatron's default, resolved
        np.testing.assert_array_equal(a.logits(tokens), b.logits(tokens))
        assert not np.array_equal(a.logits(tokens), plain.logits(tokens))  # the same weights, YaRN's positions


def test_presets_are_listed_and_fill_the_options(groups):
    names = ptdp.model_presets()
    assert "llama-3.2-1b" in names and "gpt2-124m" in names
    llama = ptdp.preset_options("Llama-3.2-1B")
    assert (llama["hidden_size"], llama["num_attention_heads"], llama["num_query_groups"]) == (2048, 32, 8)
    assert llama["normalization"] == ptdp.Normalization.RMSNORM
    assert llama["position_embedding_type"] == ptdp.PositionEmbedding.ROPE
    assert llama["swiglu"] == 1 and llama["disable_bias_linear"] == 1 and llama["use_rope_scaling"] == 1
    with pytest.raises(ptdp.InvalidArgumentError, match="no model preset named 'llama-9'.*llama-3.2-1b"):
        ptdp.preset_options("llama-9")
    # The preset's architecture at a tiny size trains.
    small = dict(num_layers=1, hidden_size=32, num_attention_heads=4, num_query_groups=2, ffn_hidden_size=64,
                 vocab_size=64, make_vocab_size_divisible_by=32, seq_length=16)
    with ptdp.Model(groups, preset="llama-3.2-1b", **small) as model:
        options = model.get_options()
        assert options["use_rope_scaling"] == 1 and options["rotary_base"] == 500000.0
        losses = train_steps(model, 3)
    assert all(np.isfinite(losses))


def test_generation_with_and_without_the_kv_cache(groups):
    """The key/value cache draws the tokens of recomputing the window, also once it slides."""
    with ptdp.Model(groups, **LLAMA) as model:
        train_steps(model, 3)
        prompt = np.arange(5, dtype=np.int32)
        for top_k, seed in ((1, 1), (5, 7)):
            cached = model.generate(prompt, max_new_tokens=20, top_k=top_k, seed=seed)  # 25 > seq_length 16
            plain = model.generate(prompt, max_new_tokens=20, top_k=top_k, seed=seed, kv_cache=False)
            assert len(cached) == 20
            np.testing.assert_array_equal(cached, plain)
