// Multi-token prediction through the public C API only (core/model/mtp.h): the fields of
// ptdp_gpt_options (zero by default: no MTP), the modules' parameters with Megatron-Core's
// names and shapes and their count in the analytical parameter count and FLOPs, the refusals
// (Megatron's, naming the fields and flags), the losses of an iteration (ptdp_model_mtp_losses),
// the gradient's dependence on mtp_loss_scaling_factor / D, the main loss left unchanged, and a
// checkpoint round trip of the modules' weights.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

constexpr int32_t kVocab = 64, kSeq = 8, kB = 2;

std::string err() { return ptdp_last_error(); }

// A tiny Llama-shaped model with D MTP modules: 2 layers, h 16, RoPE, RMSNorm, SwiGLU, untied.
ptdp_gpt_options tiny(int32_t depth, float dropout = 0.0f) {
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  o.num_layers = 2;
  o.hidden_size = 16;
  o.num_attention_heads = 2;
  o.ffn_hidden_size = 32;
  o.vocab_size = kVocab;
  o.make_vocab_size_divisible_by = 32;
  o.seq_length = kSeq;
  o.hidden_dropout = dropout;
  o.attention_dropout = dropout;
  o.init_method_std = 0.1f;
  o.normalization = PTDP_NORMALIZATION_RMSNORM;
  o.swiglu = 1;
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
  o.disable_bias_linear = 1;
  o.untie_embeddings_and_output_weights = 1;
  o.mtp_num_layers = depth;
  return o;
}

std::string refusal(ptdp_groups groups, const ptdp_gpt_options& o) {
  ptdp_model m = nullptr;
  CHECK(ptdp_model_create(groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(m == nullptr);
  return err();
}

struct Info {
  std::vector<int64_t> shape;
};
std::map<std::string, Info> params(ptdp_model m) {
  int32_t n = 0;
  REQUIRE(ptdp_model_num_params(m, &n) == PTDP_SUCCESS);
  std::map<std::string, Info> out;
  char name[256];
  for (int32_t i = 0; i < n; ++i) {
    int32_t ndim = 0;
    int64_t shape[2] = {0, 0};
    REQUIRE(ptdp_model_param_info(m, i, name, sizeof name, &ndim, shape, nullptr) == PTDP_SUCCESS);
    out[name].shape.assign(shape, shape + ndim);
  }
  return out;
}

std::vector<float> values(ptdp_model m, const std::string& name, const std::vector<int64_t>& shape, bool grad) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  const ptdp_status st = grad ? ptdp_model_get_grad(m, name.c_str(), v.data(), v.size() * sizeof(float))
                              : ptdp_model_get_param(m, name.c_str(), v.data(), v.size() * sizeof(float));
  REQUIRE(st == PTDP_SUCCESS);
  return v;
}

// Every gradient of a model with factor f after one forward_backward of the batch.
std::map<std::string, std::vector<float>> grads(ptdp_groups groups, int32_t depth, float factor,
                                                const std::vector<int32_t>& tokens,
                                                const std::vector<int32_t>& labels, float* loss) {
  ptdp_gpt_options o = tiny(depth);
  o.mtp_loss_scaling_factor = factor;
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(groups, &o, &m) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_forward_backward(m, tokens.data(), labels.data(), kB, 0, 0, 1.0f, nullptr, loss) ==
          PTDP_SUCCESS);
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, info] : params(m)) out[name] = values(m, name, info.shape, true);
  ptdp_model_destroy(m);
  return out;
}

}  // namespace

TEST_CASE("mtp options: init leaves no MTP, and the fields come back through a model", "[capi][mtp]") {
  ptdp_gpt_options o;
  std::memset(static_cast<void*>(&o), 0x5a, sizeof o);
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.mtp_num_layers == 0);
  CHECK(o.mtp_loss_scaling_factor == 0.0f);  // 0: Megatron's default 0.1
  sp::World w;
  ptdp_gpt_options in = tiny(2);
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &in, &m) == PTDP_SUCCESS);
  ptdp_gpt_options back;
  back.struct_size = sizeof back;
  REQUIRE(ptdp_model_get_options(m, &back) == PTDP_SUCCESS);
  CHECK(back.mtp_num_layers == 2);
  CHECK(back.mtp_loss_scaling_factor == Approx(0.1f));
  ptdp_model_destroy(m);
}

