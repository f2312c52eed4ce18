// The GPT on a GPU against the CPU engine (label gpu): the same seed gives the same loss and
// gradients for one forward+backward, and the same losses over a few AdamW iterations, within
// fp32 tolerance (the GPU sums in another order); in bf16 and f16 (with the flash-attention
// kernel on the GPU, the unfused path on the CPU) within 16-bit tolerance. Skipped without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

#define OK(call) REQUIRE((call) == PTDP_SUCCESS)

using sp::World;
using sp::ids;

void skip_without_gpu(const World& w) {
  int32_t cuda = 0;
  ptdp_has_feature(PTDP_FEATURE_CUDA, &cuda);
  if (!cuda || w.gpu < 0) {
    WARN("no CUDA device: skipping");
    std::exit(77);
  }
}

ptdp_gpt_options shape(ptdp_device device) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 2;
  o.hidden_size = 64;
  o.num_attention_heads = 4;
  o.seq_length = 32;
  o.vocab_size = 300;
  o.make_vocab_size_divisible_by = 64;
  o.hidden_dropout = 0.1f;
  o.attention_dropout = 0.1f;
  o.seed = 4242;
  o.device = device;
  return o;
}


double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

TEST_CASE("one GPT forward and backward on the GPU equals the CPU engine", "[gpu]") {
  World w;
  skip_without_gpu(w);
  const ptdp_gpt_options gc = shape(PTDP_DEVICE_CPU), gg = shape(PTDP_DEVICE_CUDA);
  ptdp_model cpu = nullptr, gpu = nullptr;
  OK(ptdp_model_create(w.groups, &gc, &cpu));
  OK(ptdp_model_create(w.groups, &gg, &gpu));
  const int b = 4;
  const auto tok = ids(static_cast<std::size_t>(b * gc.seq_length), gc.vocab_size, 1);
  const auto lab = ids(static_cast<std::size_t>(b * gc.seq_length), gc.vocab_size, 2);
  float lc = 0, lg = 0;
  OK(ptdp_model_forward_backward(cpu, tok.data(), lab.data(), b, 0, 0, 1.0f, nullptr, &lc));
  OK(ptdp_model_forward_backward(gpu, tok.data(), lab.data(), b, 0, 0, 1.0f, nullptr, &lg));
  INFO("cpu loss " << lc << ", gpu loss " << lg);
  CHECK(std::fabs(lc - lg) <= 1e-5 * std::fabs(lc));
  int32_t n = 0;
  OK(ptdp_model_num_params(cpu, &n));
  for (int32_t i = 0; i < n; ++i) {
    char name[256];
    int32_t ndim = 0;
    int64_t gshape[2] = {1, 1};
    OK(ptdp_model_param_info(cpu, i, name, sizeof name, &ndim, gshape, nullptr));
    const std::size_t count = static_cast<std::size_t>(gshape[0] * (ndim > 1 ? gshape[1] : 1));
    std::vector<float> pc(count), pg(count), dc(count), dg(count);
    OK(ptdp_model_get_param(cpu, name, pc.data(), count * 4));
    OK(ptdp_model_get_param(gpu, name, pg.data(), count * 4));
    OK(ptdp_model_get_grad(cpu, name, dc.data(), count * 4));
    OK(ptdp_model_get_grad(gpu, name, dg.data(), count * 4));
    INFO(name);
    CHECK(pc == pg);  // the same pure-function initialisation
    CHECK(rel_diff(dg, dc) < 1e-4);
  }
  ptdp_model_destroy(gpu);
  ptdp_model_destroy(cpu);
}

