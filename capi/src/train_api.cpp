// Training through the C API: one iteration of a model, the shared training loop (a trainer
// handle, and ptdp-train whole), the paper's FLOPs and the devices' peaks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "capi/src/batch_masks.h"
#include "capi/src/convert.h"
#include "capi/src/handles.h"
#include "capi/src/pipeline_run.h"
#include "core/train/device_peak.h"
#include "core/train/train_main.h"
#include "core/train/trainer.h"
#include "core/train/training_loop.h"

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

ptdp_iteration_report to_c(const ptdp::IterationMetrics& r) {
  ptdp_iteration_report c{};
  c.struct_size = sizeof c;
  c.iteration = r.iteration;
  c.train_iters = r.train_iters;
  c.consumed_samples = r.consumed_samples;
  c.global_batch_size = r.global_batch_size;
  c.lm_loss = r.lm_loss;
  c.loss_scale = r.loss_scale;
  c.learning_rate = r.learning_rate;
  c.grad_norm = r.grad_norm;
  c.skipped = r.skipped ? 1 : 0;
  c.validated = r.validated ? 1 : 0;
  c.skipped_iterations = r.skipped_iterations;
  c.elapsed_seconds = r.elapsed_s;
  c.tokens_per_second = r.tokens_per_second;
  c.model_flops = r.model_flops;
  c.executed_flops = r.executed_flops;
  c.tflops_per_device = r.tflops_per_device;
  c.mfu = r.mfu;
  c.peak_flops = r.peak_flops;
  c.mem_high_water_mib = r.mem_high_water_mib;
  c.validation_loss = r.validation_loss;
  c.saved = r.saved ? 1 : 0;
  return c;
}

// The MoE figures into the caller's struct (no more than its struct_size) and loads.
void moe_metrics_to_c(const ptdp::MoeMetrics& moe, double exchange_seconds, ptdp_moe_metrics* metrics,
                      ptdp_moe_layer_load* loads, int64_t capacity) {
  ptdp::capi::require_out_struct(metrics, "metrics");
  PTDP_CHECK_ARG(capacity >= 0, "capacity = " + std::to_string(capacity) + " is negative");
  PTDP_CHECK_ARG(loads != nullptr || capacity == 0, "loads is NULL with capacity = " + std::to_string(capacity));
  ptdp_moe_metrics c{};
  c.struct_size = sizeof c;
  c.moe_layers = moe.moe_layers;
  c.load_balancing_loss = moe.has_load_balancing_loss ? moe.load_balancing_loss : NAN;
  c.z_loss = moe.has_z_loss ? moe.z_loss : NAN;
  c.exchange_seconds = exchange_seconds;
  const std::size_t n = std::min(metrics->struct_size, sizeof c);
  std::memcpy(static_cast<void*>(metrics), &c, n);
  metrics->struct_size = n;
  const int64_t count = std::min<int64_t>(capacity, static_cast<int64_t>(moe.loads.size()));
  for (int64_t i = 0; i < count; ++i) {
    const ptdp::MoeLayerLoad& l = moe.loads[static_cast<std::size_t>(i)];
    loads[i] = {l.layer, l.min_tokens, l.max_tokens};
  }
}

// Each MTP depth's loss into the caller's array (no more than capacity) and their number.
void mtp_losses_to_c(const std::vector<float>& mtp, float* losses, int32_t capacity, int32_t* count) {
  ptdp::capi::require_non_null(count, "count");
  PTDP_CHECK_ARG(capacity >= 0, "capacity = " + std::to_string(capacity) + " is negative");
  PTDP_CHECK_ARG(losses != nullptr || capacity == 0, "losses is NULL with capacity = " + std::to_string(capacity));
  const std::size_t n = std::min(static_cast<std::size_t>(capacity), mtp.size());
  std::copy(mtp.begin(), mtp.begin() + static_cast<std::ptrdiff_t>(n), losses);
  *count = static_cast<int32_t>(mtp.size());
}

// ptdp_train_iteration's body, and its deprecated form's (whose masks come inside the options).
void train_iteration(ptdp_model model, ptdp_optimizer optimizer, ptdp_schedule schedule, const int32_t* tokens,
                     const int32_t* labels, int32_t micro_batch_size, int64_t iteration,
                     const ptdp_pipeline_options* options, ptdp_iteration_result* result) {
  ptdp_model_impl& m = live(model, "model");
  ptdp_optimizer_impl& o = live(optimizer, "optimizer");
  const ptdp::Schedule& s = live(schedule, "schedule").schedule;
  PTDP_CHECK_ARG(o.model == &m, "optimizer was not created for this model");
  ptdp::capi::require_batch(tokens, labels, micro_batch_size);
  PTDP_CHECK_ARG(iteration >= 0, "iteration = " + std::to_string(iteration) + " is negative");
  const ptdp::capi::PipelineRun run(options);
  const ptdp::IterationOutcome r = ptdp::train_iteration(*m.model, *o.opt, *m.owner->groups, s, tokens, labels,
                                                        micro_batch_size, iteration, run.executor(), run.layout());
  run.finish(*m.owner);
  m.last_moe = r.moe;
  m.last_mtp_losses = r.mtp_losses;
  m.last_moe_exchange_seconds = r.moe_exchange_seconds;
  ptdp::capi::iteration_result(r.step, o.opt->skipped_iterations(), r.loss, result, r.seconds, r.comm_wait_seconds);
}

}  // namespace

