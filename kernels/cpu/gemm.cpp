// GEMM through OpenBLAS (single, strided-batched, arbitrary leading dimensions), with 16-bit
// operands and the epilogues of GemmDesc. OpenBLAS multiplies fp32 only, so 16-bit operands are
// widened into fp32 scratch (exact), the product is accumulated in fp32, the epilogue applied in
// fp32 and each output rounded to its storage type once.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gelu_math.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {
namespace {

// Below this many flops per matrix a batch is spread over OpenMP threads, each running a
// single-threaded BLAS call; above it each call already keeps every core busy.
constexpr double kParallelBatchFlops = 1 << 24;

// Per-thread fp32 copies of 16-bit operands (grown, never shrunk).
struct Scratch {
  std::vector<float> a, b, c;
};
thread_local Scratch scratch;

// Widens a stored [rows, cols] matrix with leading dimension ld into packed fp32.
void widen(const void* src, DType t, int64_t rows, int64_t cols, int64_t ld,
           std::vector<float>& dst) {
  dst.resize(static_cast<std::size_t>(rows * cols));
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    const auto* s = static_cast<const typename St::type*>(src);
#pragma omp parallel for schedule(static) if (rows * cols > 65536 && !omp_in_parallel())
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = St::load(s[r * ld + c]);
    }
  });
}

void sgemm(const GemmDesc& d, const float* a, int64_t lda, const float* b, int64_t ldb,
           float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, d.trans_a ? CblasTrans : CblasNoTrans,
              d.trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(d.m),
              static_cast<blasint>(d.n), static_cast<blasint>(d.k), d.alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// One row of each epilogue: r is the fp32 product, c and aux rows of C's storage type. PTDP_CPU_
// CLONES (kernels/cpu/simd_clones.h): the baseline build ran GeLU's tanh four lanes wide; the
// AVX2 and AVX-512 copies compute the same bits (this file is built without contraction).
template <typename St>
PTDP_CPU_CLONES_TEMPLATE void store_row(const float* r, typename St::type* c, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) c[j] = St::store(r[j]);
}

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void bias_row(const float* r, const typename St::type* bias,
                                       typename St::type* c, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) c[j] = St::store(r[j] + St::load(bias[j]));
}

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void bias_gelu_row(const float* r, const typename St::type* bias,
                                            typename St::type* aux, typename St::type* c,
                                            int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float pre = r[j] + St::load(bias[j]);
    aux[j] = St::store(pre);
    c[j] = St::store(cpu::gelu_f32(pre));
  }
}

template <typename St>
PTDP_CPU_CLONES_TEMPLATE void dgelu_row(const float* r, const typename St::type* aux,
                                        typename St::type* c, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) c[j] = St::store(r[j] * cpu::gelu_grad_f32(St::load(aux[j])));
}

// A weight gradient, C [m, n] += Aᵀ B with A [k, m], in row blocks, one single-threaded BLAS call
// per OpenMP thread. With a short reduction (k = the tokens of a microbatch) and many rows,
// OpenBLAS's own two-thread split ran these at 165-185 GFLOP/s where a split of C's rows ran at
// 185-200 (GPT-2 small, b 4, s 64, on 2 cores): each thread packs its own columns of A and
// shares no panel. Every element of C is still one call's dot product over the same k. The
// order of that dot product is the micro-kernel's, and a call's last rows that do not fill the
// kernel's unroll (4 to 24 rows of C, by CPU: 12 on AVX2 Zen and Haswell) go through a narrower
// kernel that sums differently. So the blocks start at multiples of kSplitRowUnit, a multiple
// of every unroll: a row is then at a block's edge only where it is at the whole call's edge,
// and the bits equal the one-thread call's (16-row blocks did not, on AVX2 Zen).
constexpr int64_t kSplitRowUnit = 48;

bool split_rows_worth_it(const GemmDesc& d) {
  return d.trans_a && !d.trans_b && d.batch == 1 && d.k <= 512 && d.m >= 512 &&
         omp_get_max_threads() > 1 && !omp_in_parallel();
}

void sgemm_split_rows(const GemmDesc& d, const kcheck::GemmLayout& l, const float* a,
                      const float* b, float* c) {
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t units = (d.m + kSplitRowUnit - 1) / kSplitRowUnit;
    const int64_t m0 = std::min(d.m, units * t / threads * kSplitRowUnit);
    const int64_t m1 = std::min(d.m, units * (t + 1) / threads * kSplitRowUnit);
    if (m0 < m1) {
      GemmDesc part = d;
      part.m = m1 - m0;
      sgemm(part, a + m0, l.lda, b, l.ldb, d.beta, c + m0 * l.ldc, l.ldc);
    }
  }
}

