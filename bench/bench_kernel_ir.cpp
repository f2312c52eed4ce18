// bench_kernel_ir: one call of one CPU op on a reduced shape, for instruction counts under
// callgrind, which stay put on a busy machine where milliseconds do not:
//
//   OMP_NUM_THREADS=1 valgrind --tool=callgrind --toggle-collect='*measured_call*'
//       ./bench_kernel_ir adamw_step   (one command line)
//
// An optional second argument repeats the measured call (for CPU time under perf stat).
//
// The op runs once untimed (first-touch, OpenMP start-up), then once inside measured_call, the
// only function whose instructions callgrind then counts. Shapes are GPT-2 small's row widths
// with fewer rows (and odd lengths, so vector tails are counted too); run with no argument for
// the list.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/bench_common.h"
#include "bench/unfused_attention.h"
#include "kernels/backend.h"

namespace {

using ptdp::Backend;
using ptdp::DType;

constexpr DType kF32 = DType::F32;
constexpr int64_t kHidden = 768, kVocab = 50304;

std::vector<float> uniform(int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(n));
  uint64_t state = seed;
  for (float& v : x) {
    v = lo + (hi - lo) * static_cast<float>(ptdp::bench::splitmix64(state) >> 40) *
                 (1.0f / 16777216.0f);
  }
  return x;
}

__attribute__((noinline)) void measured_call(const std::function<void()>& op) { op(); }

ptdp::DropoutDesc dropout_desc(int64_t n) {
  ptdp::DropoutDesc d;
  d.p = 0.1f;
  d.rng.seed = 1234;
  d.rng.stream = ptdp::philox_name_hash("bench.dropout");
  d.block = ptdp::GlobalBlock::flat(n);
  return d;
}

