// The CPU engine's OpenMP threads (ptdp_runtime_options::cpu_threads, ptdp_runtime_cpu_threads):
// which count a runtime chooses, and that OpenMP (and with it OpenBLAS's OpenMP build) runs with
// it on the creating thread and on every other thread that computes through ptdp.
//
//   mpiexec --bind-to none -n W test_comm_threads default   OMP_NUM_THREADS unset: the node's
//                                                            CPUs over the ranks sharing them
//   mpiexec -n W test_comm_threads env N                     OMP_NUM_THREADS=N: N, unless
//                                                            cpu_threads says otherwise
#include <sched.h>
#include <unistd.h>

#include <cblas.h>
#include <omp.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::expect_eq;
using ct::expect_message;

/// This process's affinity mask as one flag per CPU (the test's own reading, through the same
/// system call the library uses).
std::vector<char> affinity() {
  const int cpus = static_cast<int>(std::max<long>(sysconf(_SC_NPROCESSORS_CONF), 1024));
  std::vector<char> on(static_cast<std::size_t>(cpus), 0);
  cpu_set_t* set = CPU_ALLOC(cpus);
  const std::size_t bytes = CPU_ALLOC_SIZE(cpus);
  CPU_ZERO_S(bytes, set);
  if (sched_getaffinity(0, bytes, set) == 0) {
    for (int c = 0; c < cpus; ++c) on[static_cast<std::size_t>(c)] = CPU_ISSET_S(c, bytes, set) ? 1 : 0;
  }
  CPU_FREE(set);
  return on;
}

int count(const std::vector<char>& on) {
  int n = 0;
  for (char c : on) n += c;
  return n;
}

/// The count the default should give: this rank's CPUs over the ranks of `comm` on this node
/// whose masks share a CPU with this one, at least 1. `*same` tells whether every rank of the
/// node has this rank's mask (ranks the launcher did not bind).
int expected_default(MPI_Comm comm, bool* same) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  const std::vector<char> mine = affinity();
  std::vector<char> all(mine.size() * static_cast<std::size_t>(n));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(), static_cast<int>(mine.size()),
                MPI_CHAR, node);
  MPI_Comm_free(&node);
  int sharing = 0;
  *same = true;
  for (int r = 0; r < n; ++r) {
    bool overlap = false;
    for (std::size_t c = 0; c < mine.size(); ++c) {
      const char theirs = all[static_cast<std::size_t>(r) * mine.size() + c];
      overlap = overlap || (mine[c] && theirs);
      *same = *same && mine[c] == theirs;
    }
    sharing += overlap ? 1 : 0;
  }
  return std::max(1, count(mine) / std::max(1, sharing));
}

/// The count `rt` reports, checked against `want`, against OpenMP and OpenBLAS on this thread,
/// and against OpenMP on a thread that starts after the runtime and computes through ptdp.
void check_threads(ptdp_runtime rt, int want, const std::string& what) {
  ct::context(what);
  int32_t got = -7;
  CT_OK(ptdp_runtime_cpu_threads(rt, &got));
  expect_eq(got, static_cast<int32_t>(want), "ptdp_runtime_cpu_threads");
  expect_eq(omp_get_max_threads(), want, "omp_get_max_threads() on the thread that created the runtime");
  expect_eq(openblas_get_num_threads(), want, "openblas_get_num_threads() after the runtime was created");

  // A new thread starts with OpenMP's process default (OMP_NUM_THREADS, or all CPUs); its
  // first CPU operation through ptdp gives it the runtime's count, and a count the thread sets
  // itself afterwards stands.
  int before = -1, after = -1, own = -1;
  std::thread other([&] {
    before = omp_get_max_threads();
    ptdp_tensor t = nullptr;
    const int64_t shape[1] = {4};
    if (ptdp_tensor_create(nullptr, 1, shape, nullptr, 0, &t) == PTDP_SUCCESS) {
      ptdp_tensor_fill(t, 1.0);
      after = omp_get_max_threads();
      omp_set_num_threads(want + 4);
      ptdp_tensor_fill(t, 2.0);
      own = omp_get_max_threads();
      ptdp_tensor_destroy(t);
    }
  });
  other.join();
  expect(before >= 1, "a new thread starts with OpenMP's default", ">= 1", ct::str(before));
  expect_eq(after, want, "omp_get_max_threads() on another thread after a CPU operation through ptdp");
  expect_eq(own, want + 4, "a thread's own omp_set_num_threads() after that stands");
}

