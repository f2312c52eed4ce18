// Runtime, process groups, collectives and point-to-point transfers through the C API.
#include <cstdlib>
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/comm/flight_analyzer.h"
#include "core/comm/flight_recorder.h"
#include "core/model/pipeline_split.h"

#ifdef PTDP_HAVE_MPI
#include "ptdp/ptdp_mpi.h"
#endif

static_assert(PTDP_GROUP_WORLD == static_cast<int>(ptdp::GroupKind::World));
static_assert(PTDP_GROUP_TENSOR == static_cast<int>(ptdp::GroupKind::Tensor));
static_assert(PTDP_GROUP_PIPELINE == static_cast<int>(ptdp::GroupKind::Pipeline));
static_assert(PTDP_GROUP_DATA == static_cast<int>(ptdp::GroupKind::Data));
static_assert(PTDP_GROUP_MODEL == static_cast<int>(ptdp::GroupKind::Model));
static_assert(PTDP_GROUP_EMBEDDING == static_cast<int>(ptdp::GroupKind::Embedding));
static_assert(PTDP_GROUP_CONTEXT == static_cast<int>(ptdp::GroupKind::Context));
static_assert(PTDP_GROUP_DATA_CONTEXT == static_cast<int>(ptdp::GroupKind::DataContext));
static_assert(PTDP_GROUP_EXPERT_TENSOR == static_cast<int>(ptdp::GroupKind::ExpertTensor));
static_assert(PTDP_GROUP_EXPERT_MODEL == static_cast<int>(ptdp::GroupKind::ExpertModel));
static_assert(PTDP_GROUP_EXPERT_DATA == static_cast<int>(ptdp::GroupKind::ExpertData));
static_assert(PTDP_GROUP_EXPERT_TENSOR_AND_MODEL == static_cast<int>(ptdp::GroupKind::ExpertTensorAndModel));
static_assert(PTDP_GROUP_TENSOR_CONTEXT == static_cast<int>(ptdp::GroupKind::TensorContext));
static_assert(PTDP_GROUP_TENSOR_CONTEXT + 1 == ptdp::kNumGroupKinds, "every group kind has its C value");
static_assert(PTDP_REDUCE_SUM == static_cast<int>(ptdp::ReduceOp::Sum));
static_assert(PTDP_REDUCE_AVG == static_cast<int>(ptdp::ReduceOp::Avg));
static_assert(PTDP_REDUCE_MAX == static_cast<int>(ptdp::ReduceOp::Max));
static_assert(PTDP_REDUCE_MIN == static_cast<int>(ptdp::ReduceOp::Min));

namespace {

using ptdp::capi::copy_text;
using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::parallel_config;
using ptdp::capi::require_non_null;
using ptdp::capi::runtime_options;

ptdp::GroupKind checked_kind(ptdp_group_kind kind) {
  PTDP_CHECK_ARG(static_cast<int>(kind) >= 0 && static_cast<int>(kind) < ptdp::kNumGroupKinds,
                 "kind = " + std::to_string(static_cast<int>(kind)) + " is not a ptdp_group_kind");
  return static_cast<ptdp::GroupKind>(kind);
}

ptdp::ReduceOp checked_op(ptdp_reduce_op op) {
  PTDP_CHECK_ARG(op >= PTDP_REDUCE_SUM && op <= PTDP_REDUCE_MIN,
                 "op = " + std::to_string(static_cast<int>(op)) + " is not a ptdp_reduce_op");
  return static_cast<ptdp::ReduceOp>(op);
}

void copy_members(const std::vector<int>& members, int32_t* out, int32_t capacity, int32_t* count) {
  require_non_null(count, "count");
  PTDP_CHECK_ARG(capacity >= 0, "capacity = " + std::to_string(capacity) + " is negative");
  const auto n = static_cast<int32_t>(members.size());
  PTDP_CHECK_ARG(capacity >= n, "capacity = " + std::to_string(capacity) + " is smaller than the " +
                                    std::to_string(n) + " members of the group");
  if (n > 0) require_non_null(out, "world_ranks");
  for (int32_t i = 0; i < n; ++i) out[i] = members[static_cast<std::size_t>(i)];
  *count = n;
}

ptdp_runtime wrap_runtime(std::shared_ptr<ptdp::Runtime> rt) {
  auto* h = new ptdp_runtime_impl;
  h->runtime = std::move(rt);
  return h;
}

/// Runs one communication call: resolves the group's communicator, starts the operation, then
/// either waits for it (work == NULL) or hands back a work handle.
template <typename Start>
void communicate(ptdp_groups groups, ptdp_group_kind kind, ptdp::Device device, ptdp_work* work,
                 Start&& start) {
  ptdp_groups_impl& g = live(groups, "groups");
  const ptdp::GroupKind k = checked_kind(kind);
  ptdp::Communicator& comm = g.groups->comm_for(k, device);
  ptdp::WorkPtr w = start(comm);
  if (work == nullptr) {
    w->wait();
    return;
  }
  auto* h = new ptdp_work_impl;
  h->owner = &g;
  h->work = std::move(w);
  ++g.dependents;
  *work = h;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_runtime_options_init(ptdp_runtime_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->comm_timeout_s = 0;
    options->verify_collectives = 1;
    options->use_mpi = 1;
    options->use_nccl = 1;
    options->cpu_threads = 0;  // OMP_NUM_THREADS, else this rank's share of the node's CPUs
  });
}

