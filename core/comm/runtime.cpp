#include "core/comm/runtime.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "base/error.h"
#include "kernels/cpu/cpu_threads.h"

#ifdef PTDP_HAVE_MPI
#include <mpi.h>

#include "core/comm/mpi/mpi_communicator.h"
#endif
#ifdef PTDP_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#endif

namespace ptdp {

#ifdef PTDP_HAVE_MPI
struct Runtime::MpiState {
  MPI_Comm world = MPI_COMM_NULL;  // our duplicate, owned by world_comm_
};

namespace {

// MPI initialised by ptdp is finalised at exit, after every runtime is gone, unless operations
// abandoned by a timeout are still pending or this rank failed alone (abandon_mpi_finalize):
// MPI_Finalize would then wait for them forever.
std::atomic<bool> g_abandoned{false};

void finalize_mpi_at_exit() {
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mpi_leaked_operations() == 0 && !g_abandoned.load()) MPI_Finalize();
}

void ensure_mpi_initialized() {
  int initialized = 0;
  mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw_error(ErrorCode::InvalidState, "MPI has already been finalised in this process");
  if (initialized) return;
  int provided = 0;
  mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  std::atexit(finalize_mpi_at_exit);
}

void require_mpi_initialized(const char* who) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    throw_error(ErrorCode::InvalidState,
                std::string(who) + ": MPI is not initialised (call MPI_Init first, or create the "
                                   "runtime without a communicator to let ptdp initialise MPI)");
  }
}

}  // namespace

void abandon_mpi_finalize() noexcept { g_abandoned.store(true); }
#else
struct Runtime::MpiState {};
void abandon_mpi_finalize() noexcept {}
#endif

namespace {

/// This process's affinity mask as 64-bit words, one bit per CPU; all zero when it cannot be
/// read. Every process of a node gets the same number of words (the node's CPUs, at least 1024).
std::vector<std::uint64_t> affinity_mask() {
  const int cpus = static_cast<int>(std::max<long>(sysconf(_SC_NPROCESSORS_CONF), 1024));
  std::vector<std::uint64_t> words(static_cast<std::size_t>((cpus + 63) / 64), 0);
  cpu_set_t* set = CPU_ALLOC(cpus);
  if (set == nullptr) return words;
  const std::size_t bytes = CPU_ALLOC_SIZE(cpus);
  CPU_ZERO_S(bytes, set);
  if (sched_getaffinity(0, bytes, set) == 0) {
    for (int c = 0; c < cpus; ++c) {
      if (CPU_ISSET_S(c, bytes, set)) words[static_cast<std::size_t>(c / 64)] |= std::uint64_t{1} << (c % 64);
    }
  }
  CPU_FREE(set);
  return words;
}

int count_cpus(const std::vector<std::uint64_t>& mask) {
  int n = 0;
  for (std::uint64_t w : mask) n += std::popcount(w);
  return n;
}

/// OMP_NUM_THREADS's first level when it is set to a count, else 0.
int omp_num_threads_from_env() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (end == env || (*end != '\0' && *end != ',') || n < 1 || n > (1 << 20)) return 0;
  return static_cast<int>(n);
}

}  // namespace

void Runtime::apply_cpu_threads(int requested, int cpus, int sharing_ranks) {
  int n = requested;
  if (n == 0) n = omp_num_threads_from_env();
  if (n == 0) {
    // Without a readable mask, every CPU of the machine, shared by every rank of the node.
    if (cpus == 0) cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n = std::max(1, cpus / std::max(1, sharing_ranks));
  }
  set_cpu_threads(n);
  cpu_threads_ = n;
}

void Runtime::init_common(const RuntimeOptions& options) {
  settings_.timeout_s = options.timeout_s > 0 ? options.timeout_s : comm_timeout_from_env();
  settings_.verify = options.verify_collectives;
  settings_.abort_scope = std::make_shared<CommAbortScope>();
  want_nccl_ = options.use_nccl;
}

void Runtime::abort() { settings_.abort_scope->abort(); }

bool Runtime::aborted() const { return settings_.abort_scope->aborted(); }

std::shared_ptr<Runtime> Runtime::create_self(const RuntimeOptions& options) {
  std::shared_ptr<Runtime> rt(new Runtime());
  rt->init_common(options);
  rt->settings_.world_rank = 0;
  FlightRecorder::instance().set_world(0, 1);
  rt->world_comm_ = std::make_unique<SelfCommunicator>(rt->settings_);
  rt->apply_cpu_threads(options.cpu_threads, count_cpus(affinity_mask()), 1);
#ifdef PTDP_HAVE_CUDA
  rt->gpu_ = cuda::device_count() > 0 ? 0 : -1;
#ifdef PTDP_HAVE_NCCL
  // A world of one owns its GPU: NCCL serves its GPU tensors as on any rank with a GPU of its
  // own (the bootstrap is the self communicator, so no MPI is needed).
  rt->nccl_enabled_ = rt->want_nccl_ && rt->gpu_ >= 0;
#endif
#endif
  return rt;
}

std::shared_ptr<Runtime> Runtime::create(const RuntimeOptions& options) {
#ifdef PTDP_HAVE_MPI
  ensure_mpi_initialized();
  MPI_Comm world = MPI_COMM_WORLD;
  return create_from_mpi(options, &world);
#else
  return create_self(options);
#endif
}