TEST_CASE("mtp options: the modules have Megatron-Core's names and shapes, counted in parameters and FLOPs",
          "[capi][mtp]") {
  sp::World w;
  const ptdp_gpt_options o = tiny(2), dense = tiny(0);
  ptdp_model m = nullptr, d = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  REQUIRE(ptdp_model_create(w.groups, &dense, &d) == PTDP_SUCCESS);
  const auto with = params(m), without = params(d);
  const int64_t h = 16;
  for (int k = 0; k < 2; ++k) {
    const std::string p = "mtp.layers." + std::to_string(k) + ".";
    CHECK(with.at(p + "enorm.weight").shape == std::vector<int64_t>{h});
    CHECK(with.at(p + "hnorm.weight").shape == std::vector<int64_t>{h});
    CHECK(with.at(p + "eh_proj.weight").shape == std::vector<int64_t>{h, 2 * h});
    CHECK(with.at(p + "final_layernorm.weight").shape == std::vector<int64_t>{h});
    CHECK(with.count(p + "transformer_layer.self_attention.linear_qkv.weight") == 1);
    CHECK(with.count(p + "transformer_layer.mlp.linear_fc2.weight") == 1);
  }
  CHECK(with.count("mtp.layers.2.enorm.weight") == 0);
  // The decoder's parameters are the dense model's, same names, same initial values.
  int64_t extra = 0;
  for (const auto& [name, info] : with) {
    int64_t n = 1;
    for (int64_t x : info.shape) n *= x;
    if (without.count(name) == 0) {
      CHECK(name.rfind("mtp.layers.", 0) == 0);
      extra += n;
      continue;
    }
    CHECK(values(m, name, info.shape, false) == values(d, name, info.shape, false));
  }
  // One decoder layer plus three norms and eh_proj per module.
  int64_t layer = 0;
  for (const auto& [name, info] : without) {
    if (name.rfind("decoder.layers.0.", 0) != 0) continue;
    int64_t n = 1;
    for (int64_t x : info.shape) n *= x;
    layer += n;
  }
  CHECK(extra == 2 * (layer + 3 * h + 2 * h * h));
  // FLOPs: Megatron's MTP terms, 12 B s h^2 (attention + mlp) per extra layer, 6 B s (3h + 2h^2)
  // per module, and one more logits term 6 B s h V each.
  double with_flops = 0, without_flops = 0, executed = 0;
  REQUIRE(ptdp_gpt_flops(&o, 4, &with_flops, &executed) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_flops(&dense, 4, &without_flops, &executed) == PTDP_SUCCESS);
  const double B = 4, s = kSeq, hh = 16, V = kVocab, dh = 8, a = 2;
  const double per_layer = 12.0 * B * s * hh * hh * ((1.0 + 1.0 + s / hh) * a * dh / hh + 32.0 / hh * 1.5);
  CHECK(with_flops - without_flops ==
        Approx(2 * per_layer + 2 * 6.0 * B * s * (3 * hh + 2 * hh * hh) + 2 * 6.0 * B * s * hh * V).epsilon(1e-12));
  ptdp_model_destroy(m);
  ptdp_model_destroy(d);
}

TEST_CASE("mtp options: refusals name the fields and flags", "[capi][mtp]") {
  sp::World w;
  ptdp_gpt_options o = tiny(1);
  o.position_embedding_type = PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE;
  std::string e = refusal(w.groups, o);
  CHECK(e.find("Multi-Token Prediction (MTP) is not supported with learned_absolute position embedding type") !=
        std::string::npos);
  CHECK(e.find("--mtp-num-layers") != std::string::npos);
  o = tiny(-1);
  CHECK(refusal(w.groups, o).find("mtp_num_layers = -1") != std::string::npos);
  o = tiny(1);
  o.mtp_loss_scaling_factor = -0.5f;
  CHECK(refusal(w.groups, o).find("mtp_loss_scaling_factor") != std::string::npos);
}

namespace {

// tiny(depth) with DeepSeek's MoE: the first layer dense and the last (`last_moe`) MoE or not, 4
// experts (k = 2, width 8), a shared expert, sigmoid scores with the expert bias, seq_aux_loss.
ptdp_gpt_options tiny_moe(int32_t depth, bool last_moe) {
  ptdp_gpt_options o = tiny(depth);
  o.num_experts = 4;
  o.moe_router_topk = 2;
  o.moe_ffn_hidden_size = 8;
  o.moe_layer_freq = last_moe ? "[0,1]" : "[1,0]";
  o.moe_shared_expert_intermediate_size = 8;
  o.moe_router_score_function = PTDP_MOE_SCORE_SIGMOID;
  o.moe_router_enable_expert_bias = 1;
  o.moe_router_bias_update_rate = 0.01f;
  o.moe_router_load_balancing_type = PTDP_MOE_BALANCING_SEQ_AUX_LOSS;
  o.moe_aux_loss_coeff = 0.01f;
  return o;
}

}  // namespace

