// Bad-input rows: optimizers, ptdp-train's configuration, training, checkpoints, Hugging Face
// files, memory statistics, the planner and plots.
#include "bad_input_table.h"

using bad::handle_rows;
using bad::null_row;
using bad::options_rows;
using bad::Row;

PTDP_BAD_INPUTS(optimizer) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_optimizer_options_init", "options", [] { return ptdp_optimizer_options_init(nullptr); }));
  const char* oc = "ptdp_optimizer_create";
  handle_rows(r, oc, "model", "ptdp_model", f.dead_model, [&](ptdp_model m) { return ptdp_optimizer_create(m, nullptr, &o.optimizer); });
  r.push_back(null_row(oc, "out", [&] { return ptdp_optimizer_create(f.model, nullptr, nullptr); }));
  options_rows(r, oc, "options", ptdp_optimizer_options_init,
               [&](const ptdp_optimizer_options* x) { return ptdp_optimizer_create(f.model, x, &o.optimizer); });
  auto field = [&](const std::string& what, std::function<void(ptdp_optimizer_options&)> edit, std::string mention) {
    r.push_back(bad::field_row<ptdp_optimizer_options>(
        oc, what, ptdp_optimizer_options_init, std::move(edit),
        [&](const ptdp_optimizer_options* x) { return ptdp_optimizer_create(f.model, x, &o.optimizer); }, {std::move(mention)}));
  };
  field("optimizer kind out of range", [](ptdp_optimizer_options& x) { x.optimizer = static_cast<ptdp_optimizer_kind>(9); },
        "options->optimizer = 9");
  field("decay style out of range", [](ptdp_optimizer_options& x) { x.lr_decay_style = static_cast<ptdp_lr_decay_style>(9); },
        "options->lr_decay_style = 9");
  field("NaN lr", [](ptdp_optimizer_options& x) { x.lr = bad::kNaN; }, "options->lr");
  field("Inf lr", [](ptdp_optimizer_options& x) { x.lr = bad::kInf; }, "options->lr");
  field("negative lr", [](ptdp_optimizer_options& x) { x.lr = -1.0; }, "options->lr");
  field("NaN min_lr", [](ptdp_optimizer_options& x) { x.min_lr = bad::kNaN; }, "options->min_lr");
  field("negative lr_warmup_iters", [](ptdp_optimizer_options& x) { x.lr_warmup_iters = -1; }, "options->lr_warmup_iters");
  field("negative lr_decay_iters", [](ptdp_optimizer_options& x) { x.lr_decay_iters = -1; }, "options->lr_decay_iters");
  field("NaN adam_beta1", [](ptdp_optimizer_options& x) { x.adam_beta1 = static_cast<float>(bad::kNaN); }, "options->adam_beta1");
  field("NaN adam_eps", [](ptdp_optimizer_options& x) { x.adam_eps = static_cast<float>(bad::kNaN); }, "options->adam_eps");
  field("NaN weight_decay", [](ptdp_optimizer_options& x) { x.weight_decay = static_cast<float>(bad::kNaN); },
        "options->weight_decay");
  field("NaN clip_grad", [](ptdp_optimizer_options& x) { x.clip_grad = static_cast<float>(bad::kNaN); }, "options->clip_grad");
  field("NaN initial_loss_scale", [](ptdp_optimizer_options& x) { x.initial_loss_scale = static_cast<float>(bad::kNaN); },
        "options->initial_loss_scale");
  field("negative ddp_bucket_size", [](ptdp_optimizer_options& x) { x.ddp_bucket_size = -1; }, "options->ddp_bucket_size");
  field("use_distributed_optimizer 2", [](ptdp_optimizer_options& x) { x.use_distributed_optimizer = 2; },
        "options->use_distributed_optimizer = 2");
  // Muon's fields, checked whatever the optimizer kind (as every field is).
  using O = ptdp_optimizer_options;
  field("muon_momentum 1", [](O& x) { x.muon_momentum = 1.0f; }, "options->muon_momentum = 1 must be in [0, 1)");
  field("NaN muon_momentum", [](O& x) { x.muon_momentum = static_cast<float>(bad::kNaN); }, "options->muon_momentum");
  field("muon_nesterov 2", [](O& x) { x.muon_nesterov = 2; }, "options->muon_nesterov = 2 is not 0 or 1");
  field("muon_num_ns_steps 0", [](O& x) { x.muon_num_ns_steps = 0; },
        "options->muon_num_ns_steps = 0 must be in [1, 100]");
  field("muon_num_ns_steps 101", [](O& x) { x.muon_num_ns_steps = 101; },
        "options->muon_num_ns_steps = 101 must be in [1, 100]");
  field("muon_coefficient_type out of range",
        [](O& x) { x.muon_coefficient_type = static_cast<ptdp_ns_coefficients>(4); },
        "options->muon_coefficient_type = 4 is not a ptdp_ns_coefficients");
  field("muon_fp32_matmul_prec out of range",
        [](O& x) { x.muon_fp32_matmul_prec = static_cast<ptdp_ns_precision>(-1); },
        "options->muon_fp32_matmul_prec = -1 is not a ptdp_ns_precision");
  field("muon_scale_mode out of range", [](O& x) { x.muon_scale_mode = static_cast<ptdp_muon_scale_mode>(3); },
        "options->muon_scale_mode = 3 is not a ptdp_muon_scale_mode");
  field("muon_extra_scale_factor 0", [](O& x) { x.muon_extra_scale_factor = 0.0f; },
        "options->muon_extra_scale_factor = 0 must be > 0");
  field("Inf muon_extra_scale_factor", [](O& x) { x.muon_extra_scale_factor = static_cast<float>(bad::kInf); },
        "options->muon_extra_scale_factor");
  field("muon_split_qkv -1", [](O& x) { x.muon_split_qkv = -1; }, "options->muon_split_qkv = -1 is not 0 or 1");
  field("muon_tp_mode out of range", [](O& x) { x.muon_tp_mode = static_cast<ptdp_muon_tp_mode>(3); },
        "options->muon_tp_mode = 3 is not a ptdp_muon_tp_mode");
  field("qk_clip 3", [](O& x) { x.qk_clip = 3; }, "options->qk_clip = 3 is not 0 or 1");
  field("qk_clip_threshold 0", [](O& x) { x.qk_clip_threshold = 0.0f; }, "options->qk_clip_threshold = 0 must be > 0");
  field("NaN qk_clip_threshold", [](O& x) { x.qk_clip_threshold = static_cast<float>(bad::kNaN); },
        "options->qk_clip_threshold");
  field("qk_clip_alpha 1.5", [](O& x) { x.qk_clip_alpha = 1.5f; }, "options->qk_clip_alpha = 1.5 must be in [0, 1]");
  field("qk_clip_alpha -0.5", [](O& x) { x.qk_clip_alpha = -0.5f; }, "options->qk_clip_alpha = -0.5 must be in [0, 1]");
  const char* ct = "ptdp_optimizer_create_for_tensors";
  static const int32_t zero_flags[1] = {0};
  handle_rows(r, ct, "groups", "ptdp_groups", f.dead_groups, [&](ptdp_groups g) {
    return ptdp_optimizer_create_for_tensors(g, nullptr, &f.tensor, &f.tensor, zero_flags, 1, &o.optimizer);
  });
  r.push_back(null_row(ct, "params", [&] {
    return ptdp_optimizer_create_for_tensors(f.groups, nullptr, nullptr, &f.tensor, zero_flags, 1, &o.optimizer);
  }));
  r.push_back(null_row(ct, "grads", [&] {
    return ptdp_optimizer_create_for_tensors(f.groups, nullptr, &f.tensor, nullptr, zero_flags, 1, &o.optimizer);
  }));
  r.push_back(null_row(ct, "out", [&] {
    return ptdp_optimizer_create_for_tensors(f.groups, nullptr, &f.tensor, &f.tensor, zero_flags, 1, nullptr);
  }));
  r.push_back({ct, "negative count", [&] {
                 return ptdp_optimizer_create_for_tensors(f.groups, nullptr, &f.tensor, &f.tensor, zero_flags, -1, &o.optimizer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"count = -1"}});
  r.push_back({ct, "a destroyed parameter", [&] {
                 return ptdp_optimizer_create_for_tensors(f.groups, nullptr, &f.dead_tensor, &f.tensor, zero_flags, 1,
                                                          &o.optimizer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"params[0] is not a live ptdp_tensor"}});
  r.push_back({ct, "unknown flags", [&] {
                 static const int32_t flags[1] = {64};
                 return ptdp_optimizer_create_for_tensors(f.groups, nullptr, &f.tensor, &f.tensor, flags, 1, &o.optimizer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"flags[0] = 64"}});
  options_rows(r, ct, "options", ptdp_optimizer_options_init, [&](const ptdp_optimizer_options* x) {
    return ptdp_optimizer_create_for_tensors(f.groups, x, &f.tensor, &f.tensor, zero_flags, 1, &o.optimizer);
  });
  r.push_back({"ptdp_optimizer_destroy", "destroyed", [&] { return ptdp_optimizer_destroy(f.dead_optimizer); },
               PTDP_ERR_INVALID_ARGUMENT, {"optimizer is not a live ptdp_optimizer"}});
  handle_rows(r, "ptdp_optimizer_reduce_gradients", "optimizer", "ptdp_optimizer", f.dead_optimizer,
              [](ptdp_optimizer x) { return ptdp_optimizer_reduce_gradients(x); });
  handle_rows(r, "ptdp_optimizer_step", "optimizer", "ptdp_optimizer", f.dead_optimizer,
              [&](ptdp_optimizer x) { return ptdp_optimizer_step(x, 1, &o.result); });
  r.push_back({"ptdp_optimizer_step", "negative iteration", [&] { return ptdp_optimizer_step(f.optimizer, -1, &o.result); },
               PTDP_ERR_INVALID_ARGUMENT, {"iteration = -1"}});
  handle_rows(r, "ptdp_optimizer_state_bytes", "optimizer", "ptdp_optimizer", f.dead_optimizer,
              [&](ptdp_optimizer x) { return ptdp_optimizer_state_bytes(x, &o.sz[0]); });
  r.push_back(null_row("ptdp_optimizer_state_bytes", "bytes", [&] { return ptdp_optimizer_state_bytes(f.optimizer, nullptr); }));
  return r;
}

PTDP_BAD_INPUTS(train_config) {
  std::vector<Row> r;
  const char* tp = "ptdp_train_config_parse";
  static const char* const argv1[] = {"ptdp-train"};
  r.push_back({tp, "argc 0", [&] { return ptdp_train_config_parse(0, argv1, &o.config); }, PTDP_ERR_INVALID_ARGUMENT, {"argc = 0"}});
  r.push_back(null_row(tp, "argv", [&] { return ptdp_train_config_parse(1, nullptr, &o.config); }));
  r.push_back(null_row(tp, "out", [&] { return ptdp_train_config_parse(1, argv1, nullptr); }));
  r.push_back({tp, "a NULL argument", [&] {
                 static const char* const a[] = {"ptdp-train", nullptr};
                 return ptdp_train_config_parse(2, a, &o.config);
               }, PTDP_ERR_INVALID_ARGUMENT, {"argv[1] is NULL"}});
  r.push_back({tp, "unknown flag", [&] {
                 static const char* const a[] = {"ptdp-train", "--no-such-flag"};
                 return ptdp_train_config_parse(2, a, &o.config);
               }, PTDP_ERR_INVALID_ARGUMENT, {"--no-such-flag"}});
  r.push_back({tp, "negative layers", [&] {
                 static const char* const a[] = {"ptdp-train", "--num-layers", "-1"};
                 return ptdp_train_config_parse(3, a, &o.config);
               }, PTDP_ERR_INVALID_ARGUMENT, {"--num-layers"}});
  r.push_back({tp, "NaN lr", [&] {
                 static const char* const a[] = {"ptdp-train", "--lr", "nan"};
                 return ptdp_train_config_parse(3, a, &o.config);
               }, PTDP_ERR_INVALID_ARGUMENT, {"--lr"}});
  r.push_back({tp, "hidden size whose ffn overflows", [&] {
                 static const char* const a[] = {"ptdp-train", "--hidden-size", "1000000000", "--num-attention-heads", "1"};
                 return ptdp_train_config_parse(5, a, &o.config);
               }, PTDP_ERR_INVALID_ARGUMENT, {"--hidden-size", "1000000000"}});
  r.push_back({"ptdp_train_config_destroy", "destroyed", [&] { return ptdp_train_config_destroy(f.dead_config); },
               PTDP_ERR_INVALID_ARGUMENT, {"config is not a live ptdp_train_config"}});
  r.push_back(null_row("ptdp_train_config_help", "length", [&] { return ptdp_train_config_help("p", o.text, 64, nullptr); }));
  r.push_back({"ptdp_train_config_help", "capacity too small", [&] {
                 size_t length = 0;  // receives the text's length by design (not a sentinel slot)
                 const ptdp_status st = ptdp_train_config_help("p", o.text, 64, &length);
                 return length > 64 ? st : PTDP_ERR_INTERNAL;
               },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = 64"}});
  handle_rows(r, "ptdp_train_config_to_json", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_to_json(c, o.text, 64, &o.sz[0]); });
  r.push_back(null_row("ptdp_train_config_to_json", "length", [&] { return ptdp_train_config_to_json(f.config, o.text, 64, nullptr); }));
  r.push_back({"ptdp_train_config_to_json", "buffer NULL with a capacity",
               [&] { return ptdp_train_config_to_json(f.config, nullptr, 64, &o.sz[0]); }, PTDP_ERR_INVALID_ARGUMENT,
               {"buffer is NULL"}});
  handle_rows(r, "ptdp_train_config_gpt_options", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_gpt_options(c, &o.gpt); });
  r.push_back(null_row("ptdp_train_config_gpt_options", "options", [&] { return ptdp_train_config_gpt_options(f.config, nullptr); }));
  handle_rows(r, "ptdp_train_config_optimizer_options", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_optimizer_options(c, &o.optimizer_options); });
  r.push_back(null_row("ptdp_train_config_optimizer_options", "options",
                       [&] { return ptdp_train_config_optimizer_options(f.config, nullptr); }));
  handle_rows(r, "ptdp_train_config_parallel_options", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_parallel_options(c, &o.parallel); });
  r.push_back(null_row("ptdp_train_config_parallel_options", "options",
                       [&] { return ptdp_train_config_parallel_options(f.config, nullptr); }));
  handle_rows(r, "ptdp_train_config_runtime_options", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_runtime_options(c, &o.runtime_options); });
  r.push_back(null_row("ptdp_train_config_runtime_options", "options",
                       [&] { return ptdp_train_config_runtime_options(f.config, nullptr); }));
  handle_rows(r, "ptdp_train_config_settings", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_settings(c, &o.settings); });
  r.push_back(null_row("ptdp_train_config_settings", "settings", [&] { return ptdp_train_config_settings(f.config, nullptr); }));
  handle_rows(r, "ptdp_train_config_data_options", "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_train_config_data_options(c, &o.data_options); });
  r.push_back(null_row("ptdp_train_config_data_options", "options",
                       [&] { return ptdp_train_config_data_options(f.config, nullptr); }));
  return r;
}