PTDP_API ptdp_status ptdp_runtime_create(const ptdp_runtime_options* options, ptdp_runtime* out) {
  return guard(__func__, [&] {
    require_non_null(out, "out");
    bool use_mpi = true;
    const ptdp::RuntimeOptions o = runtime_options(options, &use_mpi);
    *out = wrap_runtime(use_mpi ? ptdp::Runtime::create(o) : ptdp::Runtime::create_self(o));
  });
}

PTDP_API ptdp_status ptdp_runtime_create_from_fortran(const ptdp_runtime_options* options,
                                                      int32_t fortran_comm, ptdp_runtime* out) {
  return guard(__func__, [&] {
    require_non_null(out, "out");
    const ptdp::RuntimeOptions o = runtime_options(options, nullptr);
    *out = wrap_runtime(ptdp::Runtime::create_from_fortran(o, fortran_comm));
  });
}

#ifdef PTDP_HAVE_MPI
PTDP_API ptdp_status ptdp_runtime_create_from_mpi(const ptdp_runtime_options* options, MPI_Comm comm,
                                                  ptdp_runtime* out) {
  return guard(__func__, [&] {
    require_non_null(out, "out");
    const ptdp::RuntimeOptions o = runtime_options(options, nullptr);
    *out = wrap_runtime(ptdp::Runtime::create_from_mpi(o, &comm));
  });
}
#endif

PTDP_API ptdp_status ptdp_runtime_destroy(ptdp_runtime runtime) {
  return guard(__func__, [&] {
    if (runtime == nullptr) return;
    ptdp_runtime_impl& rt = live(runtime, "runtime");
    const int n = rt.dependents.load();
    if (n > 0) {
      ptdp::throw_error(ptdp::ErrorCode::InvalidState,
                        std::to_string(n) + " ptdp_groups or ptdp_trainer handles created on this runtime "
                                            "still exist; destroy them first");
    }
    ptdp::capi::release(runtime);
  });
}

PTDP_API ptdp_status ptdp_runtime_world(ptdp_runtime runtime, int32_t* rank, int32_t* size) {
  return guard(__func__, [&] {
    const ptdp::Runtime& rt = *live(runtime, "runtime").runtime;
    if (rank) *rank = rt.world_rank();
    if (size) *size = rt.world_size();
  });
}

PTDP_API ptdp_status ptdp_runtime_local(ptdp_runtime runtime, int32_t* local_rank, int32_t* local_size) {
  return guard(__func__, [&] {
    const ptdp::Runtime& rt = *live(runtime, "runtime").runtime;
    if (local_rank) *local_rank = rt.local_rank();
    if (local_size) *local_size = rt.local_size();
  });
}

PTDP_API ptdp_status ptdp_runtime_cpu_threads(ptdp_runtime runtime, int32_t* threads) {
  return guard(__func__, [&] {
    const ptdp::Runtime& rt = *live(runtime, "runtime").runtime;
    require_non_null(threads, "threads");
    *threads = rt.cpu_threads();
  });
}