/// cpu_threads > 0 wins over everything, OMP_NUM_THREADS included; < 0 is refused by every
/// constructor, naming the field, with nothing created.
void check_explicit_and_refused() {
  ptdp_runtime_options o = ct::runtime_options();
  o.cpu_threads = 2;
  ptdp_runtime rt = nullptr;
  ct::context("explicit cpu_threads");
  if (CT_OK(ptdp_runtime_create(&o, &rt)).empty()) {
    check_threads(rt, 2, "cpu_threads = 2 over MPI_COMM_WORLD");
    CT_OK(ptdp_runtime_destroy(rt));
  }
  o.cpu_threads = 3;
  rt = nullptr;
  if (CT_OK(ptdp_runtime_create_from_fortran(&o, MPI_Comm_c2f(MPI_COMM_WORLD), &rt)).empty()) {
    check_threads(rt, 3, "cpu_threads = 3 from the Fortran handle");
    CT_OK(ptdp_runtime_destroy(rt));
  }

  ct::context("negative cpu_threads");
  o.cpu_threads = -1;
  rt = nullptr;
  const char* want = "options->cpu_threads = -1 is negative";
  expect_message(CT_STATUS(ptdp_runtime_create(&o, &rt), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_runtime_create: ", want}, "ptdp_runtime_create");
  expect_message(CT_STATUS(ptdp_runtime_create_from_mpi(&o, MPI_COMM_WORLD, &rt), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_runtime_create_from_mpi: ", want}, "ptdp_runtime_create_from_mpi");
  expect_message(CT_STATUS(ptdp_runtime_create_from_fortran(&o, MPI_Comm_c2f(MPI_COMM_WORLD), &rt),
                           PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_runtime_create_from_fortran: ", want}, "ptdp_runtime_create_from_fortran");
  o.use_mpi = 0;
  expect_message(CT_STATUS(ptdp_runtime_create(&o, &rt), PTDP_ERR_INVALID_ARGUMENT),
                 {"ptdp_runtime_create: ", want}, "ptdp_runtime_create, use_mpi = 0");
  expect(rt == nullptr, "refused creations leave *out unchanged", "NULL", "a handle");
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, world = 1;
  ct::start(&argc, &argv, &me, &world);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "default") {
    ct::context("default");
    const char* env = std::getenv("OMP_NUM_THREADS");
    expect(env == nullptr, "OMP_NUM_THREADS is unset for this run", "unset", env ? env : "");
    // The node's ranks of MPI_COMM_WORLD share its CPUs.
    ptdp_runtime_options o = ct::runtime_options();
    ptdp_runtime rt = nullptr;
    if (CT_OK(ptdp_runtime_create(&o, &rt)).empty()) {
      int32_t local = 0;
      CT_OK(ptdp_runtime_local(rt, nullptr, &local));
      bool same = false;
      const int want = expected_default(MPI_COMM_WORLD, &same);
      // Unbound ranks (this test runs under --bind-to none): one mask, divided by the local ranks.
      const int cpus = count(affinity());
      expect(same, "the launcher left the ranks unbound (--bind-to none)");
      if (same) expect_eq(want, std::max(1, cpus / local), "affinity CPUs / local ranks, at least 1");
      check_threads(rt, want, "default over MPI_COMM_WORLD (" + std::to_string(cpus) + " CPUs, " +
                                  std::to_string(local) + " local ranks)");
      CT_OK(ptdp_runtime_destroy(rt));
    }
    // A runtime over a communicator of one rank: it alone uses this rank's CPUs.
    MPI_Comm alone = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, me, 0, &alone);
    rt = nullptr;
    if (CT_OK(ptdp_runtime_create_from_mpi(&o, alone, &rt)).empty()) {
      check_threads(rt, count(affinity()), "default over a communicator of one rank");
      CT_OK(ptdp_runtime_destroy(rt));
    }
    MPI_Comm_free(&alone);
    // A world of one without MPI: the same.
    o.use_mpi = 0;
    rt = nullptr;
    if (CT_OK(ptdp_runtime_create(&o, &rt)).empty()) {
      check_threads(rt, count(affinity()), "default, use_mpi = 0");
      CT_OK(ptdp_runtime_destroy(rt));
    }
    check_explicit_and_refused();
  } else if (mode == "env" && argc > 2) {
    const int n = std::atoi(argv[2]);
    ct::context("env");
    const char* env = std::getenv("OMP_NUM_THREADS");
    expect(env != nullptr && std::atoi(env) == n, "OMP_NUM_THREADS is set for this run", argv[2], env ? env : "unset");
    // OMP_NUM_THREADS wins over the division, whatever the node's CPUs.
    ptdp_runtime_options o = ct::runtime_options();
    ptdp_runtime rt = nullptr;
    if (CT_OK(ptdp_runtime_create(&o, &rt)).empty()) {
      check_threads(rt, n, "OMP_NUM_THREADS=" + std::to_string(n) + " over MPI_COMM_WORLD");
      CT_OK(ptdp_runtime_destroy(rt));
    }
    o.use_mpi = 0;
    rt = nullptr;
    if (CT_OK(ptdp_runtime_create(&o, &rt)).empty()) {
      check_threads(rt, n, "OMP_NUM_THREADS=" + std::to_string(n) + ", use_mpi = 0");
      CT_OK(ptdp_runtime_destroy(rt));
    }
    check_explicit_and_refused();
  } else {
    std::fprintf(stderr, "usage: test_comm_threads default | env N\n");
    MPI_Finalize();
    return 2;
  }
  const int rc = ct::finish("test_comm_threads");
  MPI_Finalize();
  return rc;
}