std::shared_ptr<Runtime> Runtime::create_from_fortran(const RuntimeOptions& options, int fortran_comm) {
#ifdef PTDP_HAVE_MPI
  require_mpi_initialized("create_from_fortran");
  MPI_Comm c = MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
  PTDP_CHECK_ARG(c != MPI_COMM_NULL, "fortran_comm = " + std::to_string(fortran_comm) +
                                         " is MPI_COMM_NULL or not a communicator handle");
  return create_from_mpi(options, &c);
#else
  (void)options;
  (void)fortran_comm;
  throw_error(ErrorCode::Unsupported, "this build of ptdp has no MPI support");
#endif
}

std::shared_ptr<Runtime> Runtime::create_from_mpi(const RuntimeOptions& options, const void* mpi_comm) {
#ifdef PTDP_HAVE_MPI
  PTDP_CHECK_ARG(mpi_comm != nullptr, "comm is NULL");
  require_mpi_initialized("create_from_mpi");
  const MPI_Comm user = *static_cast<const MPI_Comm*>(mpi_comm);
  PTDP_CHECK_ARG(user != MPI_COMM_NULL, "comm is MPI_COMM_NULL");
  std::shared_ptr<Runtime> rt(new Runtime());
  rt->init_common(options);
  rt->mpi_ = std::make_unique<MpiState>();
  // Serialised with the progress thread of the overlapped collectives (mpi_call_mutex()).
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());
  MPI_Comm dup = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(user, &dup), "MPI_Comm_dup of the caller's communicator");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  rt->mpi_->world = dup;
  mpi_check(MPI_Comm_rank(dup, &rt->world_rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(dup, &rt->world_size_), "MPI_Comm_size");
  rt->settings_.world_rank = rt->world_rank_;
  FlightRecorder::instance().set_world(rt->world_rank_, rt->world_size_);
  std::vector<int> all(static_cast<std::size_t>(rt->world_size_));
  for (int r = 0; r < rt->world_size_; ++r) all[static_cast<std::size_t>(r)] = r;
  rt->world_comm_ = std::make_unique<MpiCommunicator>(dup, "world group " + format_ranks(all), all, rt->settings_);

  MPI_Comm node = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rt->world_rank_, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
  MPI_Comm_rank(node, &rt->local_rank_);
  MPI_Comm_size(node, &rt->local_size_);
  // The node's ranks that may run on this rank's CPUs share them: all of the node's ranks
  // unless the launcher bound each to CPUs of its own. A rank whose mask could not be read
  // (all zero) counts as sharing every CPU.
  const std::vector<std::uint64_t> mine = affinity_mask();
  std::vector<std::uint64_t> all_masks(mine.size() * static_cast<std::size_t>(rt->local_size_));
  mpi_check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT64_T, all_masks.data(),
                          static_cast<int>(mine.size()), MPI_UINT64_T, node),
            "MPI_Allgather of the node's CPU affinity masks");
  MPI_Comm_free(&node);
  int sharing = 0;
  const int my_cpus = count_cpus(mine);
  for (int r = 0; r < rt->local_size_; ++r) {
    const std::uint64_t* theirs = all_masks.data() + static_cast<std::size_t>(r) * mine.size();
    bool overlap = my_cpus == 0;
    bool readable = false;
    for (std::size_t w = 0; w < mine.size(); ++w) {
      overlap = overlap || (mine[w] & theirs[w]) != 0;
      readable = readable || theirs[w] != 0;
    }
    if (overlap || !readable) ++sharing;
  }
  rt->apply_cpu_threads(options.cpu_threads, my_cpus, sharing);
#ifdef PTDP_HAVE_CUDA
  const int gpus = cuda::device_count();
  rt->gpu_ = gpus > 0 ? rt->local_rank_ % gpus : -1;
#ifdef PTDP_HAVE_NCCL
  rt->nccl_enabled_ = rt->want_nccl_ && gpus > 0 && rt->local_size_ <= gpus;
#endif
#endif
  return rt;
#else
  (void)options;
  (void)mpi_comm;
  throw_error(ErrorCode::Unsupported, "this build of ptdp has no MPI support");
#endif
}

Runtime::~Runtime() { world_comm_.reset(); }

std::unique_ptr<Communicator> Runtime::split(int color, int key, const std::string& name,
                                             const std::vector<int>& world_ranks) {
  PTDP_CHECK_ARG(color >= -1, "split: color must be >= -1, got " + std::to_string(color));
  if (aborted()) {
    throw_error(ErrorCode::InvalidState, "creating " + name + ": the runtime was aborted (ptdp_runtime_abort)");
  }
  if (!mpi_) {
    if (color < 0) return nullptr;
    return std::make_unique<SelfCommunicator>(settings_, name);
  }
#ifdef PTDP_HAVE_MPI
  std::lock_guard<std::recursive_mutex> lock(mpi_call_mutex());  // see create_from_mpi
  MPI_Comm out = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(mpi_->world, color < 0 ? MPI_UNDEFINED : color, key, &out),
            "MPI_Comm_split for " + name);
  if (out == MPI_COMM_NULL) return nullptr;
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return std::make_unique<MpiCommunicator>(out, name, world_ranks, settings_);
#else
  (void)key;
  (void)world_ranks;
  return nullptr;
#endif
}

}  // namespace ptdp