PTDP_API ptdp_status ptdp_runtime_gpu(ptdp_runtime runtime, int32_t* gpu) {
  return guard(__func__, [&] {
    const ptdp::Runtime& rt = *live(runtime, "runtime").runtime;
    require_non_null(gpu, "gpu");
    *gpu = rt.gpu();
  });
}

PTDP_API ptdp_status ptdp_runtime_abort(ptdp_runtime runtime) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(runtime != nullptr, "runtime is NULL");
    live(runtime, "runtime").runtime->abort();
  });
}

PTDP_API ptdp_status ptdp_flight_recorder_dump(ptdp_runtime runtime, const char* dir) {
  return guard(__func__, [&] {
    const ptdp::Runtime& rt = *live(runtime, "runtime").runtime;
    std::string where;
    if (dir != nullptr) {
      where = dir;
    } else {
      const char* env = std::getenv("PTDP_FLIGHT_RECORDER_DIR");
      PTDP_CHECK_ARG(env != nullptr && *env != '\0',
                     "dir is NULL and PTDP_FLIGHT_RECORDER_DIR is not set (name a directory)");
      where = env;
    }
    PTDP_CHECK_ARG(!where.empty(), "dir is an empty string");
    ptdp::FlightRecorder::instance().dump(where + "/" + ptdp::FlightRecorder::file_name(rt.world_rank()));
  });
}

PTDP_API ptdp_status ptdp_flight_analyze(const char* dir, char* buffer, size_t capacity, size_t* length,
                                         int32_t* culprit_rank) {
  return guard(__func__, [&] {
    require_non_null(dir, "dir");
    require_non_null(length, "length");
    const ptdp::FlightAnalysis a = ptdp::analyze_flight_records(dir);
    copy_text(a.report, buffer, capacity, length);
    if (culprit_rank) *culprit_rank = a.culprit;
  });
}

PTDP_API ptdp_status ptdp_parallel_options_init(ptdp_parallel_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->tensor_model_parallel_size = 1;
    options->pipeline_model_parallel_size = 1;
    options->virtual_pipeline_model_parallel_size = 1;
    options->context_parallel_size = 1;
  });
}

PTDP_API ptdp_status ptdp_layout_members(const ptdp_parallel_options* options, int32_t world_size,
                                         int32_t world_rank, ptdp_group_kind kind,
                                         int32_t* world_ranks, int32_t capacity, int32_t* count) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(world_size > 0, "world_size = " + std::to_string(world_size) + " is not > 0");
    ptdp::ParallelConfig c = parallel_config(options);
    c.world = world_size;
    const ptdp::Layout layout(c);
    PTDP_CHECK_ARG(world_rank >= 0 && world_rank < world_size,
                   "world_rank = " + std::to_string(world_rank) + " is outside [0, " +
                       std::to_string(world_size) + ")");
    const auto members = layout.members(checked_kind(kind), world_rank);
    copy_members(members, world_ranks, capacity, count);
  });
}

PTDP_API ptdp_status ptdp_layout_chunk_layers(const ptdp_parallel_options* options, int32_t num_layers,
                                              int32_t pipeline_rank, int32_t virtual_stage, int32_t* first_layer,
                                              int32_t* layer_count) {
  return guard(__func__, [&] {
    const ptdp::ParallelConfig c = parallel_config(options);
    PTDP_CHECK_ARG(c.pipeline > 0 && c.virtual_stages > 0 && (c.virtual_stages == 1 || c.pipeline > 1),
                   "options: pipeline size " + std::to_string(c.pipeline) + " and virtual pipeline size " +
                       std::to_string(c.virtual_stages) + " are not a layout (both > 0, v > 1 only with p > 1)");
    PTDP_CHECK_ARG(num_layers > 0, "num_layers = " + std::to_string(num_layers) + " is not > 0");
    PTDP_CHECK_ARG(pipeline_rank >= 0 && pipeline_rank < c.pipeline,
                   "pipeline_rank = " + std::to_string(pipeline_rank) + " is outside [0, " +
                       std::to_string(c.pipeline) + ")");
    PTDP_CHECK_ARG(virtual_stage >= 0 && virtual_stage < c.virtual_stages,
                   "virtual_stage = " + std::to_string(virtual_stage) + " is outside [0, " +
                       std::to_string(c.virtual_stages) + ")");
    const std::vector<int> counts = ptdp::chunk_layer_counts(num_layers, ptdp::pipeline_split(c));
    const std::size_t chunk = static_cast<std::size_t>(virtual_stage) * static_cast<std::size_t>(c.pipeline) +
                              static_cast<std::size_t>(pipeline_rank);
    int32_t first = 0;
    for (std::size_t k = 0; k < chunk; ++k) first += counts[k];
    if (first_layer) *first_layer = first;
    if (layer_count) *layer_count = counts[chunk];
  });
}