TEST_CASE("mtp with MoE: the module's layer takes the decoder's last layer's kind, trains and reports",
          "[capi][mtp][moe]") {
  sp::World w;
  const std::vector<int32_t> tokens = sp::ids(2 * kB * kSeq, kVocab, 8), labels = sp::ids(2 * kB * kSeq, kVocab, 9);
  const int64_t h = 16;
  for (const bool last_moe : {true, false}) {
    INFO("last decoder layer MoE: " << last_moe);
    const ptdp_gpt_options o = tiny_moe(1, last_moe);
    ptdp_model m = nullptr;
    REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
    const auto p = params(m);
    const std::string mlp = "mtp.layers.0.transformer_layer.mlp.";
    CHECK(p.count(mlp + "router.weight") == (last_moe ? 1u : 0u));
    CHECK(p.count(mlp + "router.expert_bias") == (last_moe ? 1u : 0u));
    CHECK(p.count(mlp + "shared_experts.linear_fc1.weight") == (last_moe ? 1u : 0u));
    CHECK(p.count(mlp + "linear_fc1.weight") == (last_moe ? 0u : 1u));
    if (last_moe) {
      CHECK(p.at(mlp + "router.weight").shape == std::vector<int64_t>{4, h});
      for (int j = 0; j < 4; ++j) {
        CHECK(p.at(mlp + "experts.linear_fc1.weight" + std::to_string(j)).shape == std::vector<int64_t>{16, h});
        CHECK(p.at(mlp + "experts.linear_fc2.weight" + std::to_string(j)).shape == std::vector<int64_t>{h, 8});
      }
    }
    ptdp_optimizer opt = nullptr;
    REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
    ptdp_schedule sched = nullptr;
    REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &sched) == PTDP_SUCCESS);
    for (int it = 0; it < 2; ++it) {
      ptdp_iteration_result res{};
      REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, &res) ==
              PTDP_SUCCESS);
      CHECK(std::isfinite(res.loss));
      float loss = -1;
      int32_t count = -1;
      REQUIRE(ptdp_model_mtp_losses(m, &loss, 1, &count) == PTDP_SUCCESS);
      CHECK(count == 1);
      CHECK(loss > 0.5 * std::log(kVocab));
      CHECK(loss < 2.0 * std::log(kVocab));
      // The MoE figures count the module's MoE layer after the decoder's (Megatron's
      // num_layers + mtp_num_layers tracker), with its own expert load.
      ptdp_moe_metrics mm{};
      mm.struct_size = sizeof mm;
      ptdp_moe_layer_load loads[4] = {};
      REQUIRE(ptdp_model_moe_metrics(m, &mm, loads, 4) == PTDP_SUCCESS);
      CHECK(mm.moe_layers == (last_moe ? 2 : 1));
      CHECK(loads[0].layer == (last_moe ? 1 : 0));
      CHECK(std::isfinite(mm.load_balancing_loss));
      CHECK(mm.load_balancing_loss > 0.0);
      if (last_moe) {
        CHECK(loads[1].layer == 2);  // num_layers + 0
        CHECK(loads[1].max_tokens >= loads[1].min_tokens);
        // Each of the 2 * kB * kSeq tokens of the global batch picks k = 2 experts.
        CHECK(loads[1].max_tokens * 4 >= 2 * 2 * kB * kSeq);
        CHECK(loads[1].max_tokens * 4 <= 2 * 2 * kB * kSeq * 4);
      }
    }
    if (last_moe) {
      // The module's router moved its own expert bias (aux-loss-free balancing) after each step.
      const std::vector<float> bias = values(m, mlp + "router.expert_bias", {4}, false);
      CHECK(*std::max_element(bias.begin(), bias.end()) > *std::min_element(bias.begin(), bias.end()));
    }
    ptdp_schedule_destroy(sched);
    ptdp_optimizer_destroy(opt);
    ptdp_model_destroy(m);
  }
  // The module's router's balancing loss enters the gradient at its own coefficient, as a decoder
  // layer's does (Megatron's MoEAuxLossAutoScaler), not scaled by mtp_loss_scaling_factor / D:
  // the router weight's gradient is linear in both, so the aux loss's part is the same at every
  // factor, and the factor's part the same with and without the aux loss.
  const std::vector<int32_t> t1(tokens.begin(), tokens.begin() + kB * kSeq),
      l1(labels.begin(), labels.begin() + kB * kSeq);
  const auto router_grad = [&](float factor, float coeff) {
    ptdp_gpt_options o = tiny_moe(1, true);
    o.mtp_loss_scaling_factor = factor;
    o.moe_aux_loss_coeff = coeff;
    ptdp_model m = nullptr;
    REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
    float loss = 0;
    REQUIRE(ptdp_model_forward_backward(m, t1.data(), l1.data(), kB, 0, 0, 1.0f, nullptr, &loss) == PTDP_SUCCESS);
    const std::vector<float> g = values(m, "mtp.layers.0.transformer_layer.mlp.router.weight", {4, h}, true);
    ptdp_model_destroy(m);
    return g;
  };
  const auto g10 = router_grad(0.1f, 0.0f), g11 = router_grad(0.1f, 0.5f), g40 = router_grad(0.4f, 0.0f),
             g41 = router_grad(0.4f, 0.5f);
  double aux = 0, aux_dev = 0, mtp = 0, mtp_dev = 0;
  for (std::size_t i = 0; i < g10.size(); ++i) {
    const double a1 = g11[i] - g10[i], a4 = g41[i] - g40[i], m0 = g40[i] - g10[i], m1 = g41[i] - g11[i];
    aux += a1 * a1;
    aux_dev += (a4 - a1) * (a4 - a1);
    mtp += m0 * m0;
    mtp_dev += (m1 - m0) * (m1 - m0);
  }
  CHECK(aux > 0.0);
  CHECK(mtp > 0.0);
  CHECK(std::sqrt(aux_dev) <= 1e-4 * std::sqrt(aux));
  CHECK(std::sqrt(mtp_dev) <= 1e-4 * std::sqrt(mtp));
  // FLOPs: the module's layer counts as an MoE layer (k moe_ffn + shared for its MLP term), the
  // module's norms and eh_proj and its logits as for a dense model.
  const ptdp_gpt_options with = tiny_moe(1, true), without = tiny_moe(0, true);
  double f1 = 0, f0 = 0, executed = 0;
  REQUIRE(ptdp_gpt_flops(&with, 4, &f1, &executed) == PTDP_SUCCESS);
  REQUIRE(ptdp_gpt_flops(&without, 4, &f0, &executed) == PTDP_SUCCESS);
  const double B = 4, s = kSeq, hh = 16, V = kVocab, dh = 8, a = 2;
  const double layer = 12.0 * B * s * hh * hh * ((1.0 + 1.0 + s / hh) * a * dh / hh + (2 * 8.0 + 8.0) / hh * 1.5);
  CHECK(f1 - f0 == Approx(layer + 6.0 * B * s * (3 * hh + 2 * hh * hh) + 6.0 * B * s * hh * V).epsilon(1e-12));
}

