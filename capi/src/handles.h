// The objects behind the C API's opaque handles. Each registers itself in its type's registry
// of live handles (handle_registry.h) so calls reject handles that were destroyed, never
// created or are of another type without reading their memory, and counts what still depends
// on it so destroying it early is refused.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "capi/src/api_guard.h"
#include "capi/src/convert.h"
#include "capi/src/handle_registry.h"
#include "core/comm/runtime.h"
#include "core/model/gpt.h"
#include "core/model/gpt_pipeline.h"
#include "core/optim/optimizer.h"
#include "core/pipeline/schedule.h"
#include "core/args/train_args.h"
#include "core/parallel/groups.h"
#include "core/tensor/tensor.h"
#include "core/train/iteration_metrics.h"

struct ptdp_tensor_impl {
  static constexpr const char* kType = "ptdp_tensor";
  ptdp::capi::Registration<ptdp_tensor_impl> registration{this};  // live while it exists
  ptdp::Tensor tensor;
};

struct ptdp_runtime_impl {
  static constexpr const char* kType = "ptdp_runtime";
  ptdp::capi::Registration<ptdp_runtime_impl> registration{this};  // live while it exists
  std::shared_ptr<ptdp::Runtime> runtime;
  std::atomic<int> dependents{0};  // live ptdp_groups and ptdp_trainer
};

struct ptdp_groups_impl {
  static constexpr const char* kType = "ptdp_groups";
  ptdp::capi::Registration<ptdp_groups_impl> registration{this};  // live while it exists
  ptdp_runtime_impl* owner = nullptr;
  std::unique_ptr<ptdp::ProcessGroups> groups;
  std::atomic<int> dependents{0};  // live ptdp_work, ptdp_model, ptdp_layer
};

struct ptdp_model_impl {
  static constexpr const char* kType = "ptdp_model";
  ptdp::capi::Registration<ptdp_model_impl> registration{this};  // live while it exists
  ptdp_groups_impl* owner = nullptr;
  std::unique_ptr<ptdp::GptPipeline> model;  // this rank's chunks (the whole model when p = 1)
  std::atomic<int> dependents{0};             // live ptdp_optimizer
  ptdp::MoeMetrics last_moe;                  // of the last ptdp_train_iteration (ptdp_model_moe_metrics)
  std::vector<float> last_mtp_losses;         // of the last ptdp_train_iteration (ptdp_model_mtp_losses)
  double last_moe_exchange_seconds = 0;       // its IterationOutcome::moe_exchange_seconds
};

struct ptdp_optimizer_impl {
  static constexpr const char* kType = "ptdp_optimizer";
  ptdp::capi::Registration<ptdp_optimizer_impl> registration{this};  // live while it exists
  ptdp_groups_impl* groups = nullptr;  // counts this optimizer as a dependent
  ptdp_model_impl* model = nullptr;    // the model it updates, or NULL for registered tensors
  std::unique_ptr<ptdp::ParamTable> tensors;  // the flat buffers of registered tensors: fp32 masters, and
                                              // the bf16/f16 model weights the handles view for 16-bit params
  std::unique_ptr<ptdp::Optimizer> opt;
};

struct ptdp_train_config_impl {
  static constexpr const char* kType = "ptdp_train_config";
  ptdp::capi::Registration<ptdp_train_config_impl> registration{this};  // live while it exists
  ptdp::TrainArgs args;  // the strings handed out point into it
};

struct ptdp_schedule_impl {
  static constexpr const char* kType = "ptdp_schedule";
  ptdp::capi::Registration<ptdp_schedule_impl> registration{this};  // live while it exists
  ptdp::Schedule schedule;
};

struct ptdp_layer_impl;  // capi/src/layer_api.cpp

struct ptdp_work_impl {
  static constexpr const char* kType = "ptdp_work";
  ptdp::capi::Registration<ptdp_work_impl> registration{this};  // live while it exists
  ptdp_groups_impl* owner = nullptr;
  ptdp::WorkPtr work;
};

namespace ptdp::capi {

/// The object behind a handle; throws InvalidArgument naming `name` for NULL or for a handle
/// that is not registered as a live `Impl` (destroyed, never created, or another type). The
/// registry is consulted before the handle's memory is touched.
template <typename Impl>
Impl& live(Impl* handle, const char* name) {
  require_non_null(handle, name);
  PTDP_CHECK_ARG(is_live(handle),
                 std::string(name) + " is not a live " + Impl::kType + " (destroyed, or never created)");
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

/// Unregisters a handle (later calls with it are refused) and frees it.
template <typename Impl>
void release(Impl* handle) {
  HandleRegistry<Impl>::instance().remove(handle);
  delete handle;
}

}  // namespace ptdp::capi