struct ptdp_trainer_impl {
  static constexpr const char* kType = "ptdp_trainer";
  ptdp::capi::Registration<ptdp_trainer_impl> registration{this};  // live while it exists
  ptdp_runtime_impl* user_runtime = nullptr;  // counts this trainer as a dependent
  std::unique_ptr<ptdp::TrainingLoop> loop;
  std::atomic<bool> running{false};
};

extern "C" {

PTDP_API ptdp_status ptdp_train_iteration(ptdp_model model, ptdp_optimizer optimizer, ptdp_schedule schedule,
                                          const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
                                          int64_t iteration, const ptdp_pipeline_options* options,
                                          ptdp_iteration_result* result) {
  return guard(__func__, [&] {
    train_iteration(model, optimizer, schedule, tokens, labels, micro_batch_size, iteration, options, result);
  });
}

PTDP_API ptdp_status ptdp_train_iteration_masked(ptdp_model model, ptdp_optimizer optimizer, ptdp_schedule schedule,
                                                 const int32_t* tokens, const int32_t* labels,
                                                 const ptdp_batch_masks* masks, int32_t micro_batch_size,
                                                 int64_t iteration, const ptdp_pipeline_options* options,
                                                 ptdp_iteration_result* result) {
  return guard(__func__, [&] {
    const ptdp_pipeline_options o = ptdp::capi::masked_options(options, masks);
    train_iteration(model, optimizer, schedule, tokens, labels, micro_batch_size, iteration, &o, result);
  });
}

PTDP_API ptdp_status ptdp_trainer_options_init(ptdp_trainer_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->print_log = 1;
  });
}

PTDP_API ptdp_status ptdp_trainer_create(ptdp_train_config config, const ptdp_trainer_options* options,
                                         ptdp_trainer* out) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(out, "out");
    ptdp_trainer_options defaults;
    ptdp_trainer_options_init(&defaults);
    const ptdp_trainer_options o =
        ptdp::capi::read_options(options, defaults, "options", "ptdp_trainer_options_init");
    PTDP_CHECK_ARG(o.print_log == 0 || o.print_log == 1,
                   "options->print_log = " + std::to_string(o.print_log) + " is not 0 or 1");
    auto h = std::make_unique<ptdp_trainer_impl>();
    std::shared_ptr<ptdp::Runtime> rt;
    if (o.runtime != nullptr) {
      h->user_runtime = &live(o.runtime, "options->runtime");
      rt = h->user_runtime->runtime;
    } else {
      ptdp::RuntimeOptions ro;
      ro.timeout_s = c.args.comm_timeout.value_or(0);  // unset: PTDP_COMM_TIMEOUT_S, else 300
      rt = ptdp::Runtime::create(ro);
    }
    ptdp::TrainingHooks hooks;
    if (o.on_iteration != nullptr) {
      hooks.after_iteration = [cb = o.on_iteration, user = o.user_data](const ptdp::IterationMetrics& r) {
        const ptdp_iteration_report report = to_c(r);
        return cb(&report, user) != 0;
      };
    }
    h->loop = std::make_unique<ptdp::TrainingLoop>(c.args, rt, std::move(hooks), o.print_log == 1 ? stdout : nullptr);
    if (h->user_runtime) ++h->user_runtime->dependents;
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_trainer_run(ptdp_trainer trainer) {
  return guard(__func__, [&] {
    ptdp_trainer_impl& t = live(trainer, "trainer");
    PTDP_CHECK_ARG(!t.running.exchange(true), "trainer is already running (ptdp_trainer_run from two threads?)");
    struct Done {
      std::atomic<bool>& flag;
      ~Done() { flag.store(false); }
    } done{t.running};
    t.loop->run();
  });
}

PTDP_API ptdp_status ptdp_trainer_request_stop(ptdp_trainer trainer) {
  return guard(__func__, [&] { live(trainer, "trainer").loop->request_stop(); });
}

PTDP_API ptdp_status ptdp_trainer_last_report(ptdp_trainer trainer, ptdp_iteration_report* report) {
  return guard(__func__, [&] {
    const ptdp_trainer_impl& t = live(trainer, "trainer");
    ptdp::capi::require_out_struct(report, "report");
    const ptdp_iteration_report r = to_c(t.loop->last_metrics());
    const std::size_t n = std::min(report->struct_size, sizeof r);
    std::memcpy(static_cast<void*>(report), &r, n);
    report->struct_size = n;
  });
}