TEST_CASE("mtp losses: each depth's loss after each iteration, and the main loss is the dense model's",
          "[capi][mtp][train]") {
  sp::World w;
  const std::vector<int32_t> tokens = sp::ids(2 * kB * kSeq, kVocab, 3), labels = sp::ids(2 * kB * kSeq, kVocab, 4);
  float first_loss[2] = {0, 0};
  for (int32_t depth : {0, 2}) {
    const ptdp_gpt_options o = tiny(depth, 0.1f);
    ptdp_model m = nullptr;
    REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
    float losses[3] = {-1, -1, -1};
    int32_t count = -1;
    REQUIRE(ptdp_model_mtp_losses(m, losses, 3, &count) == PTDP_SUCCESS);
    CHECK(count == 0);  // before the first iteration
    CHECK(ptdp_model_mtp_losses(m, losses, 3, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(err().find("count") != std::string::npos);
    CHECK(ptdp_model_mtp_losses(m, nullptr, 1, &count) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(ptdp_model_mtp_losses(m, losses, -1, &count) == PTDP_ERR_INVALID_ARGUMENT);
    ptdp_optimizer opt = nullptr;
    REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
    ptdp_schedule sched = nullptr;
    REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &sched) == PTDP_SUCCESS);
    for (int it = 0; it < 3; ++it) {
      ptdp_iteration_result res{};
      REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, &res) ==
              PTDP_SUCCESS);
      if (it == 0) first_loss[depth == 0 ? 0 : 1] = res.loss;
      REQUIRE(ptdp_model_mtp_losses(m, losses, 3, &count) == PTDP_SUCCESS);
      CHECK(count == depth);
      for (int k = 0; k < depth; ++k) {
        // Random labels: each depth's cross-entropy is near log V at this init.
        CHECK(std::isfinite(losses[k]));
        CHECK(losses[k] > 0.5 * std::log(kVocab));
        CHECK(losses[k] < 2.0 * std::log(kVocab));
        CHECK(losses[k] != res.loss);
      }
      CHECK(losses[depth] == -1.0f);  // nothing past D
    }
    if (depth == 2) {
      float one = -1;
      REQUIRE(ptdp_model_mtp_losses(m, &one, 1, &count) == PTDP_SUCCESS);
      CHECK(count == 2);
      CHECK(one == losses[0]);
    }
    ptdp_schedule_destroy(sched);
    ptdp_optimizer_destroy(opt);
    ptdp_model_destroy(m);
  }
  // The modules add to the gradient only: the first iteration's loss (same decoder weights, same
  // dropout masks) is the dense model's, bit for bit.
  CHECK(first_loss[1] == first_loss[0]);
}