PTDP_API ptdp_status ptdp_groups_create(ptdp_runtime runtime, const ptdp_parallel_options* options,
                                        ptdp_groups* out) {
  return guard(__func__, [&] {
    ptdp_runtime_impl& rt = live(runtime, "runtime");
    require_non_null(out, "out");
    const ptdp::ParallelConfig c = parallel_config(options);
    auto groups = std::make_unique<ptdp::ProcessGroups>(rt.runtime, c);
    auto* h = new ptdp_groups_impl;
    h->owner = &rt;
    h->groups = std::move(groups);
    ++rt.dependents;
    *out = h;
  });
}

PTDP_API ptdp_status ptdp_groups_destroy(ptdp_groups groups) {
  return guard(__func__, [&] {
    if (groups == nullptr) return;
    ptdp_groups_impl& g = live(groups, "groups");
    const int n = g.dependents.load();
    if (n > 0) {
      ptdp::throw_error(ptdp::ErrorCode::InvalidState,
                        std::to_string(n) + " ptdp_work, ptdp_model, ptdp_layer or ptdp_optimizer handles on these groups "
                                            "still exist; destroy them first");
    }
    --g.owner->dependents;
    ptdp::capi::release(groups);
  });
}

PTDP_API ptdp_status ptdp_groups_rank(ptdp_groups groups, ptdp_group_kind kind, int32_t* rank) {
  return guard(__func__, [&] {
    const ptdp_groups_impl& g = live(groups, "groups");
    const ptdp::GroupKind k = checked_kind(kind);
    require_non_null(rank, "rank");
    *rank = g.groups->rank(k);
  });
}

PTDP_API ptdp_status ptdp_groups_size(ptdp_groups groups, ptdp_group_kind kind, int32_t* size) {
  return guard(__func__, [&] {
    const ptdp_groups_impl& g = live(groups, "groups");
    const ptdp::GroupKind k = checked_kind(kind);
    require_non_null(size, "size");
    *size = g.groups->size(k);
  });
}

PTDP_API ptdp_status ptdp_groups_members(ptdp_groups groups, ptdp_group_kind kind,
                                         int32_t* world_ranks, int32_t capacity, int32_t* count) {
  return guard(__func__, [&] {
    const ptdp_groups_impl& g = live(groups, "groups");
    copy_members(g.groups->members(checked_kind(kind)), world_ranks, capacity, count);
  });
}

PTDP_API ptdp_status ptdp_all_reduce(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                                     ptdp_reduce_op op, ptdp_work* work) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = live(tensor, "tensor").tensor;
    const ptdp::ReduceOp o = checked_op(op);
    communicate(groups, kind, t.device(), work, [&](ptdp::Communicator& c) { return c.all_reduce(t, o); });
  });
}

PTDP_API ptdp_status ptdp_reduce_scatter(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor in,
                                         ptdp_tensor out, ptdp_reduce_op op, ptdp_work* work) {
  return guard(__func__, [&] {
    const ptdp::Tensor& a = live(in, "in").tensor;
    const ptdp::Tensor& b = live(out, "out").tensor;
    const ptdp::ReduceOp o = checked_op(op);
    communicate(groups, kind, a.device(), work, [&](ptdp::Communicator& c) { return c.reduce_scatter(a, b, o); });
  });
}

