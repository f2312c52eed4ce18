// What the spec-driven equivalence programs under mpiexec share (test_moe_equivalence,
// test_mtp_equivalence): the failure count every rank keeps, host copies of tensors, a
// parameter's local slice of the serial run's global values, and main(): each argument a spec,
// run in turn, every rank's failures summed, the exit status 1 when any failed.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/params/params.h"
#include "core/pipeline/schedule.h"

namespace ptdp::spec_harness {

inline int g_rank = 0, g_failed = 0, g_passed = 0;

/// Counts a check; a failed one is printed with this rank's number.
inline void expect(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "[rank %d] FAIL %s\n", g_rank, what.c_str());
}

/// A spec's schedule word: 1f1b, interleaved or zbv; false for any other.
inline bool schedule_of(const std::string& word, ScheduleKind* kind) {
  if (word == "1f1b") *kind = ScheduleKind::OneFOneB;
  else if (word == "interleaved") *kind = ScheduleKind::Interleaved1F1B;
  else if (word == "zbv") *kind = ScheduleKind::ZeroBubbleV;
  else return false;
  return true;
}

/// An fp32 tensor's values on the host.
inline std::vector<float> host(const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  t.copy_to_host(v.data(), v.size() * sizeof(float));
  return v;
}

/// The global-tensor elements of `info`'s local slice, row-major, in local order.
inline std::vector<float> slice_of(const ParamInfo& info, const std::vector<float>& global) {
  const int64_t cols = info.global_shape.ndim() == 2 ? info.global_shape[1] : 1;
  const int64_t lr = info.local_shape[0], lc = info.local_shape.ndim() == 2 ? info.local_shape[1] : 1;
  std::vector<float> out(static_cast<std::size_t>(lr * lc));
  for (const SliceRun& run : slice_runs(info)) {
    for (int64_t k = 0; k < run.count; ++k) {
      for (int64_t o = 0; o < (info.partition_dim == 1 ? lr : lc); ++o) {
        const int64_t li = run.local_start + k, gi = run.global_start + k;
        const int64_t to = info.partition_dim == 1 ? o * lc + li : li * lc + o;
        const int64_t from = info.partition_dim == 1 ? o * cols + gi : gi * cols + o;
        out[static_cast<std::size_t>(to)] = global[static_cast<std::size_t>(from)];
      }
    }
  }
  return out;
}

/// main(): MPI up, each argument parsed into a Spec (a bad one is a failure) and run on the
/// world's size (an exception is a failure naming the spec), the failures summed over the
/// ranks and printed by rank 0; returns the exit status.
template <typename Spec>
int run_specs(int argc, char** argv, bool (*parse)(const char*, Spec*), void (*run)(const Spec&, int)) {
  MPI_Init(&argc, &argv);
  int world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int i = 1; i < argc; ++i) {
    Spec s;
    if (!parse(argv[i], &s)) {
      expect(false, std::string("bad spec ") + argv[i]);
      continue;
    }
    try {
      run(s, world);
    } catch (const std::exception& e) {
      expect(false, s.text + ": " + e.what());
    }
  }
  int failed = g_failed, passed = g_passed;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &passed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%d passed, %d failed\n", passed, failed);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}

}  // namespace ptdp::spec_harness