TEST_CASE("mtp gradient: the main loss's plus mtp_loss_scaling_factor / D times the depths' losses'",
          "[capi][mtp][grad]") {
  sp::World w;
  const std::vector<int32_t> tokens = sp::ids(kB * kSeq, kVocab, 5), labels = sp::ids(kB * kSeq, kVocab, 6);
  float l0 = 0, l1 = 0, l2 = 0, l3 = 0;
  const auto g0 = grads(w.groups, 0, 0.0f, tokens, labels, &l0);
  const auto g1 = grads(w.groups, 2, 0.1f, tokens, labels, &l1);
  const auto g2 = grads(w.groups, 2, 0.2f, tokens, labels, &l2);
  const auto g3 = grads(w.groups, 2, 0.4f, tokens, labels, &l3);
  CHECK(l1 == l0);
  CHECK(l2 == l0);
  // g(f) = g_main + f/D (g_1 + g_2): the steps 0.1 -> 0.2 and 0.2 -> 0.4 differ by a factor 2; the
  // decoder's gradients at f extrapolate to the dense model's at f = 0.
  double dev = 0, scale = 0, to_dense = 0, dense_scale = 0;
  int moved = 0;
  for (const auto& [name, a] : g1) {
    const std::vector<float>&b = g2.at(name), &c = g3.at(name);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double step1 = b[i] - a[i], step2 = c[i] - b[i];
      dev = std::max(dev, std::abs(step2 - 2 * step1));
      scale = std::max(scale, std::abs(step2));
      if (std::abs(step1) > 1e-6) ++moved;
    }
    if (g0.count(name) == 0) continue;
    const std::vector<float>& z = g0.at(name);
    for (std::size_t i = 0; i < a.size(); ++i) {
      to_dense = std::max(to_dense, std::abs((2.0 * a[i] - b[i]) - z[i]));  // g(0.1) - (g(0.2) - g(0.1))
      dense_scale = std::max(dense_scale, static_cast<double>(std::abs(z[i])));
    }
  }
  CHECK(scale > 1e-3);
  CHECK(moved > 100);
  CHECK(dev <= 1e-5 * scale + 1e-7);
  CHECK(to_dense <= 1e-5 * dense_scale + 1e-7);
}

