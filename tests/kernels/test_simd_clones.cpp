// The vectorised copies of the transcendental ops (PTDP_CPU_CLONES, kernels/cpu/simd_clones.h:
// the loader runs the AVX-512 or AVX2 copy where the machine has it) give the bits of the same
// formula evaluated one element at a time here. This file is built without contraction
// (tests/kernels/CMakeLists.txt), as the kernels are, so its scalar loops are the baseline
// build's arithmetic whatever -march a build uses. Lengths cover vector tails and the split
// over threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "kernels/cpu/gelu_math.h"
#include "reference.h"

using namespace ptdp_test;

namespace {

const int64_t kLengths[] = {1, 15, 16, 17, 63, 1037, 70001};

// Inputs over GeLU's and the sigmoid's whole range: the polynomial's small branch, the exp's
// clamps, zeros and values past the point where tanh rounds to 1.
fvec inputs(int64_t n, uint32_t seed) {
  Rand r(seed);
  fvec x = r.uniform(n, -12.0f, 12.0f);
  const float special[] = {0.0f, -0.0f, 0.03f, -0.05f, 40.0f, -40.0f, 100.0f, -100.0f, 1e-30f};
  for (std::size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i * 7 % x.size()] = special[i];
  return x;
}

float sigmoid_ref(float g) { return 1.0f / (1.0f + ptdp::cpu::exp_simd(-g)); }

}  // namespace

TEST_CASE("gelu: the vector copies give the scalar formula's bits on 1 and 2 threads",
          "[gelu][simd]") {
  for (int64_t n : kLengths) {
    const fvec x = inputs(n, static_cast<uint32_t>(n));
    const fvec dy = Rand(static_cast<uint32_t>(n + 1)).uniform(n);
    fvec want_y(x.size()), want_dx(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      want_y[i] = ptdp::cpu::gelu_f32(x[i]);
      want_dx[i] = dy[i] * ptdp::cpu::gelu_grad_f32(x[i]);
    }
    for (int threads : {1, 2}) {
      INFO("n " << n << ", threads " << threads);
      fvec y(x.size(), 7.0f), dx(x.size(), 7.0f);
      with_threads(threads, [&] {
        be().gelu_forward(x.data(), y.data(), kF32, n);
        be().gelu_backward(x.data(), dy.data(), dx.data(), kF32, n);
      });
      CHECK_BITEQUAL(y, want_y);
      CHECK_BITEQUAL(dx, want_dx);
    }
    // bf16 storage: widened, the same fp32 formula, rounded once.
    std::vector<uint16_t> xb(x.size()), yb(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xb[i] = ptdp::f32_to_bf16(x[i]);
    be().gelu_forward(xb.data(), yb.data(), kBF16, n);
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("n " << n << ", bf16 element " << i);
      REQUIRE(yb[i] == ptdp::f32_to_bf16(ptdp::cpu::gelu_f32(ptdp::bf16_to_f32(xb[i]))));
    }
  }
}

TEST_CASE("swiglu: the vector copies give the scalar formula's bits on 1 and 2 threads",
          "[swiglu][simd]") {
  for (int64_t cols : {int64_t{1}, int64_t{17}, int64_t{1037}}) {
    const int64_t rows = 5;
    const fvec x = inputs(rows * 2 * cols, static_cast<uint32_t>(cols));
    const fvec dy = Rand(static_cast<uint32_t>(cols + 3)).uniform(rows * cols);
    fvec want_y(static_cast<std::size_t>(rows * cols)), want_dx(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float g = x[static_cast<std::size_t>(r * 2 * cols + c)];
        const float u = x[static_cast<std::size_t>(r * 2 * cols + cols + c)];
        const float d = dy[static_cast<std::size_t>(r * cols + c)];
        const float s = sigmoid_ref(g);
        want_y[static_cast<std::size_t>(r * cols + c)] = g * s * u;
        want_dx[static_cast<std::size_t>(r * 2 * cols + c)] = d * u * (s * (1.0f + g * (1.0f - s)));
        want_dx[static_cast<std::size_t>(r * 2 * cols + cols + c)] = d * (g * s);
      }
    }
    for (int threads : {1, 2}) {
      INFO("cols " << cols << ", threads " << threads);
      fvec y(want_y.size(), 7.0f), dx(x.size(), 7.0f);
      with_threads(threads, [&] {
        be().swiglu_forward(x.data(), y.data(), kF32, rows, cols);
        be().swiglu_backward(x.data(), dy.data(), dx.data(), kF32, rows, cols);
      });
      CHECK_BITEQUAL(y, want_y);
      CHECK_BITEQUAL(dx, want_dx);
    }
  }
}

TEST_CASE("GEMM epilogues: bias, bias+GeLU and GeLU's gradient give the scalar formula's bits",
          "[gemm][simd]") {
  // The epilogue applied to the product of the same cblas_sgemm call without one, at the same
  // thread count (OpenBLAS's own split of C over its threads may change a product's bits: its
  // edge micro-kernels sum in another order).
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{300}}) {
    const int64_t m = 70, k = 24;
    Rand r(static_cast<uint32_t>(n + 100));
    const fvec a = r.uniform(m * k, -2.0f, 2.0f), b = r.uniform(k * n, -2.0f, 2.0f);
    const fvec bias = r.uniform(n), pre = inputs(m * n, static_cast<uint32_t>(n + 5));
    for (int threads : {1, 2}) {
      INFO("n " << n << ", threads " << threads);
      ptdp::GemmDesc d;
      d.m = m;
      d.n = n;
      d.k = k;
      fvec prod(static_cast<std::size_t>(m * n));
      with_threads(threads, [&] { be().gemm(d, a.data(), b.data(), prod.data()); });
      fvec want_bias(prod.size()), want_pre(prod.size()), want_gelu(prod.size()), want_dgelu(prod.size());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const std::size_t e = static_cast<std::size_t>(i * n + j);
          want_bias[e] = prod[e] + bias[static_cast<std::size_t>(j)];
          want_pre[e] = want_bias[e];
          want_gelu[e] = ptdp::cpu::gelu_f32(want_bias[e]);
          want_dgelu[e] = prod[e] * ptdp::cpu::gelu_grad_f32(pre[e]);
        }
      }
      with_threads(threads, [&] {
        fvec c(prod.size(), 7.0f), aux(prod.size(), 7.0f);
        d.epilogue = ptdp::Epilogue::Bias;
        d.bias = bias.data();
        be().gemm(d, a.data(), b.data(), c.data());
        CHECK_BITEQUAL(c, want_bias);
        d.epilogue = ptdp::Epilogue::BiasGelu;
        d.aux = aux.data();
        be().gemm(d, a.data(), b.data(), c.data());
        CHECK_BITEQUAL(c, want_gelu);
        CHECK_BITEQUAL(aux, want_pre);
        d.epilogue = ptdp::Epilogue::DGelu;
        d.bias = nullptr;
        fvec saved = pre;
        d.aux = saved.data();
        be().gemm(d, a.data(), b.data(), c.data());
        CHECK_BITEQUAL(c, want_dgelu);
      });
    }
  }
}
