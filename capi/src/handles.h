// The objects behind the C API's opaque handles. Each carries a magic number so calls can
// reject handles that were destroyed or never were of that type (best effort: freed memory
// may be reused), and counts what still depends on it so destroying it early is refused.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "capi/src/api_guard.h"
#include "capi/src/convert.h"
#include "core/comm/runtime.h"
#include "core/model/gpt.h"
#include "core/model/gpt_pipeline.h"
#include "core/optim/optimizer.h"
#include "core/pipeline/schedule.h"
#include "core/args/train_args.h"
#include "core/parallel/groups.h"
#include "core/tensor/tensor.h"

struct ptdp_tensor_impl {
  static constexpr uint64_t kLive = 0x7074647074656e31ull;  // "ptdpten1"
  static constexpr const char* kType = "ptdp_tensor";
  uint64_t magic = kLive;
  ptdp::Tensor tensor;
};

struct ptdp_runtime_impl {
  static constexpr uint64_t kLive = 0x7074647072756e31ull;  // "ptdprun1"
  static constexpr const char* kType = "ptdp_runtime";
  uint64_t magic = kLive;
  std::shared_ptr<ptdp::Runtime> runtime;
  std::atomic<int> dependents{0};  // live ptdp_groups and ptdp_trainer
};

struct ptdp_groups_impl {
  static constexpr uint64_t kLive = 0x7074647067727031ull;  // "ptdpgrp1"
  static constexpr const char* kType = "ptdp_groups";
  uint64_t magic = kLive;
  ptdp_runtime_impl* owner = nullptr;
  std::unique_ptr<ptdp::ProcessGroups> groups;
  std::atomic<int> dependents{0};  // live ptdp_work, ptdp_model, ptdp_layer
};

struct ptdp_model_impl {
  static constexpr uint64_t kLive = 0x707464706d646c31ull;  // "ptdpmdl1"
  static constexpr const char* kType = "ptdp_model";
  uint64_t magic = kLive;
  ptdp_groups_impl* owner = nullptr;
  std::unique_ptr<ptdp::GptPipeline> model;  // this rank's chunks (the whole model when p = 1)
  std::atomic<int> dependents{0};             // live ptdp_optimizer
};

struct ptdp_optimizer_impl {
  static constexpr uint64_t kLive = 0x707464706f707431ull;  // "ptdpopt1"
  static constexpr const char* kType = "ptdp_optimizer";
  uint64_t magic = kLive;
  ptdp_groups_impl* groups = nullptr;  // counts this optimizer as a dependent
  ptdp_model_impl* model = nullptr;    // the model it updates, or NULL for registered tensors
  std::unique_ptr<ptdp::ParamTable> tensors;  // the flat buffers of registered tensors: fp32 masters, and
                                              // the bf16/f16 model weights the handles view for 16-bit params
  std::unique_ptr<ptdp::Optimizer> opt;
};

struct ptdp_train_config_impl {
  static constexpr uint64_t kLive = 0x7074647074636631ull;  // "ptdptcf1"
  static constexpr const char* kType = "ptdp_train_config";
  uint64_t magic = kLive;
  ptdp::TrainArgs args;  // the strings handed out point into it
};

struct ptdp_schedule_impl {
  static constexpr uint64_t kLive = 0x7074647073636831ull;  // "ptdpsch1"
  static constexpr const char* kType = "ptdp_schedule";
  uint64_t magic = kLive;
  ptdp::Schedule schedule;
};

struct ptdp_layer_impl;  // capi/src/layer_api.cpp

struct ptdp_work_impl {
  static constexpr uint64_t kLive = 0x7074647077726b31ull;  // "ptdpwrk1"
  static constexpr const char* kType = "ptdp_work";
  uint64_t magic = kLive;
  ptdp_groups_impl* owner = nullptr;
  ptdp::WorkPtr work;
};

namespace ptdp::capi {

constexpr uint64_t kDeadMagic = 0x6465616468646c31ull;  // "deadhdl1"

/// The object behind a handle; throws InvalidArgument naming `name` for NULL or a dead handle.
template <typename Impl>
Impl& live(Impl* handle, const char* name) {
  require_non_null(handle, name);
  PTDP_CHECK_ARG(handle->magic == Impl::kLive,
                 std::string(name) + " is not a live " + Impl::kType + " (already destroyed?)");
  return *handle;
}

/// The tensor-parallel group of `groups` for CPU tensors.
inline TensorParallel tensor_parallel(const ptdp_groups_impl& g) {
  TensorParallel tp;
  tp.comm = &g.groups->comm(GroupKind::Tensor);
  tp.rank = g.groups->rank(GroupKind::Tensor);
  tp.size = g.groups->size(GroupKind::Tensor);
  return tp;
}

/// The token and label arrays of a batch and its micro-batch size, as every model call takes them.
inline void require_batch(const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size) {
  require_non_null(tokens, "tokens");
  require_non_null(labels, "labels");
  PTDP_CHECK_ARG(micro_batch_size > 0, "micro_batch_size = " + std::to_string(micro_batch_size) + " is not > 0");
}

/// A new tensor handle owning a reference to `t`.
inline ptdp_tensor wrap_tensor(Tensor t) {
  auto* h = new ptdp_tensor_impl;
  h->tensor = std::move(t);
  return h;
}

/// Marks a handle dead and frees it.
template <typename Impl>
void release(Impl* handle) {
  handle->magic = kDeadMagic;
  delete handle;
}

}  // namespace ptdp::capi