PTDP_API ptdp_status ptdp_all_gather(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor in,
                                     ptdp_tensor out, ptdp_work* work) {
  return guard(__func__, [&] {
    const ptdp::Tensor& a = live(in, "in").tensor;
    const ptdp::Tensor& b = live(out, "out").tensor;
    communicate(groups, kind, a.device(), work, [&](ptdp::Communicator& c) { return c.all_gather(a, b); });
  });
}

PTDP_API ptdp_status ptdp_broadcast(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                                    int32_t root, ptdp_work* work) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = live(tensor, "tensor").tensor;
    communicate(groups, kind, t.device(), work, [&](ptdp::Communicator& c) { return c.broadcast(t, root); });
  });
}

PTDP_API ptdp_status ptdp_send(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                               int32_t peer, int32_t tag, ptdp_work* work) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = live(tensor, "tensor").tensor;
    communicate(groups, kind, t.device(), work, [&](ptdp::Communicator& c) { return c.send(t, peer, tag); });
  });
}

PTDP_API ptdp_status ptdp_recv(ptdp_groups groups, ptdp_group_kind kind, ptdp_tensor tensor,
                               int32_t peer, int32_t tag, ptdp_work* work) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = live(tensor, "tensor").tensor;
    communicate(groups, kind, t.device(), work, [&](ptdp::Communicator& c) { return c.recv(t, peer, tag); });
  });
}

PTDP_API ptdp_status ptdp_batch_send_recv(ptdp_groups groups, ptdp_group_kind kind,
                                          const ptdp_p2p_op* ops, int32_t count, ptdp_work* work) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(count >= 0, "count = " + std::to_string(count) + " is negative");
    if (count > 0) require_non_null(ops, "ops");
    std::vector<ptdp::P2POp> list;
    for (int32_t i = 0; i < count; ++i) {
      const std::string entry = "ops[" + std::to_string(i) + "]";
      const ptdp_p2p_op& op = ops[i];
      PTDP_CHECK_ARG(op.kind == PTDP_P2P_SEND || op.kind == PTDP_P2P_RECV,
                     entry + ".kind = " + std::to_string(static_cast<int>(op.kind)) +
                         " is not a ptdp_p2p_kind");
      const ptdp::Tensor& t = live(op.tensor, (entry + ".tensor").c_str()).tensor;
      list.push_back(ptdp::P2POp{op.kind == PTDP_P2P_SEND ? ptdp::P2POp::Kind::Send : ptdp::P2POp::Kind::Recv,
                                 t, op.peer, op.tag});
    }
    const ptdp::Device device = list.empty() ? ptdp::Device{} : list.front().tensor.device();
    for (std::size_t i = 1; i < list.size(); ++i) {
      PTDP_CHECK_ARG(list[i].tensor.device() == device,
                     "ops[" + std::to_string(i) + "].tensor is on " + list[i].tensor.device().str() +
                         ", ops[0].tensor on " + device.str() + "; one batch uses one device");
    }
    communicate(groups, kind, device, work, [&](ptdp::Communicator& c) { return c.batch_p2p(list); });
  });
}

PTDP_API ptdp_status ptdp_barrier(ptdp_groups groups, ptdp_group_kind kind, ptdp_work* work) {
  return guard(__func__, [&] {
    communicate(groups, kind, ptdp::Device{}, work, [&](ptdp::Communicator& c) { return c.barrier(); });
  });
}

PTDP_API ptdp_status ptdp_work_wait(ptdp_work work) {
  return guard(__func__, [&] { live(work, "work").work->wait(); });
}

PTDP_API ptdp_status ptdp_work_test(ptdp_work work, int32_t* done) {
  return guard(__func__, [&] {
    ptdp_work_impl& w = live(work, "work");
    require_non_null(done, "done");
    *done = w.work->test() ? 1 : 0;
  });
}

PTDP_API ptdp_status ptdp_work_destroy(ptdp_work work) {
  return guard(__func__, [&] {
    if (work == nullptr) return;
    ptdp_work_impl& w = live(work, "work");
    // Drain first, so the result is complete (staging and averaging included) once destroy
    // returns; the handle is released even when the operation failed or timed out.
    struct Release {
      ptdp_work h;
      ~Release() {
        --h->owner->dependents;
        ptdp::capi::release(h);
      }
    } release{work};
    w.work->wait();
  });
}

}  // extern "C"
