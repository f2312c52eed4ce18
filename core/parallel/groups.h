// ProcessGroups: the communicators of one PTD-P layout on a runtime. Creating them is
// collective over the runtime's world; every rank must pass the same layout, which is checked
// (with the runtime's timeout) before any communicator is split off.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "core/comm/runtime.h"
#include "core/parallel/layout.h"

namespace ptdp {

class ProcessGroups {
 public:
  /// `config.world` may be 0 (take the runtime's world size); otherwise it must match it.
  ProcessGroups(std::shared_ptr<Runtime> runtime, ParallelConfig config);

  const Layout& layout() const { return layout_; }
  Runtime& runtime() const { return *runtime_; }

  bool is_member(GroupKind kind) const;
  /// Rank in the group, or -1 when this rank belongs to no group of that kind (embedding).
  int rank(GroupKind kind) const;
  /// Size of this rank's group, or 0 when it belongs to none.
  int size(GroupKind kind) const;
  /// World ranks of this rank's group in group-rank order (empty when it belongs to none).
  const std::vector<int>& members(GroupKind kind) const;
  /// The group's communicator; throws Error(InvalidState) when this rank is not a member.
  Communicator& comm(GroupKind kind) const;
  /// The communicator for tensors on `device`: the MPI (or self) one for CPU tensors, the
  /// NCCL one for GPU tensors. Throws Error(Unsupported) when there is none for the device.
  Communicator& comm_for(GroupKind kind, Device device) const;
  /// The communicator that moves tensors on `device` best: NCCL for GPU tensors where this rank
  /// has a GPU of its own and NCCL is built in; otherwise the host communicator, which stages
  /// device tensors through host memory (several ranks sharing one GPU, no NCCL), or, in a
  /// world of one without MPI, copies them on the device.
  Communicator& comm_for_tensors(GroupKind kind, Device device) const;

 private:
  static Layout checked_layout(const Runtime& rt, ParallelConfig config);
  /// The kind whose communicators serve `kind`: the data group's for the data+context group
  /// when c = 1 (the same ranks; no second MPI or NCCL communicator), else `kind` itself.
  GroupKind resolved(GroupKind kind) const;
  /// The group's NCCL communicator, created on first use for a group of one; nullptr when
  /// there is none (NCCL off or not built in, or not a member).
  Communicator* device_comm(GroupKind kind) const;

  std::shared_ptr<Runtime> runtime_;
  Layout layout_;
  std::array<std::vector<int>, kNumGroupKinds> members_;
  std::array<std::unique_ptr<Communicator>, kNumGroupKinds> comms_;
  // NCCL, when enabled; mutable for the groups of one that get theirs on first use.
  mutable std::array<std::unique_ptr<Communicator>, kNumGroupKinds> device_comms_;
};

}  // namespace ptdp