TEST_CASE("mtp checkpoint: the modules' weights are saved and loaded, and a depth mismatch is refused",
          "[capi][mtp][checkpoint]") {
  sp::World w;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ptdp_test_capi_mtp_ckpt";
  std::filesystem::remove_all(dir);
  const ptdp_gpt_options o = tiny(2, 0.1f);
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
  ptdp_schedule sched = nullptr;
  REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &sched) == PTDP_SUCCESS);
  const std::vector<int32_t> tokens = sp::ids(kB * kSeq, kVocab, 8), labels = sp::ids(kB * kSeq, kVocab, 9);
  for (int it = 0; it < 2; ++it)
    REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, nullptr) ==
            PTDP_SUCCESS);
  ptdp_checkpoint_state st;
  REQUIRE(ptdp_checkpoint_state_init(&st) == PTDP_SUCCESS);
  st.iteration = 2;
  REQUIRE(ptdp_checkpoint_save(dir.string().c_str(), m, opt, nullptr, &st) == PTDP_SUCCESS);
  ptdp_gpt_options saved;
  saved.struct_size = sizeof saved;
  REQUIRE(ptdp_checkpoint_read_options(dir.string().c_str(), &saved, nullptr) == PTDP_SUCCESS);
  CHECK(saved.mtp_num_layers == 2);
  ptdp_model back = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &saved, &back) == PTDP_SUCCESS);
  REQUIRE(ptdp_checkpoint_load(dir.string().c_str(), back, nullptr, nullptr) == PTDP_SUCCESS);
  int checked = 0;
  for (const auto& [name, info] : params(m)) {
    if (name.rfind("mtp.layers.", 0) != 0) continue;
    CHECK(values(back, name, info.shape, false) == values(m, name, info.shape, false));
    ++checked;
  }
  CHECK(checked == 2 * 10);  // enorm, hnorm, eh_proj, final_layernorm; the layer's 2 norms, qkv, proj, fc1, fc2
  // A model without the modules does not load the checkpoint, naming the field.
  const ptdp_gpt_options fewer = tiny(1);
  ptdp_model other = nullptr;
  REQUIRE(ptdp_model_create(w.groups, &fewer, &other) == PTDP_SUCCESS);
  CHECK(ptdp_checkpoint_load(dir.string().c_str(), other, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("mtp_num_layers") != std::string::npos);
  ptdp_model_destroy(other);
  ptdp_model_destroy(back);
  ptdp_schedule_destroy(sched);
  ptdp_optimizer_destroy(opt);
  ptdp_model_destroy(m);
  std::filesystem::remove_all(dir);
}

namespace {

// Megatron's MTP formula in double precision, independent of the engine, for the model of
// hand_model(): every transformer layer (the decoder's and the modules') is the identity (its
// linear_proj and linear_fc2 are zero, no biases, no dropout), so the decoder's output is
// final_layernorm(emb(token)) and module k's is final_k(eh_k [enorm_k(emb(token k ahead));
// hnorm_k(previous)]). Returns the main loss and each depth's masked mean loss.
struct Weights {
  std::map<std::string, std::vector<double>> w;
  const std::vector<double>& at(const std::string& n) const { return w.at(n); }
};

constexpr int kH = 16;

std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& g) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + 1e-5);
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
  return y;
}

std::vector<double> row(const std::vector<double>& table, int r, int cols) {
  return {table.begin() + r * cols, table.begin() + (r + 1) * cols};
}

// -log softmax(W_out h)[label]
double ce(const Weights& p, const std::vector<double>& h, int label) {
  const std::vector<double>& out = p.at("output_layer.weight");  // [V, h]
  std::vector<double> z(kVocab);
  double mx = -1e300;
  for (int v = 0; v < kVocab; ++v) {
    double s = 0;
    for (int j = 0; j < kH; ++j) s += out[static_cast<std::size_t>(v * kH + j)] * h[static_cast<std::size_t>(j)];
    z[static_cast<std::size_t>(v)] = s;
    mx = std::max(mx, s);
  }
  double sum = 0;
  for (double s : z) sum += std::exp(s - mx);
  return mx + std::log(sum) - z[static_cast<std::size_t>(label)];
}