namespace {

// The deprecated ptdp_train_iteration_masked keeps its rows; it is called only through this.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
ptdp_status train_iteration_masked(ptdp_model m, ptdp_optimizer op, ptdp_schedule s, const int32_t* t, const int32_t* l,
                                   const ptdp_batch_masks* mk, int32_t b, int64_t it, const ptdp_pipeline_options* po,
                                   ptdp_iteration_result* res) {
  return ptdp_train_iteration_masked(m, op, s, t, l, mk, b, it, po, res);
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

}  // namespace

PTDP_BAD_INPUTS(training) {
  std::vector<Row> r;
  const int32_t* tk = f.tokens.data();
  const int32_t* lb = f.labels.data();
  for (const char* fn : {"ptdp_train_iteration", "ptdp_train_iteration_masked"}) {
    const bool masked = std::string(fn).find("masked") != std::string::npos;
    auto call = [masked](ptdp_model m, ptdp_optimizer op, ptdp_schedule s, const int32_t* t, const int32_t* l, int32_t b,
                         int64_t it, ptdp_iteration_result* res) {
      return masked ? train_iteration_masked(m, op, s, t, l, nullptr, b, it, nullptr, res)
                    : ptdp_train_iteration(m, op, s, t, l, b, it, nullptr, res);
    };
    handle_rows(r, fn, "model", "ptdp_model", f.dead_model,
                [=, &f, &o](ptdp_model m) { return call(m, f.optimizer, f.schedule, tk, lb, 1, 1, &o.result); });
    handle_rows(r, fn, "optimizer", "ptdp_optimizer", f.dead_optimizer,
                [=, &f, &o](ptdp_optimizer x) { return call(f.model, x, f.schedule, tk, lb, 1, 1, &o.result); });
    handle_rows(r, fn, "schedule", "ptdp_schedule", f.dead_schedule,
                [=, &f, &o](ptdp_schedule s) { return call(f.model, f.optimizer, s, tk, lb, 1, 1, &o.result); });
    r.push_back(null_row(fn, "tokens", [=, &f, &o] { return call(f.model, f.optimizer, f.schedule, nullptr, lb, 1, 1, &o.result); }));
    r.push_back(null_row(fn, "labels", [=, &f, &o] { return call(f.model, f.optimizer, f.schedule, tk, nullptr, 1, 1, &o.result); }));
    r.push_back({fn, "micro_batch_size 0", [=, &f, &o] { return call(f.model, f.optimizer, f.schedule, tk, lb, 0, 1, &o.result); },
                 PTDP_ERR_INVALID_ARGUMENT, {"micro_batch_size = 0"}});
    r.push_back({fn, "negative iteration", [=, &f, &o] { return call(f.model, f.optimizer, f.schedule, tk, lb, 1, -1, &o.result); },
                 PTDP_ERR_INVALID_ARGUMENT, {"iteration = -1"}});
  }
  options_rows(r, "ptdp_train_iteration", "options", ptdp_pipeline_options_init, [&](const ptdp_pipeline_options* x) {
    return ptdp_train_iteration(f.model, f.optimizer, f.schedule, tk, lb, 1, 1, x, &o.result);
  });
  options_rows(r, "ptdp_train_iteration", "options->masks", ptdp_batch_masks_init, [&](const ptdp_batch_masks* m) {
    ptdp_pipeline_options po;
    ptdp_pipeline_options_init(&po);
    po.masks = m;
    return ptdp_train_iteration(f.model, f.optimizer, f.schedule, tk, lb, 1, 1, &po, &o.result);
  });
  options_rows(r, "ptdp_train_iteration_masked", "masks", ptdp_batch_masks_init, [&](const ptdp_batch_masks* m) {
    return train_iteration_masked(f.model, f.optimizer, f.schedule, tk, lb, m, 1, 1, nullptr, &o.result);
  });
  r.push_back({"ptdp_train_iteration_masked", "masks given twice", [&] {
                 ptdp_batch_masks mk;
                 ptdp_batch_masks_init(&mk);
                 ptdp_pipeline_options po;
                 ptdp_pipeline_options_init(&po);
                 po.masks = &mk;
                 return train_iteration_masked(f.model, f.optimizer, f.schedule, tk, lb, &mk, 1, 1, &po, &o.result);
               }, PTDP_ERR_INVALID_ARGUMENT, {"masks and options->masks are both set"}});

  r.push_back(null_row("ptdp_trainer_options_init", "options", [] { return ptdp_trainer_options_init(nullptr); }));
  const char* tc = "ptdp_trainer_create";
  handle_rows(r, tc, "config", "ptdp_train_config", f.dead_config,
              [&](ptdp_train_config c) { return ptdp_trainer_create(c, nullptr, &o.trainer); });
  r.push_back(null_row(tc, "out", [&] { return ptdp_trainer_create(f.config, nullptr, nullptr); }));
  options_rows(r, tc, "options", ptdp_trainer_options_init,
               [&](const ptdp_trainer_options* x) { return ptdp_trainer_create(f.config, x, &o.trainer); });
  r.push_back(bad::field_row<ptdp_trainer_options>(
      tc, "destroyed runtime", ptdp_trainer_options_init, [&f](ptdp_trainer_options& x) { x.runtime = f.dead_runtime; },
      [&](const ptdp_trainer_options* x) { return ptdp_trainer_create(f.config, x, &o.trainer); },
      {"options->runtime is not a live ptdp_runtime"}));
  r.push_back(bad::field_row<ptdp_trainer_options>(
      tc, "print_log 2", ptdp_trainer_options_init, [](ptdp_trainer_options& x) { x.print_log = 2; },
      [&](const ptdp_trainer_options* x) { return ptdp_trainer_create(f.config, x, &o.trainer); }, {"options->print_log = 2"}));
  handle_rows(r, "ptdp_trainer_run", "trainer", "ptdp_trainer", f.dead_trainer, [](ptdp_trainer t) { return ptdp_trainer_run(t); });
  handle_rows(r, "ptdp_trainer_request_stop", "trainer", "ptdp_trainer", f.dead_trainer,
              [](ptdp_trainer t) { return ptdp_trainer_request_stop(t); });
  handle_rows(r, "ptdp_trainer_last_report", "trainer", "ptdp_trainer", f.dead_trainer,
              [&](ptdp_trainer t) { return ptdp_trainer_last_report(t, &o.report); });
  r.push_back(null_row("ptdp_trainer_last_report", "report", [&] { return ptdp_trainer_last_report(f.trainer, nullptr); }));
  r.push_back({"ptdp_trainer_last_report", "report->struct_size 0", [&] {
                 ptdp_iteration_report x{};
                 return ptdp_trainer_last_report(f.trainer, &x);
               }, PTDP_ERR_INVALID_ARGUMENT, {"report->struct_size = 0"}});
  // The figures' outputs are the rows' own: a refused call must leave them as they were.
  for (const char* fn : {"ptdp_trainer_moe_metrics", "ptdp_model_moe_metrics"}) {
    const bool on_trainer = std::string(fn) == "ptdp_trainer_moe_metrics";
    const auto call = [&f, on_trainer](ptdp_moe_metrics* m, ptdp_moe_layer_load* loads, int64_t capacity) {
      return on_trainer ? ptdp_trainer_moe_metrics(f.trainer, m, loads, capacity)
                        : ptdp_model_moe_metrics(f.model, m, loads, capacity);
    };
    r.push_back(null_row(fn, "metrics", [call] { return call(nullptr, nullptr, 0); }));
    r.push_back({fn, "metrics->struct_size 0", [call] {
                   ptdp_moe_metrics x{};
                   return call(&x, nullptr, 0);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"metrics->struct_size = 0"}});
    r.push_back({fn, "negative capacity", [call] {
                   ptdp_moe_metrics x{sizeof(ptdp_moe_metrics), 0, 0.0, 0.0, 0.0};
                   ptdp_moe_layer_load loads[2] = {};
                   return call(&x, loads, -1);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
    r.push_back({fn, "NULL loads with capacity 2", [call] {
                   ptdp_moe_metrics x{sizeof(ptdp_moe_metrics), 0, 0.0, 0.0, 0.0};
                   return call(&x, nullptr, 2);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"loads is NULL", "capacity = 2"}});
  }
  handle_rows(r, "ptdp_trainer_moe_metrics", "trainer", "ptdp_trainer", f.dead_trainer, [](ptdp_trainer t) {
    ptdp_moe_metrics x{sizeof(ptdp_moe_metrics), 0, 0.0, 0.0, 0.0};
    return ptdp_trainer_moe_metrics(t, &x, nullptr, 0);
  });
  handle_rows(r, "ptdp_model_moe_metrics", "model", "ptdp_model", f.dead_model, [](ptdp_model m) {
    ptdp_moe_metrics x{sizeof(ptdp_moe_metrics), 0, 0.0, 0.0, 0.0};
    return ptdp_model_moe_metrics(m, &x, nullptr, 0);
  });
  // The MTP losses' outputs likewise: count and the array stay as they were on a refusal.
  for (const char* fn : {"ptdp_trainer_mtp_losses", "ptdp_model_mtp_losses"}) {
    const bool on_trainer = std::string(fn) == "ptdp_trainer_mtp_losses";
    const auto call = [&f, on_trainer](float* losses, int32_t capacity, int32_t* count) {
      return on_trainer ? ptdp_trainer_mtp_losses(f.trainer, losses, capacity, count)
                        : ptdp_model_mtp_losses(f.model, losses, capacity, count);
    };
    r.push_back(null_row(fn, "count", [call] { return call(nullptr, 0, nullptr); }));
    r.push_back({fn, "negative capacity", [call] {
                   float losses[2] = {};
                   int32_t count = 0;
                   return call(losses, -1, &count);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
    r.push_back({fn, "NULL losses with capacity 2", [call] {
                   int32_t count = 0;
                   return call(nullptr, 2, &count);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"losses is NULL", "capacity = 2"}});
  }
  handle_rows(r, "ptdp_trainer_mtp_losses", "trainer", "ptdp_trainer", f.dead_trainer, [](ptdp_trainer t) {
    int32_t count = 0;
    return ptdp_trainer_mtp_losses(t, nullptr, 0, &count);
  });
  handle_rows(r, "ptdp_model_mtp_losses", "model", "ptdp_model", f.dead_model, [](ptdp_model m) {
    int32_t count = 0;
    return ptdp_model_mtp_losses(m, nullptr, 0, &count);
  });
  r.push_back({"ptdp_trainer_destroy", "destroyed", [&] { return ptdp_trainer_destroy(f.dead_trainer); },
               PTDP_ERR_INVALID_ARGUMENT, {"trainer is not a live ptdp_trainer"}});

  const char* gf = "ptdp_gpt_flops";
  r.push_back({gf, "global_batch_size 0", [&] { return ptdp_gpt_flops(nullptr, 0, &o.d[0], &o.d[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"global_batch_size = 0"}});
  r.push_back({gf, "negative global_batch_size", [&] { return ptdp_gpt_flops(nullptr, -4, &o.d[0], &o.d[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"global_batch_size = -4"}});
  options_rows(r, gf, "options", ptdp_gpt_options_init,
               [&](const ptdp_gpt_options* x) { return ptdp_gpt_flops(x, 8, &o.d[0], &o.d[1]); });
  r.push_back(bad::field_row<ptdp_gpt_options>(
      gf, "hidden size whose products overflow", ptdp_gpt_options_init,
      [](ptdp_gpt_options& x) {
        x.hidden_size = 2000000000;
        x.num_attention_heads = 1;
      },
      [&](const ptdp_gpt_options* x) { return ptdp_gpt_flops(x, 8, &o.d[0], &o.d[1]); }, {"hidden_size", "2000000000"}));
  const char* pf = "ptdp_device_peak_flops";
  r.push_back(null_row(pf, "flops", [] { return ptdp_device_peak_flops(PTDP_DEVICE_CPU, 0, PTDP_DTYPE_F32, nullptr); }));
  r.push_back({pf, "device out of range", [&] {
                 return ptdp_device_peak_flops(static_cast<ptdp_device>(9), 0, PTDP_DTYPE_F32, &o.d[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"device = 9"}});
  r.push_back({pf, "precision out of range", [&] {
                 return ptdp_device_peak_flops(PTDP_DEVICE_CPU, 0, static_cast<ptdp_dtype>(99), &o.d[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"precision = 99"}});
  r.push_back({pf, "negative device_index", [&] { return ptdp_device_peak_flops(PTDP_DEVICE_CPU, -1, PTDP_DTYPE_F32, &o.d[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"device_index = -1"}});
  return r;
}

PTDP_BAD_INPUTS(checkpoint) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_checkpoint_state_init", "state", [] { return ptdp_checkpoint_state_init(nullptr); }));
  const char* cs = "ptdp_checkpoint_save";
  auto state = [] {
    ptdp_checkpoint_state s;
    ptdp_checkpoint_state_init(&s);
    return s;
  };
  r.push_back(null_row(cs, "directory", [&, state] {
    const ptdp_checkpoint_state s = state();
    return ptdp_checkpoint_save(nullptr, f.model, nullptr, nullptr, &s);
  }));
  r.push_back({cs, "empty directory", [&, state] {
                 const ptdp_checkpoint_state s = state();
                 return ptdp_checkpoint_save("", f.model, nullptr, nullptr, &s);
               }, PTDP_ERR_INVALID_ARGUMENT, {"directory is empty"}});
  handle_rows(r, cs, "model", "ptdp_model", f.dead_model, [&, state](ptdp_model m) {
    const ptdp_checkpoint_state s = state();
    const std::string d = f.dir + "/ckpt";
    return ptdp_checkpoint_save(d.c_str(), m, nullptr, nullptr, &s);
  });
  r.push_back({cs, "destroyed optimizer", [&, state] {
                 const ptdp_checkpoint_state s = state();
                 const std::string d = f.dir + "/ckpt";
                 return ptdp_checkpoint_save(d.c_str(), f.model, f.dead_optimizer, nullptr, &s);
               }, PTDP_ERR_INVALID_ARGUMENT, {"optimizer is not a live ptdp_optimizer"}});
  r.push_back({cs, "destroyed config", [&, state] {
                 const ptdp_checkpoint_state s = state();
                 const std::string d = f.dir + "/ckpt";
                 return ptdp_checkpoint_save(d.c_str(), f.model, nullptr, f.dead_config, &s);
               }, PTDP_ERR_INVALID_ARGUMENT, {"config is not a live ptdp_train_config"}});
  r.push_back(null_row(cs, "state", [&] {
    const std::string d = f.dir + "/ckpt";
    return ptdp_checkpoint_save(d.c_str(), f.model, nullptr, nullptr, nullptr);
  }));
  options_rows(r, cs, "state", ptdp_checkpoint_state_init, [&](const ptdp_checkpoint_state* s) {
    const std::string d = f.dir + "/ckpt";
    return ptdp_checkpoint_save(d.c_str(), f.model, nullptr, nullptr, s);
  });
  for (const char* field : {"iteration", "consumed_train_samples", "consumed_valid_samples"}) {
    const std::string name = field;
    r.push_back({cs, "negative " + name, [&, name, state] {
                   ptdp_checkpoint_state s = state();
                   if (name == "iteration") s.iteration = -1;
                   if (name == "consumed_train_samples") s.consumed_train_samples = -1;
                   if (name == "consumed_valid_samples") s.consumed_valid_samples = -1;
                   const std::string d = f.dir + "/ckpt";
                   return ptdp_checkpoint_save(d.c_str(), f.model, nullptr, nullptr, &s);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"state->" + name}});
  }
  const char* cl = "ptdp_checkpoint_load";
  r.push_back(null_row(cl, "directory", [&] { return ptdp_checkpoint_load(nullptr, f.model, nullptr, &o.state); }));
  r.push_back({cl, "empty directory", [&] { return ptdp_checkpoint_load("", f.model, nullptr, &o.state); },
               PTDP_ERR_INVALID_ARGUMENT, {"directory is empty"}});
  handle_rows(r, cl, "model", "ptdp_model", f.dead_model,
              [&](ptdp_model m) { return ptdp_checkpoint_load(f.dir.c_str(), m, nullptr, &o.state); });
  r.push_back({cl, "missing directory", [&] {
                 const std::string d = f.dir + "/no-ckpt";
                 return ptdp_checkpoint_load(d.c_str(), f.model, nullptr, &o.state);
               }, PTDP_ERR_IO, {"no-ckpt"}});
  r.push_back({cl, "destroyed optimizer", [&] { return ptdp_checkpoint_load(f.dir.c_str(), f.model, f.dead_optimizer, &o.state); },
               PTDP_ERR_INVALID_ARGUMENT, {"optimizer is not a live ptdp_optimizer"}});
  const char* ro = "ptdp_checkpoint_read_options";
  r.push_back(null_row(ro, "directory", [&] { return ptdp_checkpoint_read_options(nullptr, &o.gpt, &o.i64[0]); }));
  r.push_back(null_row(ro, "options", [&] { return ptdp_checkpoint_read_options(f.dir.c_str(), nullptr, &o.i64[0]); }));
  r.push_back({ro, "empty directory", [&] { return ptdp_checkpoint_read_options("", &o.gpt, &o.i64[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"directory is empty"}});
  r.push_back({ro, "missing directory", [&] {
                 const std::string d = f.dir + "/no-ckpt";
                 return ptdp_checkpoint_read_options(d.c_str(), &o.gpt, &o.i64[0]);
               }, PTDP_ERR_IO, {"no-ckpt"}});

  r.push_back(null_row("ptdp_hf_save_options_init", "options", [] { return ptdp_hf_save_options_init(nullptr); }));
  const char* hr = "ptdp_hf_read_options";
  r.push_back(null_row(hr, "directory", [&] { return ptdp_hf_read_options(nullptr, &o.gpt, &o.architecture); }));
  r.push_back(null_row(hr, "options", [&] { return ptdp_hf_read_options(f.dir.c_str(), nullptr, &o.architecture); }));
  r.push_back({hr, "missing directory", [&] {
                 const std::string d = f.dir + "/no-hf";
                 return ptdp_hf_read_options(d.c_str(), &o.gpt, &o.architecture);
               }, PTDP_ERR_IO, {"no-hf"}});
  const char* hl = "ptdp_hf_load";
  r.push_back(null_row(hl, "directory", [&] { return ptdp_hf_load(nullptr, f.model); }));
  handle_rows(r, hl, "model", "ptdp_model", f.dead_model, [&](ptdp_model m) { return ptdp_hf_load(f.dir.c_str(), m); });
  r.push_back({hl, "missing directory", [&] {
                 const std::string d = f.dir + "/no-hf";
                 return ptdp_hf_load(d.c_str(), f.model);
               }, PTDP_ERR_IO, {"no-hf"}});
  const char* hs = "ptdp_hf_save";
  r.push_back(null_row(hs, "directory", [&] { return ptdp_hf_save(nullptr, f.model, nullptr); }));
  r.push_back({hs, "empty directory", [&] { return ptdp_hf_save("", f.model, nullptr); }, PTDP_ERR_INVALID_ARGUMENT,
               {"directory is empty"}});
  handle_rows(r, hs, "model", "ptdp_model", f.dead_model, [&](ptdp_model m) {
    const std::string d = f.dir + "/hf";
    return ptdp_hf_save(d.c_str(), m, nullptr);
  });
  options_rows(r, hs, "options", ptdp_hf_save_options_init, [&](const ptdp_hf_save_options* x) {
    const std::string d = f.dir + "/hf";
    return ptdp_hf_save(d.c_str(), f.model, x);
  });
  auto hf_field = [&](const std::string& what, std::function<void(ptdp_hf_save_options&)> edit, std::string mention) {
    r.push_back(bad::field_row<ptdp_hf_save_options>(
        hs, what, ptdp_hf_save_options_init, std::move(edit),
        [&](const ptdp_hf_save_options* x) {
          const std::string d = f.dir + "/hf";
          return ptdp_hf_save(d.c_str(), f.model, x);
        },
        {std::move(mention)}));
  };
  hf_field("dtype out of range", [](ptdp_hf_save_options& x) { x.dtype = static_cast<ptdp_dtype>(99); }, "options->dtype = 99");
  hf_field("architecture out of range",
           [](ptdp_hf_save_options& x) { x.architecture = static_cast<ptdp_hf_architecture>(99); }, "options->architecture = 99");
  hf_field("negative max_shard_size", [](ptdp_hf_save_options& x) { x.max_shard_size = -1; }, "options->max_shard_size = -1");
  return r;
}

PTDP_BAD_INPUTS(plan) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_cluster_init", "cluster", [] { return ptdp_cluster_init(nullptr); }));
  r.push_back(null_row("ptdp_cluster_preset", "name", [&] { return ptdp_cluster_preset(nullptr, &o.cluster); }));
  r.push_back(null_row("ptdp_cluster_preset", "cluster", [] { return ptdp_cluster_preset("a100", nullptr); }));
  r.push_back({"ptdp_cluster_preset", "unknown preset", [&] { return ptdp_cluster_preset("nope", &o.cluster); },
               PTDP_ERR_INVALID_ARGUMENT, {"'nope'"}});
  r.push_back(null_row("ptdp_cluster_load", "path", [&] { return ptdp_cluster_load(nullptr, &o.cluster); }));
  r.push_back(null_row("ptdp_cluster_load", "cluster", [&] { return ptdp_cluster_load(f.dir.c_str(), nullptr); }));
  r.push_back({"ptdp_cluster_load", "missing file", [&] {
                 const std::string p = f.dir + "/no-cluster.json";
                 return ptdp_cluster_load(p.c_str(), &o.cluster);
               }, PTDP_ERR_IO, {"no-cluster.json"}});
  r.push_back(null_row("ptdp_plan_options_init", "options", [] { return ptdp_plan_options_init(nullptr); }));
  const char* pa = "ptdp_plan_parse_args";
  static const char* const argv1[] = {"ptdp-plan"};
  r.push_back({pa, "argc 0", [&] { return ptdp_plan_parse_args(0, argv1, &o.plan_options, &o.cluster, &o.cli); },
               PTDP_ERR_INVALID_ARGUMENT, {"argc = 0"}});
  r.push_back(null_row(pa, "argv", [&] { return ptdp_plan_parse_args(1, nullptr, &o.plan_options, &o.cluster, &o.cli); }));
  r.push_back(null_row(pa, "options", [&] { return ptdp_plan_parse_args(1, argv1, nullptr, &o.cluster, &o.cli); }));
  r.push_back(null_row(pa, "cluster", [&] { return ptdp_plan_parse_args(1, argv1, &o.plan_options, nullptr, &o.cli); }));
  r.push_back({pa, "hidden size whose ffn overflows", [&] {
                 static const char* const a[] = {"ptdp-plan", "--hidden-size", "1000000000", "--num-attention-heads", "1",
                                                 "--global-batch-size", "8"};
                 return ptdp_plan_parse_args(7, a, &o.plan_options, &o.cluster, &o.cli);
               }, PTDP_ERR_INVALID_ARGUMENT, {"--hidden-size", "1000000000"}});
  r.push_back(null_row("ptdp_plan_help", "length", [&] { return ptdp_plan_help("p", o.text, 64, nullptr); }));
  r.push_back({"ptdp_plan_help", "capacity too small", [&] {
                 size_t length = 0;  // receives the text's length by design (not a sentinel slot)
                 const ptdp_status st = ptdp_plan_help("p", o.text, 64, &length);
                 return length > 64 ? st : PTDP_ERR_INTERNAL;
               },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = 64"}});
  const char* pc = "ptdp_plan_create";
  ptdp_cluster cluster;
  ptdp_cluster_init(&cluster);
  r.push_back(null_row(pc, "out", [cluster] { return ptdp_plan_create(nullptr, &cluster, nullptr); }));
  options_rows(r, pc, "options", ptdp_plan_options_init,
               [&, cluster](const ptdp_plan_options* x) { return ptdp_plan_create(x, &cluster, &o.plan); });
  const auto valid_plan = [] {
    ptdp_plan_options x;
    ptdp_plan_options_init(&x);
    x.num_layers = 2;
    x.hidden_size = 64;
    x.num_attention_heads = 4;
    x.seq_length = 32;
    x.max_position_embeddings = 32;
    x.vocab_size = 128;
    x.global_batch_size = 8;
    x.num_gpus = 1;
    return x;
  };
  options_rows(r, pc, "cluster", ptdp_cluster_init, [&, valid_plan](const ptdp_cluster* c) {
    const ptdp_plan_options x = valid_plan();
    return ptdp_plan_create(&x, c, &o.plan);
  });
  auto plan_field = [&, cluster, valid_plan](const std::string& what, std::function<void(ptdp_plan_options&)> edit,
                                             std::vector<std::string> m) {
    r.push_back(bad::field_row<ptdp_plan_options>(
        pc, what, ptdp_plan_options_init,
        [valid_plan, edit = std::move(edit)](ptdp_plan_options& x) {
          x = valid_plan();
          edit(x);
        },
        [&, cluster](const ptdp_plan_options* x) { return ptdp_plan_create(x, &cluster, &o.plan); }, std::move(m)));
  };
  plan_field("negative num_layers", [](ptdp_plan_options& x) { x.num_layers = -1; }, {"num_layers", "-1"});
  plan_field("precision out of range", [](ptdp_plan_options& x) { x.precision = static_cast<ptdp_dtype>(99); },
             {"precision = 99"});
  plan_field("negative global_batch_size", [](ptdp_plan_options& x) { x.global_batch_size = -8; },
             {"options->global_batch_size = -8"});
  plan_field("NaN attention_dropout", [](ptdp_plan_options& x) { x.attention_dropout = static_cast<float>(bad::kNaN); },
             {"attention_dropout"});
  plan_field("optimizer out of range", [](ptdp_plan_options& x) { x.optimizer = static_cast<ptdp_optimizer_kind>(7); },
             {"options->optimizer = 7", "ADAM, SGD or MUON"});
  plan_field("negative muon_num_ns_steps", [](ptdp_plan_options& x) { x.muon_num_ns_steps = -1; },
             {"options->muon_num_ns_steps = -1"});
  plan_field("muon_num_ns_steps above 100", [](ptdp_plan_options& x) { x.muon_num_ns_steps = 101; },
             {"options->muon_num_ns_steps = 101", "[1, 100]"});
  plan_field("muon_no_split_qkv not 0 or 1", [](ptdp_plan_options& x) { x.muon_no_split_qkv = 2; },
             {"muon_no_split_qkv", "2"});
  plan_field("hidden size whose ffn overflows", [](ptdp_plan_options& x) {
    x.hidden_size = 1000000000;
    x.num_attention_heads = 1;
  }, {"hidden_size", "1000000000"});
  r.push_back(bad::field_row<ptdp_cluster>(
      pc, "NaN cluster bandwidth", ptdp_cluster_init, [](ptdp_cluster& c) { c.memory_bandwidth = bad::kNaN; },
      [&, valid_plan](const ptdp_cluster* c) {
        const ptdp_plan_options x = valid_plan();
        return ptdp_plan_create(&x, c, &o.plan);
      },
      {"cluster", "memory_bandwidth", "nan"}));
  r.push_back(bad::field_row<ptdp_cluster>(
      pc, "negative gpus_per_node", ptdp_cluster_init, [](ptdp_cluster& c) { c.gpus_per_node = -1; },
      [&, valid_plan](const ptdp_cluster* c) {
        const ptdp_plan_options x = valid_plan();
        return ptdp_plan_create(&x, c, &o.plan);
      },
      {"cluster", "gpus per node = -1"}));
  r.push_back({"ptdp_plan_destroy", "destroyed", [&] { return ptdp_plan_destroy(f.dead_plan); }, PTDP_ERR_INVALID_ARGUMENT,
               {"plan is not a live ptdp_plan"}});
  handle_rows(r, "ptdp_plan_num_layouts", "plan", "ptdp_plan", f.dead_plan,
              [&](ptdp_plan p) { return ptdp_plan_num_layouts(p, &o.i32[0]); });
  r.push_back(null_row("ptdp_plan_num_layouts", "count", [&] { return ptdp_plan_num_layouts(f.plan, nullptr); }));
  const char* gl = "ptdp_plan_get_layout";
  handle_rows(r, gl, "plan", "ptdp_plan", f.dead_plan, [&](ptdp_plan p) { return ptdp_plan_get_layout(p, 0, &o.layout); });
  r.push_back(null_row(gl, "layout", [&] { return ptdp_plan_get_layout(f.plan, 0, nullptr); }));
  r.push_back({gl, "negative index", [&] { return ptdp_plan_get_layout(f.plan, -1, &o.layout); }, PTDP_ERR_INVALID_ARGUMENT,
               {"index = -1"}});
  r.push_back({gl, "layout->struct_size 0", [&] {
                 ptdp_plan_layout x{};
                 return ptdp_plan_get_layout(f.plan, 0, &x);
               }, PTDP_ERR_INVALID_ARGUMENT, {"layout->struct_size = 0"}});
  for (const char* fn : {"ptdp_plan_report", "ptdp_plan_to_json"}) {
    const bool report = std::string(fn) == "ptdp_plan_report";
    auto call = [report](ptdp_plan p, char* b, size_t c, size_t* n) {
      return report ? ptdp_plan_report(p, b, c, n) : ptdp_plan_to_json(p, b, c, n);
    };
    handle_rows(r, fn, "plan", "ptdp_plan", f.dead_plan, [=, &o](ptdp_plan p) { return call(p, o.text, 64, &o.sz[0]); });
    r.push_back(null_row(fn, "length", [=, &f, &o] { return call(f.plan, o.text, 64, nullptr); }));
    r.push_back({fn, "capacity too small", [=, &f, &o] {
                   size_t length = 0;  // receives the text's length by design (not a sentinel slot)
                   const ptdp_status st = call(f.plan, o.text, 8, &length);
                   return length > 8 ? st : PTDP_ERR_INTERNAL;
                 }, PTDP_ERR_INVALID_ARGUMENT,
                 {"capacity = 8"}});
  }
  const char* ws = "ptdp_plan_write_schedule_svg";
  handle_rows(r, ws, "plan", "ptdp_plan", f.dead_plan, [&](ptdp_plan p) {
    const std::string path = f.dir + "/p.svg";
    return ptdp_plan_write_schedule_svg(p, 0, path.c_str());
  });
  r.push_back(null_row(ws, "path", [&] { return ptdp_plan_write_schedule_svg(f.plan, 0, nullptr); }));
  r.push_back({ws, "empty path", [&] { return ptdp_plan_write_schedule_svg(f.plan, 0, ""); }, PTDP_ERR_INVALID_ARGUMENT,
               {"path is empty"}});
  r.push_back({ws, "negative index", [&] {
                 const std::string path = f.dir + "/p.svg";
                 return ptdp_plan_write_schedule_svg(f.plan, -1, path.c_str());
               }, PTDP_ERR_INVALID_ARGUMENT, {"index -1"}});
  const char* pp = "ptdp_plan_parameters";
  r.push_back({pp, "t 0", [&] { return ptdp_plan_parameters(nullptr, 0, &o.d[0], &o.i64[0]); }, PTDP_ERR_INVALID_ARGUMENT,
               {"t = 0"}});
  options_rows(r, pp, "options", ptdp_plan_options_init,
               [&](const ptdp_plan_options* x) { return ptdp_plan_parameters(x, 1, &o.d[0], &o.i64[0]); });
  r.push_back(bad::field_row<ptdp_plan_options>(
      pp, "vocab * hidden overflows", ptdp_plan_options_init,
      [](ptdp_plan_options& x) {
        x.hidden_size = 2000000000;
        x.num_attention_heads = 1;
        x.vocab_size = 2000000000;
      },
      [&](const ptdp_plan_options* x) { return ptdp_plan_parameters(x, 1, &o.d[0], &o.i64[0]); }, {"hidden_size"}));
  const char* kc = "ptdp_plan_kv_cache_bytes";
  r.push_back({kc, "t 0", [&] { return ptdp_plan_kv_cache_bytes(nullptr, 0, &o.d[0]); }, PTDP_ERR_INVALID_ARGUMENT,
               {"t = 0"}});
  options_rows(r, kc, "options", ptdp_plan_options_init,
               [&](const ptdp_plan_options* x) { return ptdp_plan_kv_cache_bytes(x, 1, &o.d[0]); });
  r.push_back(null_row(kc, "bytes_per_token", [] {
    ptdp_plan_options x;
    ptdp_plan_options_init(&x);
    return ptdp_plan_kv_cache_bytes(&x, 1, nullptr);
  }));
  r.push_back(bad::field_row<ptdp_plan_options>(
      kc, "heads not divisible by t", ptdp_plan_options_init, [](ptdp_plan_options& x) { x.num_attention_heads = 3; },
      [&](const ptdp_plan_options* x) { return ptdp_plan_kv_cache_bytes(x, 2, &o.d[0]); }, {"3"}));
  const char* pl = "ptdp_plot_training_logs";
  r.push_back(null_row(pl, "jsonl_paths", [&] {
    const std::string svg = f.dir + "/plot.svg";
    return ptdp_plot_training_logs(nullptr, nullptr, 1, "t", svg.c_str());
  }));
  r.push_back({pl, "count 0", [&] {
                 const char* paths[1] = {"a.jsonl"};
                 const std::string svg = f.dir + "/plot.svg";
                 return ptdp_plot_training_logs(paths, nullptr, 0, "t", svg.c_str());
               }, PTDP_ERR_INVALID_ARGUMENT, {"count = 0"}});
  r.push_back(null_row(pl, "svg_path", [&] {
    const char* paths[1] = {"a.jsonl"};
    return ptdp_plot_training_logs(paths, nullptr, 1, "t", nullptr);
  }));
  r.push_back({pl, "a NULL path", [&] {
                 const char* paths[1] = {nullptr};
                 const std::string svg = f.dir + "/plot.svg";
                 return ptdp_plot_training_logs(paths, nullptr, 1, "t", svg.c_str());
               }, PTDP_ERR_INVALID_ARGUMENT, {"jsonl_paths[0] is NULL"}});
  r.push_back({pl, "missing log", [&] {
                 const std::string log = f.dir + "/no-log.jsonl";
                 const char* paths[1] = {log.c_str()};
                 const std::string svg = f.dir + "/plot.svg";
                 return ptdp_plot_training_logs(paths, nullptr, 1, "t", svg.c_str());
               }, PTDP_ERR_IO, {"no-log.jsonl"}});
  return r;
}

// The --max-restarts supervisor: every refusal comes before anything is launched.
PTDP_BAD_INPUTS(supervise) {
  std::vector<Row> r;
  const char* fn = "ptdp_train_supervise";
  static const char* const job[] = {"ptdp-train", "--save", "ckpt"};
  static const char* const holed[] = {"ptdp-train", nullptr};
  static const char* const unnamed[] = {"", "--save", "ckpt"};
  static const char* const unsaved[] = {"ptdp-train", "--train-iters", "4"};
  r.push_back({fn, "argc 0", [&] { return ptdp_train_supervise(0, job, nullptr, 1, 0.0, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"argc = 0"}});
  r.push_back(null_row(fn, "argv", [&] { return ptdp_train_supervise(3, nullptr, nullptr, 1, 0.0, &o.i32[0]); }));
  r.push_back(null_row(fn, "argv[1]", [&] { return ptdp_train_supervise(2, holed, nullptr, 1, 0.0, &o.i32[0]); }));
  r.push_back(null_row(fn, "exit_code", [&] { return ptdp_train_supervise(3, job, nullptr, 1, 0.0, nullptr); }));
  r.push_back({fn, "empty program", [&] { return ptdp_train_supervise(3, unnamed, nullptr, 1, 0.0, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"argv[0] is empty"}});
  r.push_back({fn, "negative max_restarts", [&] { return ptdp_train_supervise(3, job, nullptr, -1, 0.0, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"max_restarts = -1"}});
  for (double b : {-1.0, bad::kNaN, bad::kInf}) {
    r.push_back({fn, "backoff_seconds " + std::to_string(b),
                 [&, b] { return ptdp_train_supervise(3, job, nullptr, 1, b, &o.i32[0]); }, PTDP_ERR_INVALID_ARGUMENT,
                 {"backoff_seconds"}});
  }
  r.push_back({fn, "restarts without --save", [&] { return ptdp_train_supervise(3, unsaved, nullptr, 2, 0.0, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"--save"}});
  return r;
}
