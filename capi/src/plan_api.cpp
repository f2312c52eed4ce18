// The planner through the C API: clusters, plan options, ptdp-plan's flags, plans and their
// layouts, reports and drawings (core/plan/). The struct conversions are capi/src/convert.cpp's.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/api_guard.h"
#include "capi/src/handles.h"
#include "core/plan/plan_args.h"
#include "core/plan/planner.h"
#include "io/json_text.h"

struct ptdp_plan_impl {
  static constexpr const char* kType = "ptdp_plan";
  ptdp::capi::Registration<ptdp_plan_impl> registration{this};  // live while it exists
  ptdp::plan::PlanResult result;
};

static_assert(PTDP_RECOMPUTE_NONE == static_cast<int>(ptdp::Recompute::None));
static_assert(PTDP_RECOMPUTE_FULL == static_cast<int>(ptdp::Recompute::Full));
static_assert(PTDP_RECOMPUTE_SELECTIVE == static_cast<int>(ptdp::Recompute::Selective));
static_assert(PTDP_SCHEDULE_GPIPE == static_cast<int>(ptdp::ScheduleKind::GPipe));
static_assert(PTDP_SCHEDULE_ZB_H1 == static_cast<int>(ptdp::ScheduleKind::ZeroBubbleH1));
static_assert(PTDP_OPTIMIZER_ADAM == static_cast<int>(ptdp::plan::PlanOptimizer::Adam) &&
              PTDP_OPTIMIZER_SGD == static_cast<int>(ptdp::plan::PlanOptimizer::Sgd) &&
              PTDP_OPTIMIZER_MUON == static_cast<int>(ptdp::plan::PlanOptimizer::Muon));

namespace {

using ptdp::str_cat;
using ptdp::capi::copy_text;
using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;
namespace plan = ptdp::plan;
using ptdp::capi::cluster_from_c;
using ptdp::capi::cluster_to_c;
using ptdp::capi::plan_options_defaults;
using ptdp::capi::plan_options_to_c;
using ptdp::capi::plan_request;

// The argv entry holding the last --schedule-svg value (so the pointer lives as long as argv).
const char* schedule_svg_in(int32_t argc, const char* const* argv) {
  const char* found = nullptr;
  const std::string flag = "--schedule-svg";
  for (int32_t i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--schedule-svg=", flag.size() + 1) == 0) {
      found = a + flag.size() + 1;
    } else if (flag == a && i + 1 < argc) {
      found = argv[++i];
    }
  }
  return found;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_cluster_init(ptdp_cluster* cluster) {
  return guard(__func__, [&] {
    require_non_null(cluster, "cluster");
    cluster_to_c(plan::cluster_preset("dgx-a100"), cluster);
  });
}

PTDP_API ptdp_status ptdp_cluster_preset(const char* name, ptdp_cluster* cluster) {
  return guard(__func__, [&] {
    require_non_null(name, "name");
    require_non_null(cluster, "cluster");
    cluster_to_c(plan::cluster_preset(name), cluster);
  });
}

PTDP_API const char* ptdp_cluster_preset_name(int32_t index) {
  static const std::vector<std::string> names = plan::cluster_preset_names();
  if (index < 0 || index >= static_cast<int32_t>(names.size())) return nullptr;
  return names[static_cast<std::size_t>(index)].c_str();
}

PTDP_API ptdp_status ptdp_cluster_load(const char* path, ptdp_cluster* cluster) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(path, "path");
    require_non_null(cluster, "cluster");
    cluster_to_c(plan::load_cluster(path), cluster);
  });
}

PTDP_API ptdp_status ptdp_plan_options_init(ptdp_plan_options* options) {
  return guard(__func__, [&] { plan_options_defaults(&ptdp::capi::reset_options(options, "options")); });
}