// Applies d's epilogue to r ([m, n] fp32 with leading dimension ldr) and stores C (and aux)
// rounded once. r may be C itself when C is f32.
void epilogue_store(const GemmDesc& d, const float* r, int64_t ldr, void* c, int64_t ldc) {
  cpu::with_storage(d.c_type, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    S* cs = static_cast<S*>(c);
    const S* bias = static_cast<const S*>(d.bias);
    S* aux = static_cast<S*>(d.aux);
#pragma omp parallel for schedule(static) if (d.m * d.n > 16384 && !omp_in_parallel())
    for (int64_t i = 0; i < d.m; ++i) {
      const float* ri = r + i * ldr;
      S* ci = cs + i * ldc;
      switch (d.epilogue) {
        case Epilogue::None: store_row<St>(ri, ci, d.n); break;
        case Epilogue::Bias: bias_row<St>(ri, bias, ci, d.n); break;
        case Epilogue::BiasGelu: bias_gelu_row<St>(ri, bias, aux + i * ldc, ci, d.n); break;
        case Epilogue::DGelu: dgelu_row<St>(ri, aux + i * ldc, ci, d.n); break;
      }
    }
  });
}

// One matrix of the batch when an operand is 16-bit or there is an epilogue.
void gemm_mixed(const GemmDesc& d, const kcheck::GemmLayout& l, const void* a, const void* b,
                void* c) {
  Scratch& s = scratch;
  const float* af = static_cast<const float*>(a);
  const float* bf = static_cast<const float*>(b);
  int64_t lda = l.lda, ldb = l.ldb;
  if (d.a_type != DType::F32) {
    const int64_t a_rows = d.trans_a ? d.k : d.m, a_cols = d.trans_a ? d.m : d.k;
    const int64_t b_rows = d.trans_b ? d.n : d.k, b_cols = d.trans_b ? d.k : d.n;
    widen(a, d.a_type, a_rows, a_cols, l.lda, s.a);
    widen(b, d.b_type, b_rows, b_cols, l.ldb, s.b);
    af = s.a.data();
    bf = s.b.data();
    lda = std::max<int64_t>(1, a_cols);
    ldb = std::max<int64_t>(1, b_cols);
  }
  if (d.c_type == DType::F32) {
    // C holds fp32: the product lands there and the epilogue works in place.
    float* cf = static_cast<float*>(c);
    sgemm(d, af, lda, bf, ldb, d.beta, cf, l.ldc);
    if (d.epilogue != Epilogue::None) epilogue_store(d, cf, l.ldc, c, l.ldc);
    return;
  }
  // 16-bit C: r in fp32 scratch (with C's old values when beta reads them), rounded once.
  s.c.resize(static_cast<std::size_t>(d.m * d.n));
  if (d.beta != 0.0f) {
    widen(c, d.c_type, d.m, d.n, l.ldc, s.c);
  }
  sgemm(d, af, lda, bf, ldb, d.beta, s.c.data(), d.n);
  epilogue_store(d, s.c.data(), d.n, c, l.ldc);
}

}  // namespace

void CpuBackend::gemm(const GemmDesc& d, const void* a, const void* b, void* c) {
  const kcheck::GemmLayout layout = kcheck::check_gemm(d, a, b, c);
  if (layout.work == kcheck::Work::none) return;
  const double flops =
      2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
  const bool plain = d.a_type == DType::F32 && d.c_type == DType::F32 &&
                     d.epilogue == Epilogue::None;
  const std::size_t as = dtype_size(d.a_type), bs = dtype_size(d.b_type),
                    cs = dtype_size(d.c_type);
  const auto one = [&](int64_t i) {
    const void* ai = static_cast<const char*>(a) + static_cast<std::size_t>(i * d.stride_a) * as;
    const void* bi = static_cast<const char*>(b) + static_cast<std::size_t>(i * d.stride_b) * bs;
    void* ci = static_cast<char*>(c) + static_cast<std::size_t>(i * d.stride_c) * cs;
    if (plain && split_rows_worth_it(d)) {
      sgemm_split_rows(d, layout, static_cast<const float*>(ai), static_cast<const float*>(bi),
                       static_cast<float*>(ci));
    } else if (plain) {
      sgemm(d, static_cast<const float*>(ai), layout.lda, static_cast<const float*>(bi),
            layout.ldb, d.beta, static_cast<float*>(ci), layout.ldc);
    } else {
      gemm_mixed(d, layout, ai, bi, ci);
    }
  };
  if (d.batch == 1 || flops >= kParallelBatchFlops) {
    for (int64_t i = 0; i < d.batch; ++i) one(i);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < d.batch; ++i) one(i);
  }
}

}  // namespace ptdp
