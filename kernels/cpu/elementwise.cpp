// Elementwise ops: residual add, axpy, scale, fill, the sum of squares behind grad norms, and the
// per-row dot products of the split RMSNorm.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel_ranges.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/storage.h"
#include "kernels/validate.h"

namespace ptdp {

void CpuBackend::add(const void* a, const void* b, void* y, DType t, int64_t n) {
  kcheck::check_add(a, b, y, t, n);
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* as = static_cast<const S*>(a);
    const S* bs = static_cast<const S*>(b);
    S* ys = static_cast<S*>(y);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) ys[i] = St::store(St::load(as[i]) + St::load(bs[i]));
  });
}

void CpuBackend::axpy(float alpha, const float* x, float* y, int64_t n) {
  kcheck::check_axpy(x, y, n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void CpuBackend::scale(float* x, float alpha, int64_t n) {
  kcheck::check_scale(x, n);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

namespace {

// Fills shorter than this run on the calling thread: a parallel region costs more than it saves.
constexpr int64_t kMinParallelBytes = int64_t{1} << 20;

// The fill loop on the bit pattern of the value (2, 4 or 8 bytes), in the machine's widest
// stores.
template <typename U>
PTDP_CPU_CLONES_TEMPLATE void fill_bits(U* x, U bits, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = bits;
}

template <typename T>
void fill_typed(T* x, T value, int64_t n) {
  // A value whose bytes are all zero (gradient zeroing) is memset's work: it stores whole
  // vectors (or `rep stosb`) at the machine's store bandwidth.
  using U = std::conditional_t<sizeof(T) == 2, uint16_t,
                               std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  static_assert(sizeof(U) == sizeof(T));
  U bits;
  std::memcpy(&bits, &value, sizeof bits);
  const int64_t line = 64 / static_cast<int64_t>(sizeof(T));
  const int64_t min_parallel = kMinParallelBytes / static_cast<int64_t>(sizeof(T));
  cpu::parallel_ranges(n, line, min_parallel, [&](int64_t lo, int64_t hi) {
    if (bits == 0) std::memset(x + lo, 0, static_cast<std::size_t>(hi - lo) * sizeof(T));
    else fill_bits(reinterpret_cast<U*>(x) + lo, bits, hi - lo);
  });
}

}  // namespace

void CpuBackend::fill(void* x, DType t, double value, int64_t n) {
  kcheck::check_fill(x, t, n);
  switch (t) {
    case DType::F32: fill_typed(static_cast<float*>(x), static_cast<float>(value), n); break;
    case DType::BF16: fill_typed(static_cast<uint16_t*>(x), f32_to_bf16(static_cast<float>(value)), n); break;
    case DType::F16: fill_typed(static_cast<uint16_t*>(x), f32_to_f16(static_cast<float>(value)), n); break;
    case DType::I32: fill_typed(static_cast<int32_t*>(x), static_cast<int32_t>(value), n); break;
    case DType::I64: fill_typed(static_cast<int64_t*>(x), static_cast<int64_t>(value), n); break;
  }
}

namespace {

// Eight running sums, element i into lane (i - lo) % 8, combined in lane order: the same
// result on every run, and the adds no longer wait on each other (one chain runs at one add
// per latency, several times slower than memory delivers the floats). One AVX-512 register, two
// AVX2 ones; the lanes are the same on every instruction set, so are the bits.
constexpr int kLanes = 8;

PTDP_CPU_CLONES double sum_squares_range(const float* x, int64_t n) {
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int k = 0; k < kLanes; ++k) lane[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  for (int k = 0; i < n; ++i, ++k) lane[k] += static_cast<double>(x[i]) * x[i];
  double acc = 0.0;
  for (int k = 0; k < kLanes; ++k) acc += lane[k];
  return acc;
}

// sum_c a[c] * b[c] * w[c] (w NULL: 1) of one row, in double, in four interleaved partial sums in
// a fixed order (as RMSNorm's rows).
template <typename St>
PTDP_CPU_CLONES_TEMPLATE double row_dot_one(const typename St::type* a, const typename St::type* b,
                                            const typename St::type* w, int64_t n) {
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  const auto term = [&](int64_t c) {
    const double p = static_cast<double>(St::load(a[c])) * St::load(b[c]);
    return w != nullptr ? p * St::load(w[c]) : p;
  };
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    for (int k = 0; k < 4; ++k) acc[k] += term(c + k);
  }
  for (; c < n; ++c) acc[0] += term(c);
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

}  // namespace

void CpuBackend::row_dot(const void* a, const void* b, const void* w, DType t, float* out, int64_t rows,
                         int64_t cols) {
  if (kcheck::check_row_dot(a, b, t, out, rows, cols) == kcheck::Work::none) return;
  cpu::with_storage(t, [&](auto st) {
    using St = decltype(st);
    using S = typename St::type;
    const S* as = static_cast<const S*>(a);
    const S* bs = static_cast<const S*>(b);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      out[r] = static_cast<float>(row_dot_one<St>(as + r * cols, bs + r * cols, static_cast<const S*>(w), cols));
  });
}

double CpuBackend::sum_squares(const float* x, int64_t n) {
  kcheck::check_sum_squares(x, n);
  // A fixed number of chunks, each summed in order and then combined in order: the result is
  // bit-identical whatever the number of threads.
  constexpr int64_t kMaxChunks = 256;
  constexpr int64_t kMinChunk = 16384;
  const int64_t chunks = std::clamp<int64_t>((n + kMinChunk - 1) / kMinChunk, 1, kMaxChunks);
  const int64_t per = (n + chunks - 1) / chunks;
  double partial[kMaxChunks] = {};
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * per, hi = std::min(n, lo + per);
    partial[c] = lo < hi ? sum_squares_range(x + lo, hi - lo) : 0.0;
  }
  double total = 0.0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

}  // namespace ptdp