std::vector<double> reference_losses(const Weights& p, const std::vector<int32_t>& tokens,
                                     const std::vector<int32_t>& labels, int depth) {
  const std::vector<double>& emb = p.at("embedding.word_embeddings.weight");
  std::vector<double> sums(static_cast<std::size_t>(depth + 1), 0.0), counts(sums.size(), 0.0);
  for (int b = 0; b < kB; ++b) {
    std::vector<std::vector<double>> h(kSeq);
    for (int i = 0; i < kSeq; ++i) {
      h[static_cast<std::size_t>(i)] = rms(row(emb, tokens[static_cast<std::size_t>(b * kSeq + i)], kH),
                                           p.at("decoder.final_layernorm.weight"));
      const int32_t l = labels[static_cast<std::size_t>(b * kSeq + i)];
      if (l < 0) continue;
      sums[0] += ce(p, h[static_cast<std::size_t>(i)], l);
      counts[0] += 1;
    }
    for (int k = 1; k <= depth; ++k) {
      const std::string m = "mtp.layers." + std::to_string(k - 1) + ".";
      const std::vector<double>& eh = p.at(m + "eh_proj.weight");  // [h, 2h]
      for (int i = 0; i < kSeq; ++i) {
        // Megatron's roll: token 0 past the end (its row's loss is masked anyway).
        const int32_t t = i + k < kSeq ? tokens[static_cast<std::size_t>(b * kSeq + i + k)] : 0;
        std::vector<double> cat = rms(row(emb, t, kH), p.at(m + "enorm.weight"));
        const std::vector<double> hn = rms(h[static_cast<std::size_t>(i)], p.at(m + "hnorm.weight"));
        cat.insert(cat.end(), hn.begin(), hn.end());
        std::vector<double> x(kH, 0.0);
        for (int o = 0; o < kH; ++o)
          for (int j = 0; j < 2 * kH; ++j)
            x[static_cast<std::size_t>(o)] += eh[static_cast<std::size_t>(o * 2 * kH + j)] * cat[static_cast<std::size_t>(j)];
        h[static_cast<std::size_t>(i)] = rms(x, p.at(m + "final_layernorm.weight"));
        if (i + k >= kSeq) continue;
        const int32_t l = labels[static_cast<std::size_t>(b * kSeq + i + k)];
        if (l < 0) continue;
        sums[static_cast<std::size_t>(k)] += ce(p, h[static_cast<std::size_t>(i)], l);
        counts[static_cast<std::size_t>(k)] += 1;
      }
    }
  }
  for (std::size_t k = 0; k < sums.size(); ++k) sums[k] /= counts[k];
  return sums;
}

// The model of the hand computation: tiny(depth) without dropout, every layer the identity, the
// norms' weights random around 1 (so that each norm matters).
ptdp_model hand_model(ptdp_groups groups, int32_t depth, Weights* p) {
  const ptdp_gpt_options o = tiny(depth);
  ptdp_model m = nullptr;
  REQUIRE(ptdp_model_create(groups, &o, &m) == PTDP_SUCCESS);
  uint32_t x = 17;
  for (const auto& [name, info] : params(m)) {
    std::vector<float> v = values(m, name, info.shape, false);
    const bool zero = name.find("linear_proj.weight") != std::string::npos ||
                      name.find("linear_fc2.weight") != std::string::npos;
    const bool norm = name.find("norm.weight") != std::string::npos;
    for (float& e : v) {
      x = x * 1664525u + 1013904223u;
      const float u = static_cast<float>((x >> 8) % 1000) / 1000.0f - 0.5f;  // [-0.5, 0.5)
      if (zero) e = 0.0f;
      else if (norm) e = 1.0f + u;
    }
    REQUIRE(ptdp_model_set_param(m, name.c_str(), v.data(), v.size() * sizeof(float)) == PTDP_SUCCESS);
    p->w[name].assign(v.begin(), v.end());
  }
  return m;
}

}  // namespace