TEST_CASE("a bf16 GPT step on the GPU (flash attention) equals the CPU engine's bf16 step", "[gpu]") {
  World w;
  skip_without_gpu(w);
  // Head dim 64: the GPU takes its fused kernel (auto), the CPU the unfused path.
  for (const ptdp_dtype precision : {PTDP_DTYPE_BF16, PTDP_DTYPE_F16}) {
    INFO("precision " << static_cast<int>(precision));
    ptdp_gpt_options gc = shape(PTDP_DEVICE_CPU), gg = shape(PTDP_DEVICE_CUDA);
    for (ptdp_gpt_options* o : {&gc, &gg}) {
      o->hidden_size = 256;
      o->num_attention_heads = 4;
      o->seq_length = 80;  // not a multiple of the kernel's tiles
      o->precision = precision;
    }
    ptdp_model cpu = nullptr, gpu = nullptr, gpu_unfused = nullptr;
    OK(ptdp_model_create(w.groups, &gc, &cpu));
    OK(ptdp_model_create(w.groups, &gg, &gpu));
    gg.attention = PTDP_ATTENTION_UNFUSED;
    OK(ptdp_model_create(w.groups, &gg, &gpu_unfused));
    const int b = 2;
    const auto tok = ids(static_cast<std::size_t>(b * gc.seq_length), gc.vocab_size, 3);
    const auto lab = ids(static_cast<std::size_t>(b * gc.seq_length), gc.vocab_size, 4);
    float lc = 0, lg = 0, lu = 0;
    OK(ptdp_model_forward_backward(cpu, tok.data(), lab.data(), b, 1, 0, 1.0f, nullptr, &lc));
    OK(ptdp_model_forward_backward(gpu, tok.data(), lab.data(), b, 1, 0, 1.0f, nullptr, &lg));
    OK(ptdp_model_forward_backward(gpu_unfused, tok.data(), lab.data(), b, 1, 0, 1.0f, nullptr, &lu));
    INFO("cpu loss " << lc << ", gpu (fused) " << lg << ", gpu (unfused) " << lu);
    CHECK(std::fabs(lc - lg) <= 1e-2 * std::fabs(lc));
    CHECK(std::fabs(lc - lu) <= 1e-2 * std::fabs(lc));
    for (const char* name : {"decoder.layers.0.self_attention.linear_qkv.weight", "decoder.layers.1.mlp.linear_fc1.weight",
                             "embedding.word_embeddings.weight"}) {
      char n2[256];
      int32_t ndim = 0, count_params = 0;
      int64_t gshape[2] = {1, 1};
      OK(ptdp_model_num_params(cpu, &count_params));
      for (int32_t i = 0; i < count_params; ++i) {
        OK(ptdp_model_param_info(cpu, i, n2, sizeof n2, &ndim, gshape, nullptr));
        if (std::string(n2) == name) break;
      }
      const std::size_t count = static_cast<std::size_t>(gshape[0] * (ndim > 1 ? gshape[1] : 1));
      std::vector<float> dc(count), dg(count), du(count);
      OK(ptdp_model_get_grad(cpu, name, dc.data(), count * 4));
      OK(ptdp_model_get_grad(gpu, name, dg.data(), count * 4));
      OK(ptdp_model_get_grad(gpu_unfused, name, du.data(), count * 4));
      INFO(name << ": gpu fused vs cpu " << rel_diff(dg, dc) << ", gpu unfused vs cpu " << rel_diff(du, dc));
      CHECK(rel_diff(dg, dc) < 5e-2);
      CHECK(rel_diff(du, dc) < 5e-2);
    }
    ptdp_model_destroy(gpu_unfused);
    ptdp_model_destroy(gpu);
    ptdp_model_destroy(cpu);
  }
}

TEST_CASE("AdamW training on the GPU follows the CPU engine's losses", "[gpu]") {
  World w;
  skip_without_gpu(w);
  ptdp_optimizer_options oo;
  OK(ptdp_optimizer_options_init(&oo));
  oo.lr = 1e-3;
  ptdp_schedule s = nullptr;
  OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &s));
  std::vector<float> losses[2];
  for (int k = 0; k < 2; ++k) {
    const ptdp_gpt_options g = shape(k == 0 ? PTDP_DEVICE_CPU : PTDP_DEVICE_CUDA);
    ptdp_model m = nullptr;
    ptdp_optimizer o = nullptr;
    OK(ptdp_model_create(w.groups, &g, &m));
    OK(ptdp_optimizer_create(m, &oo, &o));
    for (int64_t it = 0; it < 5; ++it) {
      const std::size_t n = 2 * 2 * static_cast<std::size_t>(g.seq_length);
      const auto tok = ids(n, g.vocab_size, static_cast<uint32_t>(10 + it));
      const auto lab = ids(n, g.vocab_size, static_cast<uint32_t>(20 + it));
      ptdp_iteration_result r;
      OK(ptdp_train_iteration(m, o, s, tok.data(), lab.data(), 2, it, nullptr, &r));
      losses[k].push_back(r.loss);
    }
    ptdp_optimizer_destroy(o);
    ptdp_model_destroy(m);
  }
  for (std::size_t i = 0; i < losses[0].size(); ++i) {
    INFO("iteration " << i << ": cpu " << losses[0][i] << ", gpu " << losses[1][i]);
    CHECK(std::fabs(losses[0][i] - losses[1][i]) <= 1e-4 * std::fabs(losses[0][i]));
  }
  ptdp_schedule_destroy(s);
}