PTDP_API ptdp_status ptdp_plan_parse_args(int32_t argc, const char* const* argv, ptdp_plan_options* options,
                                          ptdp_cluster* cluster, ptdp_plan_cli* cli) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(argc >= 1, str_cat("argc = ", argc, " is not >= 1 (argv[0] is the program name)"));
    require_non_null(argv, "argv");
    require_non_null(options, "options");
    require_non_null(cluster, "cluster");
    require_non_null(cli, "cli");
    std::vector<std::string> args;
    for (int32_t i = 1; i < argc; ++i) {
      PTDP_CHECK_ARG(argv[i] != nullptr, str_cat("argv[", i, "] is NULL"));
      args.emplace_back(argv[i]);
    }
    const plan::PlanArgs a = plan::parse_plan_args(args);
    ptdp_plan_cli c{};
    c.struct_size = sizeof(ptdp_plan_cli);
    c.help = a.help ? 1 : 0;
    c.list_clusters = a.list_clusters ? 1 : 0;
    c.json = a.json ? 1 : 0;
    c.schedule_svg = a.schedule_svg.empty() ? nullptr : schedule_svg_in(argc, argv);
    ptdp_plan_options o;
    ptdp_cluster k;
    plan_options_to_c(a.request, &o);
    cluster_to_c(a.cluster, &k);
    *options = o;
    *cluster = k;
    *cli = c;
  });
}

PTDP_API ptdp_status ptdp_plan_help(const char* program, char* buffer, size_t capacity, size_t* length) {
  return guard(__func__, [&] {
    require_non_null(length, "length");
    copy_text(plan::plan_args_help(program ? program : "ptdp-plan"), buffer, capacity, length);
  });
}

