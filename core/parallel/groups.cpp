#include "core/parallel/groups.h"

#include <algorithm>

#include "base/error.h"

#ifdef PTDP_HAVE_NCCL
#include "core/comm/nccl/nccl_communicator.h"
#endif

namespace ptdp {

namespace {

void check_kind(GroupKind kind) {
  PTDP_CHECK_ARG(static_cast<int>(kind) >= 0 && static_cast<int>(kind) < kNumGroupKinds,
                 "kind = " + std::to_string(static_cast<int>(kind)) + " is not a group kind");
}

std::size_t idx(GroupKind kind) { return static_cast<std::size_t>(kind); }

}  // namespace

Layout ProcessGroups::checked_layout(const Runtime& rt, ParallelConfig config) {
  PTDP_CHECK_ARG(config.world == 0 || config.world == rt.world_size(),
                 "world size " + std::to_string(config.world) + " differs from the runtime's " +
                     std::to_string(rt.world_size()) + " ranks");
  config.world = rt.world_size();
  return Layout(config);
}

ProcessGroups::ProcessGroups(std::shared_ptr<Runtime> runtime, ParallelConfig config)
    : runtime_(std::move(runtime)), layout_(checked_layout(*runtime_, config)) {
  Runtime& rt = *runtime_;
  // Every rank must build the same layout: compare (t, p, v, first and last stage layers)
  // across the world first, under the runtime's timeout, so a mismatch or a missing rank is an
  // error rather than a hang in split.
  {
    constexpr int n = 8;
    const int64_t mine[n] = {layout_.tensor(), layout_.pipeline(), layout_.virtual_stages(),
                             layout_.first_stage_layers(), layout_.last_stage_layers(), layout_.context(),
                             layout_.expert_model(), layout_.expert_tensor()};
    int64_t buf[2 * n];
    for (int i = 0; i < n; ++i) {
      buf[2 * i] = mine[i];
      buf[2 * i + 1] = -mine[i];
    }
    Tensor t = Tensor::borrow(buf, {2 * n}, DType::I64);
    rt.world().all_reduce(t, ReduceOp::Max)->wait();
    static const char* names[n] = {"tensor parallel size", "pipeline parallel size", "virtual pipeline size",
                                   "first pipeline stage layers", "last pipeline stage layers",
                                   "context parallel size", "expert model parallel size",
                                   "expert tensor parallel size"};
    for (int i = 0; i < n; ++i) {
      PTDP_CHECK_ARG(buf[2 * i] == -buf[2 * i + 1],
                     std::string("ranks disagree on the ") + names[i] + ": from " +
                         std::to_string(-buf[2 * i + 1]) + " to " + std::to_string(buf[2 * i]) +
                         " (this rank: " + std::to_string(mine[i]) + ")");
    }
  }
  const int me = rt.world_rank();
  for (int k = 0; k < kNumGroupKinds; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    members_[idx(kind)] = layout_.members(kind, me);
    if (kind == GroupKind::World) continue;  // the runtime's own world communicator
    if (resolved(kind) != kind) continue;    // c = 1: the data group's communicators serve
    const auto groups = layout_.all_groups(kind);
    const auto& mine = members_[idx(kind)];
    int color = -1, key = 0;
    if (!mine.empty()) {
      color = static_cast<int>(std::find(groups.begin(), groups.end(), mine) - groups.begin());
      key = static_cast<int>(std::find(mine.begin(), mine.end(), me) - mine.begin());
    }
    comms_[idx(kind)] = rt.split(color, key, std::string(group_kind_name(kind)) + " group " +
                                                 format_ranks(mine), mine);
  }
#ifdef PTDP_HAVE_NCCL
  // Creating an NCCL communicator is collective, so groups of several ranks get theirs now,
  // while every member is here; a group of one (a world of one, or t = 1, ...) gets its own
  // when a GPU tensor first goes through it (device_comm), since no peer has to take part.
  if (rt.nccl_enabled()) {
    for (int k = 0; k < kNumGroupKinds; ++k) {
      const auto kind = static_cast<GroupKind>(k);
      if (size(kind) > 1 && resolved(kind) == kind)
        device_comms_[idx(kind)] = make_nccl_communicator(comm(kind), rt.gpu(), rt.settings());
    }
  }
#endif
}

GroupKind ProcessGroups::resolved(GroupKind kind) const {
  // Groups whose members are those of another kind share its communicators (no extra split,
  // no extra NCCL communicator for a dense model).
  const bool experts_fold_on_tensor = layout_.expert_model() == 1 && layout_.expert_tensor() == layout_.tensor();
  switch (kind) {
    case GroupKind::DataContext: return layout_.context() == 1 ? GroupKind::Data : kind;
    case GroupKind::ExpertTensor: return layout_.expert_tensor() == layout_.tensor() ? GroupKind::Tensor : kind;
    case GroupKind::ExpertTensorAndModel: return experts_fold_on_tensor ? GroupKind::Tensor : kind;
    case GroupKind::ExpertData: return experts_fold_on_tensor ? resolved(GroupKind::DataContext) : kind;
    case GroupKind::TensorContext: return layout_.context() == 1 ? GroupKind::Tensor : kind;
    default: return kind;
  }
}

Communicator* ProcessGroups::device_comm(GroupKind kind_in) const {
  const GroupKind kind = resolved(kind_in);
  auto& dev = device_comms_[idx(kind)];
#ifdef PTDP_HAVE_NCCL
  if (!dev && runtime_->nccl_enabled() && size(kind) == 1) {
    dev = make_nccl_communicator(comm(kind), runtime_->gpu(), runtime_->settings());
  }
#endif
  return dev.get();
}

Communicator& ProcessGroups::comm_for(GroupKind kind, Device device) const {
  Communicator& host = comm(kind);
  if (device.type == DeviceType::CPU) return host;
  Communicator* dev = device_comm(kind);
  if (dev == nullptr) {
    throw_error(ErrorCode::Unsupported,
                std::string("no GPU communicator for the ") + group_kind_name(kind) + " group on " +
                    device.str() + " (NCCL is not built in, this rank has no GPU of its own, or the "
                    "runtime was created with use_nccl = 0)");
  }
  PTDP_CHECK_ARG(device.index == runtime_->gpu(),
                 "tensor on " + device.str() + ", but this rank's GPU is cuda:" + std::to_string(runtime_->gpu()));
  return *dev;
}

Communicator& ProcessGroups::comm_for_tensors(GroupKind kind, Device device) const {
  Communicator& host = comm(kind);
  // A world of one moves nothing: its self communicator copies device memory where a
  // collective needs it, with neither NCCL's set-up nor its launches.
  if (device.type == DeviceType::CPU || device.index != runtime_->gpu() || !runtime_->uses_mpi()) return host;
  Communicator* dev = device_comm(kind);
  return dev != nullptr ? *dev : host;
}

bool ProcessGroups::is_member(GroupKind kind) const {
  check_kind(kind);
  return !members_[idx(kind)].empty();
}

int ProcessGroups::rank(GroupKind kind) const {
  if (!is_member(kind)) return -1;
  const auto& m = members_[idx(kind)];
  return static_cast<int>(std::find(m.begin(), m.end(), runtime_->world_rank()) - m.begin());
}

int ProcessGroups::size(GroupKind kind) const {
  check_kind(kind);
  return static_cast<int>(members_[idx(kind)].size());
}

const std::vector<int>& ProcessGroups::members(GroupKind kind) const {
  check_kind(kind);
  return members_[idx(kind)];
}

Communicator& ProcessGroups::comm(GroupKind kind) const {
  if (!is_member(kind)) {
    throw_error(ErrorCode::InvalidState,
                std::string("world rank ") + std::to_string(runtime_->world_rank()) +
                    " belongs to no " + group_kind_name(kind) +
                    " group (only the first and last pipeline stages hold the embedding)");
  }
  if (kind == GroupKind::World) return runtime_->world();
  return *comms_[idx(resolved(kind))];
}

}  // namespace ptdp
