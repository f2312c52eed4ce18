// What every C entry point that runs a schedule shares: reading ptdp_pipeline_options into the
// executor's options, and writing the merged trace afterwards when one was asked for.
#pragma once

#include <string>

#include "capi/src/handles.h"
#include "core/pipeline/executor.h"

namespace ptdp::capi {

class PipelineRun {
 public:
  explicit PipelineRun(const ptdp_pipeline_options* user) {
    ptdp_pipeline_options defaults;
    ptdp_pipeline_options_init(&defaults);
    const ptdp_pipeline_options o =
        read_options(user, defaults, "options", "ptdp_pipeline_options_init");
    PTDP_CHECK_ARG(o.scatter_gather == 0 || o.scatter_gather == 1,
                   "options->scatter_gather = " + std::to_string(o.scatter_gather) + " is not 0 or 1");
    executor_.scatter_gather = o.scatter_gather == 1;
    if (o.trace_path) {
      trace_path_ = o.trace_path;
      executor_.trace = &trace_;
    }
  }
  const ExecutorOptions& executor() const { return executor_; }
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
};

}  // namespace ptdp::capi