TEST_CASE("mtp hand computation: the losses and a gradient equal Megatron's formula in double precision",
          "[capi][mtp][reference]") {
  sp::World w;
  std::vector<int32_t> tokens = sp::ids(kB * kSeq, kVocab, 11), labels = sp::ids(kB * kSeq, kVocab, 12);
  labels[3] = labels[kSeq + 6] = -100;  // ignored labels stay ignored at every depth
  Weights p;
  ptdp_model m = hand_model(w.groups, 2, &p);
  const std::vector<double> want = reference_losses(p, tokens, labels, 2);
  ptdp_optimizer opt = nullptr;
  REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
  ptdp_schedule sched = nullptr;
  REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &sched) == PTDP_SUCCESS);
  ptdp_iteration_result res{};
  REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, 0, nullptr, &res) == PTDP_SUCCESS);
  float got[2] = {0, 0};
  int32_t count = 0;
  REQUIRE(ptdp_model_mtp_losses(m, got, 2, &count) == PTDP_SUCCESS);
  REQUIRE(count == 2);
  CHECK(res.loss == Approx(want[0]).epsilon(1e-5));
  CHECK(got[0] == Approx(want[1]).epsilon(1e-5));
  CHECK(got[1] == Approx(want[2]).epsilon(1e-5));
  CHECK(std::abs(want[1] - want[2]) > 1e-3);  // the depths see different inputs
  ptdp_schedule_destroy(sched);
  ptdp_optimizer_destroy(opt);
  ptdp_model_destroy(m);

  // The gradient of L_main + X / D (L_1 + L_2) (X = 0.1, D = 2) with respect to the modules'
  // eh_proj weights against central differences of the double-precision formula.
  Weights q;
  m = hand_model(w.groups, 2, &q);
  float loss = 0;
  REQUIRE(ptdp_model_forward_backward(m, tokens.data(), labels.data(), kB, 0, 0, 1.0f, nullptr, &loss) ==
          PTDP_SUCCESS);
  int compared = 0;
  for (int k = 0; k < 2; ++k) {
    const std::string name = "mtp.layers." + std::to_string(k) + ".eh_proj.weight";
    const std::vector<float> g = values(m, name, {kH, 2 * kH}, true);
    for (int e : {0, 5, 17, 40, 255, 300, 511}) {
      const double eps = 1e-4, saved = q.w[name][static_cast<std::size_t>(e)];
      const auto total = [&] {
        const std::vector<double> l = reference_losses(q, tokens, labels, 2);
        return l[0] + 0.1 / 2 * (l[1] + l[2]);
      };
      q.w[name][static_cast<std::size_t>(e)] = saved + eps;
      const double up = total();
      q.w[name][static_cast<std::size_t>(e)] = saved - eps;
      const double down = total();
      q.w[name][static_cast<std::size_t>(e)] = saved;
      const double fd = (up - down) / (2 * eps);
      INFO(name << "[" << e << "]: engine " << g[static_cast<std::size_t>(e)] << ", formula " << fd);
      CHECK(std::abs(g[static_cast<std::size_t>(e)] - fd) <= 1e-6 + 1e-3 * std::abs(fd));
      if (std::abs(fd) > 1e-5) ++compared;
    }
  }
  CHECK(compared >= 10);
  ptdp_model_destroy(m);
}

TEST_CASE("mtp precision: bf16 and f16 models train with MTP, their losses near the f32 model's",
          "[capi][mtp][precision]") {
  sp::World w;
  const std::vector<int32_t> tokens = sp::ids(kB * kSeq, kVocab, 21), labels = sp::ids(kB * kSeq, kVocab, 22);
  // Dense, and with MoE (the modules' layers MoE like the decoder's last).
  for (const bool moe : {false, true}) {
    std::vector<float> f32;  // the main loss, then each depth's, of the first iteration
    for (ptdp_dtype precision : {PTDP_DTYPE_F32, PTDP_DTYPE_BF16, PTDP_DTYPE_F16}) {
      INFO("precision " << static_cast<int>(precision) << (moe ? ", MoE" : ", dense"));
      ptdp_gpt_options o = moe ? tiny_moe(2, true) : tiny(2);
      o.precision = precision;
      ptdp_model m = nullptr;
      REQUIRE(ptdp_model_create(w.groups, &o, &m) == PTDP_SUCCESS);
      ptdp_optimizer opt = nullptr;
      REQUIRE(ptdp_optimizer_create(m, nullptr, &opt) == PTDP_SUCCESS);
      ptdp_schedule sched = nullptr;
      REQUIRE(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &sched) == PTDP_SUCCESS);
      std::vector<float> first;
      for (int it = 0; it < 3; ++it) {
        ptdp_iteration_result res{};
        REQUIRE(ptdp_train_iteration(m, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, &res) ==
                PTDP_SUCCESS);
        float losses[2] = {0, 0};
        int32_t count = 0;
        REQUIRE(ptdp_model_mtp_losses(m, losses, 2, &count) == PTDP_SUCCESS);
        REQUIRE(count == 2);
        CHECK(std::isfinite(res.loss));
        CHECK(std::isfinite(losses[0]));
        CHECK(std::isfinite(losses[1]));
        if (it == 0) first = {res.loss, losses[0], losses[1]};
      }
      if (precision == PTDP_DTYPE_F32) f32 = first;
      // 16-bit storage rounds weights and activations: within 2% of the f32 model at the start.
      for (std::size_t k = 0; k < first.size(); ++k) CHECK(first[k] == Approx(f32[k]).epsilon(0.02));
      ptdp_schedule_destroy(sched);
      ptdp_optimizer_destroy(opt);
      ptdp_model_destroy(m);
    }
  }
}
