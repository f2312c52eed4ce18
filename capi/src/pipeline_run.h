// What every C entry point that runs a batch shares: reading ptdp_pipeline_options into the
// executor's options and the batch's document layout, and writing the merged trace afterwards
// when one was asked for.
#pragma once

#include <string>

#include "capi/src/batch_masks.h"
#include "capi/src/handles.h"
#include "core/pipeline/executor.h"

namespace ptdp::capi {

/// `user` (NULL: the defaults) read through read_options, its scatter_gather checked.
inline ptdp_pipeline_options pipeline_options(const ptdp_pipeline_options* user) {
  ptdp_pipeline_options defaults;
  ptdp_pipeline_options_init(&defaults);
  const ptdp_pipeline_options o = read_options(user, defaults, "options", "ptdp_pipeline_options_init");
  PTDP_CHECK_ARG(o.scatter_gather == 0 || o.scatter_gather == 1,
                 "options->scatter_gather = " + std::to_string(o.scatter_gather) + " is not 0 or 1");
  return o;
}

/// The options of a call that runs a traced schedule (ptdp_model_pipeline_forward_backward,
/// ptdp_train_iteration, ptdp_pipeline_run).
class PipelineRun {
 public:
  explicit PipelineRun(const ptdp_pipeline_options* user) {
    const ptdp_pipeline_options o = pipeline_options(user);
    executor_.scatter_gather = o.scatter_gather == 1;
    if (o.trace_path) {
      trace_path_ = o.trace_path;
      executor_.trace = &trace_;
    }
    has_masks_ = o.masks != nullptr;
    layout_ = document_layout(o.masks);
  }
  const ExecutorOptions& executor() const { return executor_; }
  /// The positions and documents of options->masks (none by default).
  const DocumentLayout& layout() const { return layout_; }
  bool has_masks() const { return has_masks_; }
  /// Writes the merged trace of every rank of `groups`' world (collective) when one was asked for.
  void finish(const ptdp_groups_impl& groups) const {
    if (trace_path_.empty()) return;
    Runtime& rt = groups.groups->runtime();
    trace_.write_merged(rt.world(), rt.world_rank(), trace_path_);
  }

 private:
  TraceRecorder trace_;
  std::string trace_path_;
  ExecutorOptions executor_;
  DocumentLayout layout_;
  bool has_masks_ = false;
};

/// The layout of options->masks for a call that writes no trace (the whole-model calls and
/// ptdp_model_evaluate, named `function`): a trace_path is refused, not ignored, and
/// scatter_gather, checked, has nothing to act on.
inline DocumentLayout untraced_layout(const ptdp_pipeline_options* user, const char* function) {
  const ptdp_pipeline_options o = pipeline_options(user);
  PTDP_CHECK_ARG(o.trace_path == nullptr, std::string("options->trace_path is set, but ") + function +
                                              " writes no trace (ptdp_model_pipeline_forward_backward and "
                                              "ptdp_train_iteration do)");
  return document_layout(o.masks);
}

}  // namespace ptdp::capi
