// The conversions between the C API's structs and the core's types, in one place: every entry
// point that takes or returns a model, optimizer, runtime or layout description uses these.
#pragma once

#include <cstdint>

#include "core/comm/runtime.h"
#include "core/model/gpt_config.h"
#include "core/optim/optimizer.h"
#include "core/parallel/layout.h"
#include "core/plan/cluster.h"
#include "core/plan/cost_model.h"
#include "ptdp/ptdp.h"

namespace ptdp::capi {

/// A model config from the C options (NULL: the defaults), validating the enum fields.
GptConfig gpt_config(const ptdp_gpt_options* options);
/// The C options of a model config, the whole struct written (struct_size set): the getters
/// whose callers need not set struct_size.
void gpt_options(const GptConfig& config, ptdp_gpt_options* options);
/// The C options of a model config into a caller's struct of options->struct_size bytes: at
/// most that many written, struct_size set to what was; refuses a size below the first
/// published one, and a config that needs fields beyond it (named). `device` fills the device
/// field (a GptConfig does not know it).
void gpt_options_sized(const GptConfig& config, ptdp_gpt_options* options, ptdp_device device = PTDP_DEVICE_CPU);

/// The runtime options of the C struct (NULL: the defaults), checking its flags; *use_mpi (may
/// be NULL) receives its use_mpi.
RuntimeOptions runtime_options(const ptdp_runtime_options* options, bool* use_mpi);
/// t, p and v of the C layout (NULL: the defaults); world 0 (the runtime's).
ParallelConfig parallel_config(const ptdp_parallel_options* options);
/// The optimizer config of the C options (NULL: the defaults), every field checked and named.
OptimizerConfig optimizer_config(const ptdp_optimizer_options* options);
/// The C options of an optimizer config (struct_size set).
void optimizer_options(const OptimizerConfig& config, ptdp_optimizer_options* options);

/// Clusters and plan requests of the planner, both ways (NULL: the defaults, DGX A100 for a
/// cluster); every field checked and named.
void cluster_to_c(const plan::Cluster& cluster, ptdp_cluster* out);
plan::Cluster cluster_from_c(const ptdp_cluster* cluster);
void plan_options_defaults(ptdp_plan_options* options);
void plan_options_to_c(const plan::PlanRequest& request, ptdp_plan_options* out);
plan::PlanRequest plan_request(const ptdp_plan_options* options);

/// Fills `out` (may be NULL) with an optimizer step's figures.
void iteration_result(const OptimizerStepResult& step, int64_t skipped_total, float loss, ptdp_iteration_result* out,
                      double seconds = 0, double comm_wait_seconds = 0);

}  // namespace ptdp::capi