PTDP_API ptdp_status ptdp_plan_create(const ptdp_plan_options* options, const ptdp_cluster* cluster, ptdp_plan* out) {
  return guard(__func__, [&] {
    require_non_null(out, "out");
    const plan::PlanRequest request = plan_request(options);
    const plan::Cluster c = cluster_from_c(cluster);
    auto h = std::make_unique<ptdp_plan_impl>();
    h->result = plan::make_plan(request, c);
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_plan_destroy(ptdp_plan plan) {
  return guard(__func__, [&] {
    if (plan == nullptr) return;
    live(plan, "plan");
    ptdp::capi::release(plan);
  });
}

PTDP_API ptdp_status ptdp_plan_num_layouts(ptdp_plan plan, int32_t* count) {
  return guard(__func__, [&] {
    const ptdp_plan_impl& p = live(plan, "plan");
    require_non_null(count, "count");
    *count = static_cast<int32_t>(p.result.layouts.size());
  });
}

PTDP_API ptdp_status ptdp_plan_get_layout(ptdp_plan plan, int32_t index, ptdp_plan_layout* layout) {
  return guard(__func__, [&] {
    const ptdp_plan_impl& p = live(plan, "plan");
    const std::size_t size = ptdp::capi::require_out_struct(layout, "layout");
    const auto n = static_cast<int32_t>(p.result.layouts.size());
    PTDP_CHECK_ARG(index >= 0 && index < n, str_cat("index = ", index, " is outside the plan's ", n, " layouts"));
    const plan::Estimate& e = p.result.layouts[static_cast<std::size_t>(index)];
    ptdp_plan_layout o{};
    o.struct_size = sizeof(ptdp_plan_layout);
    o.t = e.layout.t;
    o.p = e.layout.p;
    o.d = e.layout.d;
    o.v = e.layout.v;
    o.b = e.layout.b;
    o.m = e.layout.m;
    o.schedule = static_cast<ptdp_schedule_kind>(static_cast<int>(e.layout.schedule));
    o.recompute = static_cast<ptdp_recompute>(static_cast<int>(e.layout.recompute));
    o.distributed_optimizer = e.layout.distributed_optimizer ? 1 : 0;
    o.simulated = e.simulated ? 1 : 0;
    o.parameters_formula = e.params_formula;
    o.parameters_exact = e.params_exact;
    o.parameters_per_gpu = e.params_per_gpu;
    o.memory_weights = e.memory.weights;
    o.memory_gradients = e.memory.gradients;
    o.memory_optimizer = e.memory.optimizer;
    o.memory_activations = e.memory.activations;
    o.memory_total = e.memory.total();
    o.memory_slots = e.memory.slots;
    o.memory_pipeline_rank = e.memory_stage;
    o.seconds_compute = e.compute;
    o.seconds_tensor_comm = e.tensor_comm;
    o.seconds_pipeline_comm = e.pipeline_comm;
    o.seconds_bubble = e.bubble;
    o.seconds_data_parallel = e.data_parallel;
    o.seconds_embedding_sync = e.embedding_sync;
    o.seconds_optimizer = e.optimizer;
    o.seconds_iteration = e.iteration;
    o.bubble_fraction = e.bubble_fraction;
    o.tflops_per_gpu = e.tflops_per_gpu;
    o.mfu = e.mfu;
    o.decoder_first_pipeline_num_layers = e.layout.first;
    o.decoder_last_pipeline_num_layers = e.layout.last;
    o.sequence_parallel = e.layout.sequence_parallel ? 1 : 0;
    o.context_parallel_size = e.layout.c;
    o.expert_model_parallel_size = e.layout.e;
    o.expert_tensor_parallel_size = e.layout.expert_tensor();
    o.parameters_active = e.params_active > 0 ? e.params_active : e.params_exact;
    o.expert_parameters_per_gpu = e.expert_params_per_gpu;
    o.seconds_moe_exchange = e.expert_comm;
    o.expert_crosses_nodes = e.expert_crosses_nodes ? 1 : 0;
    o.seconds_newton_schulz = e.newton_schulz;
    std::memcpy(static_cast<void*>(layout), &o, std::min(size, sizeof(o)));
    layout->struct_size = std::min(size, sizeof(o));
  });
}

PTDP_API ptdp_status ptdp_plan_report(ptdp_plan plan, char* buffer, size_t capacity, size_t* length) {
  return guard(__func__, [&] {
    const ptdp_plan_impl& p = live(plan, "plan");
    require_non_null(length, "length");
    copy_text(plan::plan_report(p.result), buffer, capacity, length);
  });
}

PTDP_API ptdp_status ptdp_plan_to_json(ptdp_plan plan, char* buffer, size_t capacity, size_t* length) {
  return guard(__func__, [&] {
    const ptdp_plan_impl& p = live(plan, "plan");
    require_non_null(length, "length");
    copy_text(ptdp::json_text(plan::plan_to_json(p.result), 2), buffer, capacity, length);
  });
}

PTDP_API ptdp_status ptdp_plan_write_schedule_svg(ptdp_plan plan, int32_t index, const char* path) {
  return guard(__func__, [&] {
    const ptdp_plan_impl& p = live(plan, "plan");
    ptdp::capi::require_path(path, "path");
    plan::write_plan_schedule_svg(p.result, index, path);
  });
}

PTDP_API ptdp_status ptdp_plan_parameters(const ptdp_plan_options* options, int32_t t, double* formula,
                                          int64_t* exact) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(t > 0, str_cat("t = ", t, " is not > 0"));
    require_non_null(options, "options");
    ptdp_plan_options defaults{};
    defaults.struct_size = sizeof(defaults);
    plan_options_defaults(&defaults);
    ptdp_plan_options o =
        ptdp::capi::read_options(options, defaults, "options", "ptdp_plan_options_init");
    if (o.global_batch_size <= 0) o.global_batch_size = 1;  // only the model is read here
    const plan::PlanRequest r = plan_request(&o);
    r.model.validate(t);
    if (formula != nullptr) *formula = plan::paper_parameters(r.model);
    if (exact != nullptr) *exact = r.model.parameter_count(t);
  });
}

PTDP_API ptdp_status ptdp_plan_kv_cache_bytes(const ptdp_plan_options* options, int32_t t, double* bytes_per_token) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(t > 0, str_cat("t = ", t, " is not > 0"));
    require_non_null(options, "options");
    require_non_null(bytes_per_token, "bytes_per_token");
    ptdp_plan_options defaults{};
    defaults.struct_size = sizeof(defaults);
    plan_options_defaults(&defaults);
    ptdp_plan_options o =
        ptdp::capi::read_options(options, defaults, "options", "ptdp_plan_options_init");
    if (o.global_batch_size <= 0) o.global_batch_size = 1;  // only the model is read here
    const plan::PlanRequest r = plan_request(&o);
    ptdp::GptConfig run = r.model;
    run.sequence_parallel = t > 1;  // MoE at t > 1 runs with it (Megatron's rule); the cache is the same
    run.validate(t);
    *bytes_per_token = plan::kv_cache_bytes_per_token(r.model, r.precision, t);
  });
}

}  // extern "C"