PTDP_API ptdp_status ptdp_trainer_moe_metrics(ptdp_trainer trainer, ptdp_moe_metrics* metrics,
                                              ptdp_moe_layer_load* loads, int64_t capacity) {
  return guard(__func__, [&] {
    const ptdp_trainer_impl& t = live(trainer, "trainer");
    moe_metrics_to_c(t.loop->last_moe(), t.loop->last_moe_exchange_seconds(), metrics, loads, capacity);
  });
}

PTDP_API ptdp_status ptdp_model_moe_metrics(ptdp_model model, ptdp_moe_metrics* metrics, ptdp_moe_layer_load* loads,
                                            int64_t capacity) {
  return guard(__func__, [&] {
    const ptdp_model_impl& m = live(model, "model");
    moe_metrics_to_c(m.last_moe, m.last_moe_exchange_seconds, metrics, loads, capacity);
  });
}

PTDP_API ptdp_status ptdp_model_mtp_losses(ptdp_model model, float* losses, int32_t capacity, int32_t* count) {
  return guard(__func__, [&] { mtp_losses_to_c(live(model, "model").last_mtp_losses, losses, capacity, count); });
}

PTDP_API ptdp_status ptdp_trainer_mtp_losses(ptdp_trainer trainer, float* losses, int32_t capacity, int32_t* count) {
  return guard(__func__,
               [&] { mtp_losses_to_c(live(trainer, "trainer").loop->last_mtp_losses(), losses, capacity, count); });
}

PTDP_API ptdp_status ptdp_trainer_destroy(ptdp_trainer trainer) {
  return guard(__func__, [&] {
    if (trainer == nullptr) return;
    ptdp_trainer_impl& t = live(trainer, "trainer");
    if (t.running.load()) {
      ptdp::throw_error(ptdp::ErrorCode::InvalidState, "trainer is running; stop it and wait for ptdp_trainer_run first");
    }
    t.loop.reset();
    if (t.user_runtime) --t.user_runtime->dependents;
    ptdp::capi::release(trainer);
  });
}

PTDP_API ptdp_status ptdp_train_main(int32_t argc, const char* const* argv, int32_t* exit_code) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(argc >= 1, "argc = " + std::to_string(argc) + " is not >= 1 (argv[0] is the program name)");
    require_non_null(argv, "argv");
    require_non_null(exit_code, "exit_code");
    std::vector<std::string> args;
    for (int32_t i = 0; i < argc; ++i) {
      std::string name = "argv[";
      name += std::to_string(i);
      name += ']';
      require_non_null(argv[i], name.c_str());
      if (i > 0) args.emplace_back(argv[i]);
    }
    const std::string program = std::filesystem::path(argv[0]).filename().string();
    *exit_code = ptdp::train_main(program.empty() ? "ptdp-train" : program, args);
  });
}

PTDP_API ptdp_status ptdp_gpt_flops(const ptdp_gpt_options* options, int64_t global_batch_size, double* model_flops,
                                    double* executed_flops) {
  return guard(__func__, [&] {
    const ptdp::GptConfig cfg = ptdp::capi::gpt_config(options);
    cfg.validate(1);  // the sizes the FLOPs multiply, checked
    PTDP_CHECK_ARG(global_batch_size > 0, "global_batch_size = " + std::to_string(global_batch_size) + " is not > 0");
    if (model_flops) *model_flops = cfg.paper_flops(global_batch_size);
    if (executed_flops) *executed_flops = cfg.paper_flops(global_batch_size, cfg.recompute == ptdp::Recompute::Full);
  });
}

PTDP_API ptdp_status ptdp_device_peak_flops(ptdp_device device, int32_t device_index, ptdp_dtype precision,
                                            double* flops) {
  return guard(__func__, [&] {
    require_non_null(flops, "flops");
    PTDP_CHECK_ARG(device == PTDP_DEVICE_CPU || device == PTDP_DEVICE_CUDA,
                   "device = " + std::to_string(static_cast<int>(device)) + " is not a ptdp_device");
    PTDP_CHECK_ARG(precision == PTDP_DTYPE_F32 || precision == PTDP_DTYPE_BF16 || precision == PTDP_DTYPE_F16,
                   "precision = " + std::to_string(static_cast<int>(precision)) + " is not f32, bf16 or f16");
    ptdp::Device d;
    if (device == PTDP_DEVICE_CPU) {
      PTDP_CHECK_ARG(device_index == 0, "device_index = " + std::to_string(device_index) + " is not 0 for the CPU");
    } else {
#ifndef PTDP_HAVE_CUDA
      ptdp::throw_error(ptdp::ErrorCode::Unsupported, "device is PTDP_DEVICE_CUDA but this build of ptdp has no CUDA");
#endif
      d = ptdp::Device{ptdp::DeviceType::CUDA, device_index};
    }
    *flops = ptdp::device_peak(d, static_cast<ptdp::DType>(precision)).flops;
  });
}

}  // extern "C"
