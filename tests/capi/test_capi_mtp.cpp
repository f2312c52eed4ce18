// Multi-token prediction through the public C API only (core/model/mtp.h): the fields of
// ptdp_gpt_options (zero by default: no MTP), the modules' parameters with Megatron-Core's
// names and shapes and their count in the analytical parameter count and FLOPs, the refusals
// (Megatron's, naming the fields and flags), the losses of an iteration (ptdp_model_mtp_losses),
// the gradient's dependence on mtp_loss_scaling_factor / D, the main loss left unchanged, and a
// checkpoint round trip of the modules' weights.
#include <catch2/catch.hpp>

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

TEST_CASE("mtp options: init leaves no MTP; the fields come back through a model", "[capi][mtp]") {
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
  o = tiny(1);
  o.num_experts = 4;
  o.moe_router_topk = 2;
  CHECK(refusal(w.groups, o).find("--mtp-num-layers 1 with MoE") != std::string::npos);
}

TEST_CASE("mtp losses: each depth's loss after each iteration; the main loss is the dense model's",
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

TEST_CASE("mtp checkpoint: the modules' weights are saved and loaded; a depth mismatch is refused",
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
