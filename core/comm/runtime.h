// Runtime: this process's place in the job. Created from a communicator the caller already
// has (or MPI_COMM_WORLD, initialising MPI when nobody has), it duplicates that communicator
// so ptdp's traffic never mixes with the caller's, sets MPI_ERRORS_RETURN on its duplicate,
// finds the ranks sharing this node, and picks the GPU = local rank where GPUs exist.
// Without MPI in the build, or when MPI is not wanted, it is a world of one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"

namespace ptdp {

struct RuntimeOptions {
  /// Deadline of every blocking wait, seconds; <= 0 means PTDP_COMM_TIMEOUT_S or 300.
  double timeout_s = 0;
  /// CommSettings::verify for every communicator of the runtime.
  bool verify_collectives = true;
  /// Create NCCL communicators for GPU tensors when NCCL is built in and this rank has a GPU
  /// of its own (ranks sharing a GPU use MPI, since NCCL refuses two ranks on one device).
  bool use_nccl = true;
  /// OpenMP threads of the process's CPU engine (kernels/cpu/cpu_threads.h). 0: OMP_NUM_THREADS
  /// when it is set, else the CPUs of this process's affinity mask over the ranks of this node
  /// that share them (at least 1); > 0: exactly that many.
  int cpu_threads = 0;
};

class Runtime {
 public:
  /// Uses MPI_COMM_WORLD (initialising MPI if it is not yet; then ptdp finalises it at exit).
  static std::shared_ptr<Runtime> create(const RuntimeOptions& options);
  /// Duplicates `*mpi_comm` (an MPI_Comm*, typed loosely so this header needs no mpi.h).
  /// MPI must already be initialised by the caller.
  static std::shared_ptr<Runtime> create_from_mpi(const RuntimeOptions& options, const void* mpi_comm);
  /// Duplicates the communicator a Fortran caller holds (MPI_Fint handle).
  static std::shared_ptr<Runtime> create_from_fortran(const RuntimeOptions& options, int fortran_comm);
  /// A world of one with no MPI at all; it uses GPU 0 where one exists, with NCCL for its GPU
  /// tensors when NCCL is built in and RuntimeOptions::use_nccl is set.
  static std::shared_ptr<Runtime> create_self(const RuntimeOptions& options);

  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  /// The GPU this rank uses (local rank modulo the GPUs present), or -1 when there is none.
  int gpu() const { return gpu_; }
  bool uses_mpi() const { return mpi_ != nullptr; }
  /// Whether process groups get NCCL communicators for GPU tensors (see RuntimeOptions).
  bool nccl_enabled() const { return nccl_enabled_; }
  const CommSettings& settings() const { return settings_; }
  /// The OpenMP threads this runtime gave the CPU engine when it was created (>= 1).
  int cpu_threads() const { return cpu_threads_; }

  Communicator& world() { return *world_comm_; }

  /// Aborts every communicator of this runtime (its world and every group and NCCL
  /// communicator made from its settings) without the other ranks: operations in flight are
  /// abandoned, waits and later calls fail fast with Error(InvalidState), and destroying the
  /// groups and the runtime then frees nothing that needs the peers (MPI communicators are left
  /// unfreed, knowingly; NCCL ones get ncclCommAbort). Idempotent; safe from another thread
  /// while one waits on an MPI communicator.
  void abort();
  bool aborted() const;

  /// Collective over the world: every rank calls it with the color of the group it joins (or
  /// -1 to join none) and its key (position) in that group. Returns nullptr for color -1.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name,
                                      const std::vector<int>& world_ranks);

 private:
  struct MpiState;
  Runtime() = default;
  void init_common(const RuntimeOptions& options);
  /// Chooses the CPU engine's threads (RuntimeOptions::cpu_threads `requested`; for 0 the
  /// affinity mask's `cpus` over the node's `sharing_ranks`) and applies them process-wide.
  void apply_cpu_threads(int requested, int cpus, int sharing_ranks);

  std::unique_ptr<MpiState> mpi_;
  std::unique_ptr<Communicator> world_comm_;
  CommSettings settings_;
  int world_rank_ = 0, world_size_ = 1, local_rank_ = 0, local_size_ = 1, gpu_ = -1, cpu_threads_ = 1;
  bool want_nccl_ = true, nccl_enabled_ = false;
};

/// After a failure of this rank alone (its peers may be waiting in a collective that will never
/// complete), MPI initialised by ptdp is not finalised at exit: MPI_Finalize would wait for the
/// peers, while an unfinalised exit makes the launcher end the whole job.
void abandon_mpi_finalize() noexcept;

}  // namespace ptdp
