// Grouped GEMM (GroupedGemmDesc): the local experts' linears in one call. Every group is cut
// into row blocks of its C, and the (group, block) tasks are spread over the OpenMP threads,
// each one a single-threaded call of the CPU GEMM (kernels/cpu/gemm.cpp: OpenBLAS, with its
// 16-bit widening and C rounding). Threads therefore work on experts and on rows at once: a
// microbatch's experts have uneven token counts, and a dynamic schedule over blocks of similar
// size keeps both cores busy where one task per expert would leave one waiting on the largest.
//
// Blocks start at multiples of kBlockRowUnit rows, a multiple of every sgemm micro-kernel's
// unroll (see kSplitRowUnit in gemm.cpp): a row lies at a block's edge only where it lies at
// its group's edge, so each element of C gets the bits of one single-threaded call over the whole
// group. The result is then the same for any thread count and any grouping of the experts (a rank holding
// 2 of 8 experts computes their rows as the serial run does).
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/validate.h"

namespace ptdp {
namespace {

constexpr int64_t kBlockRowUnit = 48;
// A block below this many flops costs more in packing B (re-read by every block of a group)
// than its share of the load balance gains.
constexpr double kMinBlockFlops = 1 << 25;

struct Task {
  GemmDesc desc;
  const void* a;
  const void* b;
  void* c;
};

int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

/// Rows of C per block: about 4 blocks per thread over the whole call, at least kMinBlockFlops
/// each, in whole units.
int64_t block_rows(double flops_per_row, int64_t total_rows) {
  const int64_t threads = omp_get_max_threads();
  int64_t rows = (total_rows + 4 * threads - 1) / std::max<int64_t>(1, 4 * threads);
  if (flops_per_row > 0.0) {
    rows = std::max(rows, static_cast<int64_t>(kMinBlockFlops / flops_per_row));
  }
  return round_up(std::max<int64_t>(rows, 1), kBlockRowUnit);
}

// A and B may be NULL where no group reads them (every k_g == 0).
const void* offset(const void* p, int64_t elements, DType t) {
  if (p == nullptr) return nullptr;
  return static_cast<const char*>(p) + static_cast<std::size_t>(elements) * dtype_size(t);
}
void* offset(void* p, int64_t elements, DType t) {
  return static_cast<char*>(p) + static_cast<std::size_t>(elements) * dtype_size(t);
}

// Varying M: C_g's rows are the group's tokens; a block of them multiplies the same B_g.
void tasks_varying_m(const GroupedGemmDesc& d, const kcheck::GroupedGemmLayout& l, const void* a,
                     const void* b, void* c, std::vector<Task>& tasks) {
  const int64_t rows = block_rows(2.0 * static_cast<double>(d.n) * static_cast<double>(d.k), d.m);
  int64_t row0 = 0;  // first row of group g in the stacked A and C
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t mg = d.sizes[g];
    for (int64_t r = 0; r < mg; r += rows) {
      Task t;
      t.desc.trans_b = d.trans_b;
      t.desc.m = std::min(rows, mg - r);
      t.desc.n = d.n;
      t.desc.k = d.k;
      t.desc.alpha = d.alpha;
      t.desc.beta = d.beta;
      t.desc.lda = l.lda;
      t.desc.ldb = l.ldb;
      t.desc.ldc = l.ldc;
      t.desc.a_type = d.a_type;
      t.desc.b_type = d.b_type;
      t.desc.c_type = d.c_type;
      t.a = offset(a, (row0 + r) * l.lda, d.a_type);
      t.b = offset(b, g * l.stride, d.b_type);
      t.c = offset(c, (row0 + r) * l.ldc, d.c_type);
      tasks.push_back(t);
    }
    row0 += mg;
  }
}

// Varying K: C_g [m, n] += A_g^T B_g over the group's k_g tokens; a block of C_g's rows reads
// the matching columns of A_g and all of B_g. A group without tokens still has its C_g set to
// beta * C_g (the GEMM's k = 0 case).
void tasks_varying_k(const GroupedGemmDesc& d, const kcheck::GroupedGemmLayout& l, const void* a,
                     const void* b, void* c, std::vector<Task>& tasks) {
  const double avg_k = d.groups > 0 ? static_cast<double>(d.k) / static_cast<double>(d.groups) : 0.0;
  const int64_t rows = block_rows(2.0 * static_cast<double>(d.n) * avg_k, d.m * d.groups);
  int64_t k0 = 0;  // first row of group g in the stacked A and B
  for (int64_t g = 0; g < d.groups; ++g) {
    const int64_t kg = d.sizes[g];
    for (int64_t r = 0; r < d.m; r += rows) {
      Task t;
      t.desc.trans_a = true;
      t.desc.m = std::min(rows, d.m - r);
      t.desc.n = d.n;
      t.desc.k = kg;
      t.desc.alpha = d.alpha;
      t.desc.beta = d.beta;
      t.desc.lda = l.lda;
      t.desc.ldb = l.ldb;
      t.desc.ldc = l.ldc;
      t.desc.a_type = d.a_type;
      t.desc.b_type = d.b_type;
      t.desc.c_type = d.c_type;
      t.a = offset(a, k0 * l.lda + r, d.a_type);
      t.b = offset(b, k0 * l.ldb, d.b_type);
      t.c = offset(c, g * l.stride + r * l.ldc, d.c_type);
      tasks.push_back(t);
    }
    k0 += kg;
  }
}

}  // namespace

void CpuBackend::grouped_gemm(const GroupedGemmDesc& d, const void* a, const void* b, void* c) {
  const kcheck::GroupedGemmLayout layout = kcheck::check_grouped_gemm(d, a, b, c);
  if (layout.work == kcheck::Work::none) return;
  std::vector<Task> tasks;
  if (d.varying == GroupedDim::M) {
    tasks_varying_m(d, layout, a, b, c, tasks);
  } else {
    tasks_varying_k(d, layout, a, b, c, tasks);
  }
  const auto n = static_cast<int64_t>(tasks.size());
  // Inside the parallel region each gemm() runs single-threaded (its own OpenMP loops and
  // OpenBLAS see omp_in_parallel()).
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    const Task& t = tasks[static_cast<std::size_t>(i)];
    gemm(t.desc, t.a, t.b, t.c);
  }
}

}  // namespace ptdp