int run(const char* op, int repeat) {
  Backend& be = ptdp::cpu_backend();
  const auto once = [repeat](const std::function<void()>& f) {
    f();
    measured_call([&] {
      for (int r = 0; r < repeat; ++r) f();
    });
  };
  // The optimizer: 1 Mi + 3 parameters.
  const int64_t n = (int64_t{1} << 20) + 3;
  if (std::strcmp(op, "adamw_step") == 0) {
    auto param = uniform(n, -0.1f, 0.1f, 1), grad = uniform(n, -1e-2f, 1e-2f, 2);
    auto m = uniform(n, -1e-3f, 1e-3f, 3), v = uniform(n, 0.0f, 1e-4f, 4);
    ptdp::AdamWParams p;
    p.lr = 1e-4f;
    p.weight_decay = 0.1f;
    p.step = 10;
    once([&] { be.adamw_step(param.data(), grad.data(), m.data(), v.data(), n, p); });
  } else if (std::strcmp(op, "sum_squares") == 0) {
    auto x = uniform(n, -1.0f, 1.0f, 5);
    volatile double sink = 0.0;
    once([&] { sink = sink + be.sum_squares(x.data(), n); });
  } else if (std::strcmp(op, "fill_zero") == 0) {
    // Gradient zeroing: 4 Mi + 3 floats.
    std::vector<float> g(static_cast<std::size_t>(4 * n), 1.0f);
    once([&] { be.fill(g.data(), kF32, 0.0, 4 * n); });
  } else if (std::strcmp(op, "ce_forward_local") == 0 || std::strcmp(op, "ce_backward") == 0) {
    // 16 rows of the padded GPT-2 vocabulary.
    const int64_t rows = 16, v = kVocab;
    auto logits = uniform(rows * v, -4.0f, 4.0f, 6);
    std::vector<float> dlogits(logits.size()), row_max(rows), sum_exp(rows), target(rows);
    std::vector<float> dloss(static_cast<std::size_t>(rows), 1.0f / rows);
    std::vector<int32_t> targets(static_cast<std::size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) targets[static_cast<std::size_t>(r)] = static_cast<int32_t>(r * 3137 % v);
    const auto forward = [&] {
      be.ce_forward_local(logits.data(), kF32, targets.data(), rows, v, 0, row_max.data(),
                          sum_exp.data(), target.data());
    };
    if (op[3] == 'f') {
      once(forward);
    } else {
      forward();
      once([&] {
        be.ce_backward(logits.data(), kF32, row_max.data(), sum_exp.data(), targets.data(),
                       dloss.data(), rows, v, 0, dlogits.data());
      });
    }
  } else if (std::strcmp(op, "dropout_forward") == 0 || std::strcmp(op, "dropout_backward") == 0) {
    // One hidden dropout of a 256-token microbatch.
    const int64_t e = 256 * kHidden;
    auto x = uniform(e, -1.0f, 1.0f, 7);
    std::vector<float> y(x.size());
    const ptdp::DropoutDesc d = dropout_desc(e);
    if (op[8] == 'f') once([&] { be.dropout_forward(x.data(), y.data(), kF32, d); });
    else once([&] { be.dropout_backward(x.data(), y.data(), kF32, d); });
  } else if (std::strcmp(op, "bias_dropout_add") == 0) {
    const int64_t rows = 256, cols = kHidden, e = rows * cols;
    auto x = uniform(e, -1.0f, 1.0f, 8), bias = uniform(cols, -1.0f, 1.0f, 9);
    auto y = uniform(e, -1.0f, 1.0f, 10);
    const ptdp::DropoutDesc d = dropout_desc(e);
    once([&] { be.bias_dropout_add(x.data(), bias.data(), y.data(), y.data(), kF32, rows, cols, d); });
  } else if (std::strncmp(op, "attn_", 5) == 0) {
    // Causal attention of one GPT-2-small sample (12 heads, dh 64) at s = 64, fp32, without
    // dropout: the fused kernels, or the unfused sequence the layer runs (strided-batched
    // GEMMs over the heads, causal softmax) - core/layers/attention.cpp.
    const int64_t s = 64, heads = 12, dh = 64, group = 3 * dh, row = heads * group;
    ptdp::AttentionDesc ad;
    ad.s = s;
    ad.b = 1;
    ad.heads = heads;
    ad.dh = dh;
    ad.scale = 1.0f / std::sqrt(static_cast<float>(dh));
    auto qkv = uniform(s * row, -1.0f, 1.0f, 11), dctx = uniform(s * heads * dh, -1.0f, 1.0f, 12);
    std::vector<float> ctx(dctx.size()), dqkv(qkv.size()), lse(static_cast<std::size_t>(heads * s));
    std::vector<float> delta(lse.size()), probs(static_cast<std::size_t>(heads * s * s)), dprobs(probs.size());
    const auto fused_fwd = [&] { be.attention_forward(ad, qkv.data(), ctx.data(), lse.data(), kF32); };
    const auto unfused_fwd = [&] {
      ptdp::bench::unfused_attention_forward(be, s, heads, dh, ad.scale, qkv.data(), probs.data(), ctx.data());
    };
    const auto unfused_bwd = [&] {
      ptdp::bench::unfused_attention_backward(be, s, heads, dh, ad.scale, qkv.data(), probs.data(), dctx.data(),
                                              dprobs.data(), dqkv.data());
    };
    if (std::strcmp(op, "attn_fused_forward") == 0) {
      once(fused_fwd);
    } else if (std::strcmp(op, "attn_fused_backward") == 0) {
      fused_fwd();
      once([&] {
        be.attention_backward(ad, qkv.data(), ctx.data(), lse.data(), dctx.data(), dqkv.data(), delta.data(),
                              kF32);
      });
    } else if (std::strcmp(op, "attn_unfused_forward") == 0) {
      once(unfused_fwd);
    } else if (std::strcmp(op, "attn_unfused_backward") == 0) {
      unfused_fwd();
      once(unfused_bwd);
    } else {
      std::fprintf(stderr, "bench_kernel_ir: unknown op %s\n", op);
      return 2;
    }
  } else {
    std::fprintf(stderr,
                 "usage: bench_kernel_ir OP\n  OP: adamw_step sum_squares fill_zero "
                 "ce_forward_local ce_backward dropout_forward dropout_backward "
                 "bias_dropout_add attn_fused_forward attn_fused_backward "
                 "attn_unfused_forward attn_unfused_backward\n");
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run(argc > 1 ? argv[1] : "", argc > 2 ? std::atoi(argv[2]) : 1);
}
