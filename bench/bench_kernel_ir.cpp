// bench_kernel_ir: one call of one CPU op on a reduced shape, for instruction counts under
// callgrind, which stay put on a busy machine where milliseconds do not:
//
//   OMP_NUM_THREADS=1 valgrind --tool=callgrind --toggle-collect='*measured_call*'
//       ./bench_kernel_ir adamw_step   (one command line)
//
// The op runs once untimed (first-touch, OpenMP start-up), then once inside measured_call, the
// only function whose instructions callgrind then counts. Shapes are GPT-2 small's row widths
// with fewer rows (and odd lengths, so vector tails are counted too); run with no argument for
// the list.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "bench/bench_common.h"
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

int run(const char* op) {
  Backend& be = ptdp::cpu_backend();
  const auto once = [](const std::function<void()>& f) {
    f();
    measured_call(f);
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
  } else {
    std::fprintf(stderr,
                 "usage: bench_kernel_ir OP\n  OP: adamw_step sum_squares fill_zero "
                 "ce_forward_local ce_backward dropout_forward dropout_backward "
                 "bias_dropout_add\n");
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc > 1 ? argv[1] : ""); }
