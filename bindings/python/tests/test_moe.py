"""Mixture of experts through the Python API: the MoE fields of the model options with
Megatron's names (enum fields by name, the layer pattern as a string), a tiny MoE model built
and its options read back, Megatron's refusals as InvalidArgumentError naming the flags, the MoE
presets, ptdp-train's MoE flags and the expert group kinds of a layout."""
import pytest

import ptdp

# A tiny Mixtral-shaped model: h 16, 4 experts of width 24, top-2, SwiGLU, RMSNorm, RoPE.
MOE = dict(num_layers=2, hidden_size=16, num_attention_heads=2, ffn_hidden_size=32, seq_length=8, vocab_size=64,
           make_vocab_size_divisible_by=32, hidden_dropout=0.0, attention_dropout=0.0,
           normalization="rmsnorm", swiglu=1, position_embedding_type="rope", disable_bias_linear=1,
           untie_embeddings_and_output_weights=1, num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=24)


def test_moe_options_come_back(groups):
    with ptdp.Model(groups, **MOE, moe_layer_freq="[1,0]", moe_router_score_function="sigmoid",
                    moe_router_enable_expert_bias=1, moe_token_dispatcher_type="allgather",
                    moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=0.01) as model:
        options = model.get_options()
    assert options["num_experts"] == 4
    assert options["moe_router_topk"] == 2
    assert options["moe_layer_freq"] == "2"  # [1, 0] over two layers: every second layer
    assert options["moe_router_score_function"] == ptdp.MoeScoreFunction.SIGMOID
    assert options["moe_token_dispatcher_type"] == ptdp.MoeDispatcher.ALLGATHER
    assert options["moe_router_load_balancing_type"] == ptdp.MoeLoadBalancing.SEQ_AUX_LOSS
    assert options["moe_router_bias_update_rate"] == pytest.approx(1e-3)  # 0 in the struct: the default
    assert options["moe_aux_loss_coeff"] == pytest.approx(0.01)


@pytest.mark.parametrize("fields, words", [
    (dict(moe_router_topk=5), "moe_router_topk (--moe-router-topk) 5 is larger than num_experts (--num-experts) 4"),
    (dict(moe_router_topk=1), "--moe-router-pre-softmax"),
    (dict(moe_router_enable_expert_bias=1), "--moe-router-score-function"),
    (dict(moe_layer_freq="[1]*len([1])"), "options->moe_layer_freq"),
    (dict(moe_router_num_groups=3, moe_router_group_topk=1), "is not divisible by moe_router_num_groups"),
    (dict(moe_router_topk_limited_devices=2), "needs moe_router_num_groups (--moe-router-num-groups)"),
    (dict(moe_router_group_score_topk=1), "--moe-router-group-score-topk) 1 needs group-limited routing"),
])
def test_megatrons_refusals_name_the_flags(groups, fields, words):
    options = dict(MOE)
    options.update(fields)
    with pytest.raises(ptdp.InvalidArgumentError) as refused:
        ptdp.Model(groups, **options)
    assert words in str(refused.value)


def test_deepseek_routing_options_come_back(groups):
    # Device-limited routing over the 2 groups of e = 2, each group scored by its best expert.
    with ptdp.Model(groups, **MOE, moe_router_num_groups=2, moe_router_topk_limited_devices=1,
                    moe_router_group_score_topk=1) as model:
        options = model.get_options()
    assert options["moe_router_num_groups"] == 2
    assert options["moe_router_group_topk"] == 1
    assert options["moe_router_topk_limited_devices"] == 1
    assert options["moe_router_group_score_topk"] == 1


def test_moe_enums_take_megatrons_spellings():
    options = ptdp.preset_options("olmoe-1b-7b", moe_token_drop_policy="position", moe_expert_capacity_factor=1.0)
    assert options["num_experts"] == 64
    assert options["moe_router_topk"] == 8
    assert options["moe_router_pre_softmax"] == 1
    assert options["moe_token_drop_policy"] == ptdp.MoeDropPolicy.POSITION
    with pytest.raises(ptdp.InvalidArgumentError, match="flex"):
        ptdp.preset_options("olmoe-1b-7b", moe_token_dispatcher_type="flex")
    for name in ("mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "olmoe-1b-7b",
                 "qwen2-57b-a14b"):
        assert name in ptdp.model_presets()


def test_train_flags_reach_the_options():
    flags = ("--num-layers 4 --num-experts 8 --moe-router-topk 2 --moe-layer-freq ([1]*1+[0]*1)*2 "
             "--expert-model-parallel-size 2 --expert-tensor-parallel-size 1 --disable-bias-linear")
    with ptdp.TrainConfig(flags) as config:
        gpt = config.gpt_options()
        assert gpt["num_experts"] == 8
        assert gpt["moe_layer_freq"] == "2"
        parallel = config.parallel_options()
        assert parallel["expert_model_parallel_size"] == 2
        assert parallel["expert_tensor_parallel_size"] == 1
    with pytest.raises(ptdp.InvalidArgumentError, match="--num-experts 6 is not a multiple of "
                                                        "--expert-model-parallel-size 4"):
        ptdp.TrainConfig("--num-experts 6 --expert-model-parallel-size 4")


def test_expert_group_kinds():
    experts = dict(expert_model_parallel_size=4, expert_tensor_parallel_size=1)
    assert ptdp.layout_members(8, 5, ptdp.GroupKind.EXPERT_MODEL, tensor=2, options=experts) == [4, 5, 6, 7]
    assert ptdp.layout_members(8, 5, "expert_data", tensor=2, options=experts) == [1, 5]
    assert ptdp.layout_members(8, 5, "expert_tensor_and_model", tensor=2, options=experts) == [4, 5, 6, 7]
    assert ptdp.layout_members(8, 5, "tensor_context", tensor=2, options=experts) == [4, 5]


def test_moe_metrics_after_an_iteration(groups):
    import math
    import numpy as np
    with ptdp.Model(groups, **MOE, moe_router_score_function="sigmoid", moe_router_enable_expert_bias=1,
                    moe_router_bias_update_rate=0.01, moe_aux_loss_coeff=0.01) as model, \
            ptdp.Optimizer(model) as optimizer, ptdp.Schedule("1f1b", 1, 2) as schedule:
        assert ptdp.moe_metrics(model).moe_layers == 0  # before the first iteration
        rng = np.random.default_rng(3)
        tokens = rng.integers(0, 64, size=(4, 8), dtype=np.int32)
        labels = rng.integers(0, 64, size=(4, 8), dtype=np.int32)
        bias = model.get_param("decoder.layers.0.mlp.router.expert_bias")
        ptdp.train_iteration(model, optimizer, schedule, tokens, labels, 2, 0)
        m = ptdp.moe_metrics(model)
        moved = model.get_param("decoder.layers.0.mlp.router.expert_bias") - bias
    assert m.moe_layers == 2
    assert m.load_balancing_loss > 0
    assert math.isnan(m.z_loss)  # no --moe-z-loss-coeff
    assert [layer for layer, _, _ in m.expert_load] == [0, 1]
    fewest, most = m.expert_load[0][1], m.expert_load[0][2]
    assert fewest * 4 <= 4 * 8 * 2 <= most * 4  # 32 tokens, 2 choices each, over 4 experts
    assert set(np.round(moved / 0.01).astype(int).tolist()) <= {-1, 0, 1}
