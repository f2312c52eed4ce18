// Bad-input rows: the GPT model, pipelines, layers and schedules.
#include "bad_input_table.h"

using bad::handle_rows;
using bad::null_row;
using bad::options_rows;
using bad::Row;

namespace {

// The deprecated `_masked` entry points keep their rows; they are called only through these.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
ptdp_status forward_backward_masked(ptdp_model m, const int32_t* t, const int32_t* l, const ptdp_batch_masks* mk,
                                    int32_t b, int64_t it, int64_t mb, float scale, float* loss) {
  return ptdp_model_forward_backward_masked(m, t, l, mk, b, it, mb, scale, loss);
}
ptdp_status forward_masked(ptdp_model m, const int32_t* t, const int32_t* l, const ptdp_batch_masks* mk, int32_t b,
                           int64_t it, int64_t mb, int32_t training, float* loss) {
  return ptdp_model_forward_masked(m, t, l, mk, b, it, mb, training, loss);
}
ptdp_status evaluate_masked(ptdp_model m, const int32_t* t, const int32_t* l, const ptdp_batch_masks* mk, int32_t b,
                            int32_t n, float* loss) {
  return ptdp_model_evaluate_masked(m, t, l, mk, b, n, loss);
}
ptdp_status pipeline_forward_backward_masked(ptdp_model m, ptdp_schedule s, const int32_t* t, const int32_t* l,
                                             const ptdp_batch_masks* mk, int32_t b, int64_t it,
                                             const ptdp_pipeline_options* po, float* loss) {
  return ptdp_model_pipeline_forward_backward_masked(m, s, t, l, mk, b, it, po, loss);
}
ptdp_status train_step(ptdp_model m, ptdp_schedule s, const int32_t* t, const int32_t* l, int32_t b, int64_t it,
                       const ptdp_pipeline_options* po, float* loss) {
  return ptdp_model_train_step(m, s, t, l, b, it, po, loss);
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

// The rows of a call's ptdp_pipeline_options (`call` runs it with the options given) that every
// call reading them shares: struct sizes, scatter_gather, and the struct sizes of its masks.
void pipeline_options_rows(std::vector<Row>& r, const std::string& fn,
                           std::function<ptdp_status(const ptdp_pipeline_options*)> call) {
  options_rows(r, fn, "options", ptdp_pipeline_options_init, call);
  r.push_back(bad::field_row<ptdp_pipeline_options>(
      fn, "scatter_gather 2", ptdp_pipeline_options_init, [](ptdp_pipeline_options& x) { x.scatter_gather = 2; }, call,
      {"options->scatter_gather = 2"}));
  options_rows(r, fn, "options->masks", ptdp_batch_masks_init, [call](const ptdp_batch_masks* m) {
    ptdp_pipeline_options po;
    ptdp_pipeline_options_init(&po);
    po.masks = m;
    return call(&po);
  });
}

// The same for a call that writes no trace, which refuses a trace_path.
void untraced_options_rows(std::vector<Row>& r, const std::string& fn,
                           std::function<ptdp_status(const ptdp_pipeline_options*)> call) {
  pipeline_options_rows(r, fn, call);
  r.push_back(bad::field_row<ptdp_pipeline_options>(
      fn, "trace_path set", ptdp_pipeline_options_init, [](ptdp_pipeline_options& x) { x.trace_path = "/tmp/t.json"; },
      call, {"options->trace_path is set", "writes no trace"}));
}

// Rows for a GPT options field through ptdp_model_create.
void gpt_field(std::vector<Row>& r, bad::Fixture& f, const std::string& what, std::function<void(ptdp_gpt_options&)> edit,
               std::vector<std::string> mentions) {
  r.push_back(bad::field_row<ptdp_gpt_options>(
      "ptdp_model_create", what, ptdp_gpt_options_init, std::move(edit),
      [&f](const ptdp_gpt_options* x) { return ptdp_model_create(f.groups, x, &f.out.model); }, std::move(mentions)));
}

}  // namespace

PTDP_BAD_INPUTS(model) {
  std::vector<Row> r;
  // Copied into every row's lambda: the rows run after this function has returned.
  const int32_t* tk = f.tokens.data();
  const int32_t* lb = f.labels.data();
  r.push_back(null_row("ptdp_gpt_options_init", "options", [] { return ptdp_gpt_options_init(nullptr); }));
  r.push_back(null_row("ptdp_model_preset_count", "count", [] { return ptdp_model_preset_count(nullptr); }));
  r.push_back(null_row("ptdp_model_preset_name", "length", [&] { return ptdp_model_preset_name(0, o.text, 64, nullptr); }));
  r.push_back({"ptdp_model_preset_name", "negative index", [&] { return ptdp_model_preset_name(-1, o.text, 64, &o.sz[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"index = -1"}});
  r.push_back({"ptdp_model_preset_name", "index past the end",
               [&] { return ptdp_model_preset_name(100000, o.text, 64, &o.sz[0]); }, PTDP_ERR_INVALID_ARGUMENT,
               {"index = 100000"}});
  r.push_back(null_row("ptdp_gpt_options_from_preset", "name", [&] { return ptdp_gpt_options_from_preset(nullptr, &o.gpt); }));
  r.push_back(null_row("ptdp_gpt_options_from_preset", "options", [&] { return ptdp_gpt_options_from_preset("gpt2", nullptr); }));
  r.push_back({"ptdp_gpt_options_from_preset", "unknown preset", [&] { return ptdp_gpt_options_from_preset("nope", &o.gpt); },
               PTDP_ERR_INVALID_ARGUMENT, {"'nope'"}});
  r.push_back({"ptdp_gpt_options_from_preset", "empty name", [&] { return ptdp_gpt_options_from_preset("", &o.gpt); },
               PTDP_ERR_INVALID_ARGUMENT, {"''"}});

  const char* mc = "ptdp_model_create";
  handle_rows(r, mc, "groups", "ptdp_groups", f.dead_groups, [&](ptdp_groups g) { return ptdp_model_create(g, nullptr, &o.model); });
  r.push_back(null_row(mc, "out", [&] { return ptdp_model_create(f.groups, nullptr, nullptr); }));
  options_rows(r, mc, "options", ptdp_gpt_options_init,
               [&](const ptdp_gpt_options* x) { return ptdp_model_create(f.groups, x, &o.model); });
  gpt_field(r, f, "recompute out of range", [](ptdp_gpt_options& x) { x.recompute_granularity = static_cast<ptdp_recompute>(9); },
            {"options->recompute_granularity = 9"});
  gpt_field(r, f, "attention out of range", [](ptdp_gpt_options& x) { x.attention = static_cast<ptdp_attention>(9); },
            {"options->attention = 9"});
  gpt_field(r, f, "normalization out of range",
            [](ptdp_gpt_options& x) { x.normalization = static_cast<ptdp_normalization>(9); }, {"options->normalization = 9"});
  gpt_field(r, f, "position embedding out of range",
            [](ptdp_gpt_options& x) { x.position_embedding_type = static_cast<ptdp_position_embedding>(9); },
            {"options->position_embedding_type = 9"});
  gpt_field(r, f, "precision out of range", [](ptdp_gpt_options& x) { x.precision = static_cast<ptdp_dtype>(99); },
            {"options->precision = 99"});
  gpt_field(r, f, "device out of range", [](ptdp_gpt_options& x) { x.device = static_cast<ptdp_device>(7); },
            {"options->device = 7"});
  gpt_field(r, f, "negative num_layers", [](ptdp_gpt_options& x) { x.num_layers = -1; }, {"num_layers", "-1"});
  gpt_field(r, f, "negative hidden_size", [](ptdp_gpt_options& x) { x.hidden_size = -8; }, {"hidden_size", "-8"});
  gpt_field(r, f, "zero heads", [](ptdp_gpt_options& x) { x.num_attention_heads = 0; }, {"num_attention_heads", "0"});
  gpt_field(r, f, "negative ffn", [](ptdp_gpt_options& x) { x.ffn_hidden_size = -1; }, {"ffn_hidden_size", "-1"});
  gpt_field(r, f, "negative vocab", [](ptdp_gpt_options& x) { x.vocab_size = -1; }, {"vocab_size", "-1"});
  gpt_field(r, f, "negative seq_length", [](ptdp_gpt_options& x) { x.seq_length = -1; }, {"seq_length", "-1"});
  gpt_field(r, f, "NaN hidden_dropout", [](ptdp_gpt_options& x) { x.hidden_dropout = static_cast<float>(bad::kNaN); },
            {"hidden_dropout"});
  gpt_field(r, f, "NaN attention_dropout", [](ptdp_gpt_options& x) { x.attention_dropout = static_cast<float>(bad::kNaN); },
            {"attention_dropout"});
  gpt_field(r, f, "NaN init_method_std", [](ptdp_gpt_options& x) { x.init_method_std = static_cast<float>(bad::kNaN); },
            {"init_method_std"});
  gpt_field(r, f, "Inf init_method_std", [](ptdp_gpt_options& x) { x.init_method_std = static_cast<float>(bad::kInf); },
            {"init_method_std"});
  gpt_field(r, f, "NaN layernorm_epsilon", [](ptdp_gpt_options& x) { x.layernorm_epsilon = static_cast<float>(bad::kNaN); },
            {"layernorm_epsilon"});
  gpt_field(r, f, "NaN rotary_base", [](ptdp_gpt_options& x) { x.rotary_base = static_cast<float>(bad::kNaN); },
            {"rotary_base"});
  // Mixture of experts: the fields' own ranges, then Megatron's refusals in the core's words.
  gpt_field(r, f, "negative num_experts", [](ptdp_gpt_options& x) { x.num_experts = -2; },
            {"options->num_experts = -2"});
  gpt_field(r, f, "score function out of range",
            [](ptdp_gpt_options& x) { x.moe_router_score_function = static_cast<ptdp_moe_score_function>(7); },
            {"options->moe_router_score_function = 7"});
  gpt_field(r, f, "load balancing out of range",
            [](ptdp_gpt_options& x) { x.moe_router_load_balancing_type = static_cast<ptdp_moe_load_balancing>(7); },
            {"options->moe_router_load_balancing_type = 7"});
  gpt_field(r, f, "drop policy out of range",
            [](ptdp_gpt_options& x) { x.moe_token_drop_policy = static_cast<ptdp_moe_drop_policy>(7); },
            {"options->moe_token_drop_policy = 7"});
  gpt_field(r, f, "dispatcher out of range",
            [](ptdp_gpt_options& x) { x.moe_token_dispatcher_type = static_cast<ptdp_moe_dispatcher>(7); },
            {"options->moe_token_dispatcher_type = 7"});
  gpt_field(r, f, "moe_shared_expert_gate 2", [](ptdp_gpt_options& x) { x.moe_shared_expert_gate = 2; },
            {"options->moe_shared_expert_gate = 2"});
  gpt_field(r, f, "NaN moe_aux_loss_coeff",
            [](ptdp_gpt_options& x) { x.moe_aux_loss_coeff = static_cast<float>(bad::kNaN); }, {"moe_aux_loss_coeff"});
  gpt_field(r, f, "negative capacity factor", [](ptdp_gpt_options& x) { x.moe_expert_capacity_factor = -1.0f; },
            {"options->moe_expert_capacity_factor = -1"});
  gpt_field(r, f, "bad moe_layer_freq", [](ptdp_gpt_options& x) {
              x.num_experts = 4;
              x.moe_layer_freq = "[1,0";
            },
            {"options->moe_layer_freq", "[1,0"});
  gpt_field(r, f, "topk above the experts", [](ptdp_gpt_options& x) {
              x.num_experts = 4;
              x.moe_router_topk = 5;
            },
            {"moe_router_topk (--moe-router-topk) 5 is larger than num_experts (--num-experts) 4"});

  r.push_back({"ptdp_model_destroy", "destroyed", [&] { return ptdp_model_destroy(f.dead_model); }, PTDP_ERR_INVALID_ARGUMENT,
               {"model is not a live ptdp_model"}});
  r.push_back({"ptdp_model_destroy", "optimizer still exists", [&] { return ptdp_model_destroy(f.model); },
               PTDP_ERR_INVALID_STATE, {"destroy them first"}});
  handle_rows(r, "ptdp_model_get_options", "model", "ptdp_model", f.dead_model,
              [&](ptdp_model m) { return ptdp_model_get_options(m, &o.gpt); });
  r.push_back(null_row("ptdp_model_get_options", "options", [&] { return ptdp_model_get_options(f.model, nullptr); }));
  r.push_back({"ptdp_model_get_options", "options->struct_size 0", [&] {
                 ptdp_gpt_options x;
                 ptdp_gpt_options_init(&x);
                 x.struct_size = 0;
                 return ptdp_model_get_options(f.model, &x);
               }, PTDP_ERR_INVALID_ARGUMENT, {"options->struct_size"}});

  // The single-microbatch calls.
  struct Step {
    const char* fn;
    std::function<ptdp_status(ptdp_model, const int32_t*, const int32_t*, int32_t, int64_t, int64_t, float)> call;
  };
  const std::vector<Step> steps = {
      {"ptdp_model_forward_backward",
       [&](ptdp_model m, const int32_t* t, const int32_t* l, int32_t b, int64_t it, int64_t mb, float scale) {
         return ptdp_model_forward_backward(m, t, l, b, it, mb, scale, nullptr, &o.f[0]);
       }},
      {"ptdp_model_forward_backward_masked",
       [&](ptdp_model m, const int32_t* t, const int32_t* l, int32_t b, int64_t it, int64_t mb, float scale) {
         return forward_backward_masked(m, t, l, nullptr, b, it, mb, scale, &o.f[0]);
       }},
      {"ptdp_model_forward",
       [&](ptdp_model m, const int32_t* t, const int32_t* l, int32_t b, int64_t it, int64_t mb, float scale) {
         return ptdp_model_forward(m, t, l, b, it, mb, scale == 1.0f ? 0 : 2, nullptr, &o.f[0]);
       }},
      {"ptdp_model_forward_masked",
       [&](ptdp_model m, const int32_t* t, const int32_t* l, int32_t b, int64_t it, int64_t mb, float scale) {
         return forward_masked(m, t, l, nullptr, b, it, mb, scale == 1.0f ? 0 : 2, &o.f[0]);
       }},
  };
  for (const Step& s : steps) {
    auto call = s.call;
    handle_rows(r, s.fn, "model", "ptdp_model", f.dead_model,
                [=](ptdp_model m) { return call(m, tk, lb, 2, 0, 0, 1.0f); });
    r.push_back(null_row(s.fn, "tokens", [=, &f] { return call(f.model, nullptr, lb, 2, 0, 0, 1.0f); }));
    r.push_back(null_row(s.fn, "labels", [=, &f] { return call(f.model, tk, nullptr, 2, 0, 0, 1.0f); }));
    r.push_back({s.fn, "micro_batch_size 0", [=, &f] { return call(f.model, tk, lb, 0, 0, 0, 1.0f); },
                 PTDP_ERR_INVALID_ARGUMENT, {"micro_batch_size = 0"}});
    r.push_back({s.fn, "negative micro_batch_size", [=, &f] { return call(f.model, tk, lb, -2, 0, 0, 1.0f); },
                 PTDP_ERR_INVALID_ARGUMENT, {"micro_batch_size = -2"}});
    r.push_back({s.fn, "negative iteration", [=, &f] { return call(f.model, tk, lb, 2, -1, 0, 1.0f); },
                 PTDP_ERR_INVALID_ARGUMENT, {"iteration = -1"}});
    r.push_back({s.fn, "negative microbatch", [=, &f] { return call(f.model, tk, lb, 2, 0, -1, 1.0f); },
                 PTDP_ERR_INVALID_ARGUMENT, {"microbatch = -1"}});
    if (std::string(s.fn).find("backward") != std::string::npos) {
      r.push_back({s.fn, "NaN grad_scale", [=, &f] { return call(f.model, tk, lb, 2, 0, 0, static_cast<float>(bad::kNaN)); },
                   PTDP_ERR_INVALID_ARGUMENT, {"grad_scale = nan"}});
      r.push_back({s.fn, "Inf grad_scale", [=, &f] { return call(f.model, tk, lb, 2, 0, 0, static_cast<float>(bad::kInf)); },
                   PTDP_ERR_INVALID_ARGUMENT, {"grad_scale = inf"}});
      r.push_back({s.fn, "zero grad_scale", [=, &f] { return call(f.model, tk, lb, 2, 0, 0, 0.0f); },
                   PTDP_ERR_INVALID_ARGUMENT, {"grad_scale = 0"}});
    } else {
      r.push_back({s.fn, "training 2", [=, &f] { return call(f.model, tk, lb, 2, 0, 0, 2.0f); }, PTDP_ERR_INVALID_ARGUMENT,
                   {"training = 2"}});
      r.push_back(null_row(s.fn, "loss", [=, &f] {
        return std::string(s.fn) == "ptdp_model_forward"
                   ? ptdp_model_forward(f.model, tk, lb, 2, 0, 0, 0, nullptr, nullptr)
                   : forward_masked(f.model, tk, lb, nullptr, 2, 0, 0, 0, nullptr);
      }));
    }
  }
  untraced_options_rows(r, "ptdp_model_forward_backward", [&](const ptdp_pipeline_options* po) {
    return ptdp_model_forward_backward(f.model, tk, lb, 2, 0, 0, 1.0f, po, &o.f[0]);
  });
  untraced_options_rows(r, "ptdp_model_forward", [&](const ptdp_pipeline_options* po) {
    return ptdp_model_forward(f.model, tk, lb, 2, 0, 0, 0, po, &o.f[0]);
  });
  options_rows(r, "ptdp_model_forward_backward_masked", "masks", ptdp_batch_masks_init, [&](const ptdp_batch_masks* m) {
    return forward_backward_masked(f.model, tk, lb, m, 2, 0, 0, 1.0f, &o.f[0]);
  });
  options_rows(r, "ptdp_model_forward_masked", "masks", ptdp_batch_masks_init, [&](const ptdp_batch_masks* m) {
    return forward_masked(f.model, tk, lb, m, 2, 0, 0, 0, &o.f[0]);
  });

  handle_rows(r, "ptdp_model_zero_grad", "model", "ptdp_model", f.dead_model, [](ptdp_model m) { return ptdp_model_zero_grad(m); });
  handle_rows(r, "ptdp_model_num_params", "model", "ptdp_model", f.dead_model,
              [&](ptdp_model m) { return ptdp_model_num_params(m, &o.i32[0]); });
  r.push_back(null_row("ptdp_model_num_params", "count", [&] { return ptdp_model_num_params(f.model, nullptr); }));
  const char* pi = "ptdp_model_param_info";
  handle_rows(r, pi, "model", "ptdp_model", f.dead_model,
              [&](ptdp_model m) { return ptdp_model_param_info(m, 0, o.text, 64, &o.i32[0], o.i64, &o.i32[1]); });
  r.push_back({pi, "negative index", [&] { return ptdp_model_param_info(f.model, -1, o.text, 64, &o.i32[0], o.i64, &o.i32[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"index = -1"}});
  r.push_back({pi, "index past the end",
               [&] { return ptdp_model_param_info(f.model, 9999, o.text, 64, &o.i32[0], o.i64, &o.i32[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"index = 9999"}});
  r.push_back({pi, "name capacity too small",
               [&] { return ptdp_model_param_info(f.model, 0, o.text, 1, &o.i32[0], o.i64, &o.i32[1]); },
               PTDP_ERR_INVALID_ARGUMENT, {"name_capacity = 1"}});
  for (const char* fn : {"ptdp_model_get_param", "ptdp_model_set_param", "ptdp_model_get_grad"}) {
    const std::string name = fn;
    auto call = [name](ptdp_model m, const char* p, float* host, size_t bytes) {
      if (name == "ptdp_model_get_param") return ptdp_model_get_param(m, p, host, bytes);
      if (name == "ptdp_model_set_param") return ptdp_model_set_param(m, p, host, bytes);
      return ptdp_model_get_grad(m, p, host, bytes);
    };
    handle_rows(r, fn, "model", "ptdp_model", f.dead_model, [=, &o](ptdp_model m) { return call(m, "x", o.f, 0); });
    r.push_back(null_row(fn, "name", [=, &f, &o] { return call(f.model, nullptr, o.f, 4); }));
    r.push_back({fn, "unknown name", [=, &f, &o] { return call(f.model, "nope", o.f, 4); }, PTDP_ERR_INVALID_ARGUMENT, {"'nope'"}});
    r.push_back({fn, "empty name", [=, &f, &o] { return call(f.model, "", o.f, 4); }, PTDP_ERR_INVALID_ARGUMENT, {"''"}});
  }
  return r;
}

PTDP_BAD_INPUTS(model_eval) {
  std::vector<Row> r;
  const int32_t* tk = f.tokens.data();
  const int32_t* lb = f.labels.data();
  for (const char* fn : {"ptdp_model_evaluate", "ptdp_model_evaluate_masked"}) {
    const bool masked = std::string(fn).find("masked") != std::string::npos;
    auto call = [masked](ptdp_model m, const int32_t* t, const int32_t* l, int32_t b, int32_t n, float* loss) {
      return masked ? evaluate_masked(m, t, l, nullptr, b, n, loss) : ptdp_model_evaluate(m, t, l, b, n, nullptr, loss);
    };
    handle_rows(r, fn, "model", "ptdp_model", f.dead_model, [=, &o](ptdp_model m) { return call(m, tk, lb, 2, 1, &o.f[0]); });
    r.push_back(null_row(fn, "tokens", [=, &f, &o] { return call(f.model, nullptr, lb, 2, 1, &o.f[0]); }));
    r.push_back(null_row(fn, "labels", [=, &f, &o] { return call(f.model, tk, nullptr, 2, 1, &o.f[0]); }));
    r.push_back(null_row(fn, "loss", [=, &f] { return call(f.model, tk, lb, 2, 1, nullptr); }));
    r.push_back({fn, "micro_batch_size 0", [=, &f, &o] { return call(f.model, tk, lb, 0, 1, &o.f[0]); },
                 PTDP_ERR_INVALID_ARGUMENT, {"micro_batch_size", "0"}});
    r.push_back({fn, "negative num_microbatches", [=, &f, &o] { return call(f.model, tk, lb, 2, -1, &o.f[0]); },
                 PTDP_ERR_INVALID_ARGUMENT, {"num_microbatches", "-1"}});
  }
  untraced_options_rows(r, "ptdp_model_evaluate", [&, tk, lb](const ptdp_pipeline_options* po) {
    return ptdp_model_evaluate(f.model, tk, lb, 2, 1, po, &o.f[0]);
  });
  options_rows(r, "ptdp_model_evaluate_masked", "masks", ptdp_batch_masks_init, [&, tk, lb](const ptdp_batch_masks* m) {
    return evaluate_masked(f.model, tk, lb, m, 2, 1, &o.f[0]);
  });
  const char* lg = "ptdp_model_logits";
  handle_rows(r, lg, "model", "ptdp_model", f.dead_model, [&, tk](ptdp_model m) { return ptdp_model_logits(m, tk, 1, o.f, 16); });
  r.push_back(null_row(lg, "tokens", [&] { return ptdp_model_logits(f.model, nullptr, 1, o.f, 16); }));
  r.push_back(null_row(lg, "logits", [&, tk] { return ptdp_model_logits(f.model, tk, 1, nullptr, 16); }));
  r.push_back({lg, "negative batch", [&, tk] { return ptdp_model_logits(f.model, tk, -1, o.f, 16); }, PTDP_ERR_INVALID_ARGUMENT,
               {"batch", "-1"}});
  r.push_back({lg, "bytes too small", [&, tk] { return ptdp_model_logits(f.model, tk, 1, o.f, 16); }, PTDP_ERR_INVALID_ARGUMENT,
               {"bytes = 16"}});

  r.push_back(null_row("ptdp_generate_options_init", "options", [] { return ptdp_generate_options_init(nullptr); }));
  const char* gn = "ptdp_model_generate";
  handle_rows(r, gn, "model", "ptdp_model", f.dead_model,
              [&, tk](ptdp_model m) { return ptdp_model_generate(m, tk, 2, nullptr, o.ids, 64, &o.i32[0]); });
  r.push_back(null_row(gn, "prompt", [&] { return ptdp_model_generate(f.model, nullptr, 2, nullptr, o.ids, 64, &o.i32[0]); }));
  r.push_back(null_row(gn, "out", [&, tk] { return ptdp_model_generate(f.model, tk, 2, nullptr, nullptr, 64, &o.i32[0]); }));
  r.push_back(null_row(gn, "count", [&, tk] { return ptdp_model_generate(f.model, tk, 2, nullptr, o.ids, 64, nullptr); }));
  r.push_back({gn, "negative prompt_length", [&, tk] { return ptdp_model_generate(f.model, tk, -2, nullptr, o.ids, 64, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"prompt_length", "-2"}});
  r.push_back({gn, "negative capacity", [&, tk] { return ptdp_model_generate(f.model, tk, 2, nullptr, o.ids, -1, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  options_rows(r, gn, "options", ptdp_generate_options_init, [&, tk](const ptdp_generate_options* x) {
    return ptdp_model_generate(f.model, tk, 2, x, o.ids, 64, &o.i32[0]);
  });
  auto gen_field = [&](const std::string& what, std::function<void(ptdp_generate_options&)> edit, std::string mention) {
    r.push_back(bad::field_row<ptdp_generate_options>(
        gn, what, ptdp_generate_options_init, std::move(edit),
        [&, tk](const ptdp_generate_options* x) { return ptdp_model_generate(f.model, tk, 2, x, o.ids, 64, &o.i32[0]); },
        {std::move(mention)}));
  };
  gen_field("NaN temperature", [](ptdp_generate_options& x) { x.temperature = static_cast<float>(bad::kNaN); }, "temperature");
  gen_field("Inf temperature", [](ptdp_generate_options& x) { x.temperature = static_cast<float>(bad::kInf); }, "temperature");
  gen_field("negative temperature", [](ptdp_generate_options& x) { x.temperature = -1.0f; }, "temperature");
  gen_field("negative max_new_tokens", [](ptdp_generate_options& x) { x.max_new_tokens = -1; }, "max_new_tokens");
  gen_field("negative top_k", [](ptdp_generate_options& x) { x.top_k = -1; }, "top_k");
  gen_field("no_kv_cache 2", [](ptdp_generate_options& x) { x.no_kv_cache = 2; }, "no_kv_cache = 2");

  r.push_back(null_row("ptdp_batch_masks_init", "masks", [] { return ptdp_batch_masks_init(nullptr); }));
  const char* em = "ptdp_eod_masks";
  r.push_back(null_row(em, "tokens", [&] { return ptdp_eod_masks(nullptr, 8, 4, 0, 0, o.ids, nullptr, nullptr); }));
  r.push_back({em, "negative count", [&, tk] { return ptdp_eod_masks(tk, -8, 4, 0, 0, o.ids, nullptr, nullptr); },
               PTDP_ERR_INVALID_ARGUMENT, {"count = -8"}});
  r.push_back({em, "seq_length 0", [&, tk] { return ptdp_eod_masks(tk, 8, 0, 0, 0, o.ids, nullptr, nullptr); },
               PTDP_ERR_INVALID_ARGUMENT, {"seq_length = 0"}});
  r.push_back({em, "unknown flags", [&, tk] { return ptdp_eod_masks(tk, 8, 4, 0, 64, o.ids, nullptr, nullptr); },
               PTDP_ERR_INVALID_ARGUMENT, {"flags = 64"}});
  r.push_back({em, "labels NULL with PTDP_EOD_MASK_LOSS",
               [&, tk] { return ptdp_eod_masks(tk, 8, 4, 0, PTDP_EOD_MASK_LOSS, nullptr, nullptr, nullptr); },
               PTDP_ERR_INVALID_ARGUMENT, {"labels (PTDP_EOD_MASK_LOSS) is NULL"}});
  return r;
}

PTDP_BAD_INPUTS(pipeline) {
  std::vector<Row> r;
  const int32_t* tk = f.tokens.data();
  const int32_t* lb = f.labels.data();
  r.push_back(null_row("ptdp_pipeline_options_init", "options", [] { return ptdp_pipeline_options_init(nullptr); }));
  for (const char* fn : {"ptdp_model_pipeline_forward_backward", "ptdp_model_pipeline_forward_backward_masked",
                         "ptdp_model_train_step"}) {
    const std::string name = fn;
    auto call = [name](ptdp_model m, ptdp_schedule s, const int32_t* t, const int32_t* l, int32_t b, int64_t it,
                       const ptdp_pipeline_options* po, float* loss) {
      if (name == "ptdp_model_pipeline_forward_backward") return ptdp_model_pipeline_forward_backward(m, s, t, l, b, it, po, loss);
      if (name == "ptdp_model_pipeline_forward_backward_masked")
        return pipeline_forward_backward_masked(m, s, t, l, nullptr, b, it, po, loss);
      return train_step(m, s, t, l, b, it, po, loss);
    };
    handle_rows(r, fn, "model", "ptdp_model", f.dead_model,
                [=, &f, &o](ptdp_model m) { return call(m, f.schedule, tk, lb, 1, 0, nullptr, &o.f[0]); });
    handle_rows(r, fn, "schedule", "ptdp_schedule", f.dead_schedule,
                [=, &f, &o](ptdp_schedule s) { return call(f.model, s, tk, lb, 1, 0, nullptr, &o.f[0]); });
    r.push_back(null_row(fn, "tokens", [=, &f, &o] { return call(f.model, f.schedule, nullptr, lb, 1, 0, nullptr, &o.f[0]); }));
    r.push_back(null_row(fn, "labels", [=, &f, &o] { return call(f.model, f.schedule, tk, nullptr, 1, 0, nullptr, &o.f[0]); }));
    r.push_back({fn, "micro_batch_size 0", [=, &f, &o] { return call(f.model, f.schedule, tk, lb, 0, 0, nullptr, &o.f[0]); },
                 PTDP_ERR_INVALID_ARGUMENT, {"micro_batch_size = 0"}});
    r.push_back({fn, "negative iteration", [=, &f, &o] { return call(f.model, f.schedule, tk, lb, 1, -1, nullptr, &o.f[0]); },
                 PTDP_ERR_INVALID_ARGUMENT, {"iteration = -1"}});
    pipeline_options_rows(r, fn, [=, &f, &o](const ptdp_pipeline_options* po) {
      return call(f.model, f.schedule, tk, lb, 1, 0, po, &o.f[0]);
    });
  }
  options_rows(r, "ptdp_model_pipeline_forward_backward_masked", "masks", ptdp_batch_masks_init,
               [&](const ptdp_batch_masks* m) {
                 return pipeline_forward_backward_masked(f.model, f.schedule, tk, lb, m, 1, 0, nullptr, &o.f[0]);
               });
  r.push_back({"ptdp_model_pipeline_forward_backward_masked", "masks given twice", [&] {
                 ptdp_batch_masks mk;
                 ptdp_batch_masks_init(&mk);
                 ptdp_pipeline_options po;
                 ptdp_pipeline_options_init(&po);
                 po.masks = &mk;
                 return pipeline_forward_backward_masked(f.model, f.schedule, tk, lb, &mk, 1, 0, &po, &o.f[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"masks and options->masks are both set"}});

  r.push_back(null_row("ptdp_stage_callbacks_init", "callbacks", [] { return ptdp_stage_callbacks_init(nullptr); }));
  const char* pr = "ptdp_pipeline_run";
  ptdp_stage_callbacks cb0;
  ptdp_stage_callbacks_init(&cb0);
  handle_rows(r, pr, "groups", "ptdp_groups", f.dead_groups,
              [&, cb0](ptdp_groups g) { return ptdp_pipeline_run(g, f.schedule, &cb0, nullptr); });
  handle_rows(r, pr, "schedule", "ptdp_schedule", f.dead_schedule,
              [&, cb0](ptdp_schedule s) { return ptdp_pipeline_run(f.groups, s, &cb0, nullptr); });
  r.push_back(null_row(pr, "callbacks", [&] { return ptdp_pipeline_run(f.groups, f.schedule, nullptr, nullptr); }));
  options_rows(r, pr, "callbacks", ptdp_stage_callbacks_init,
               [&](const ptdp_stage_callbacks* cb) { return ptdp_pipeline_run(f.groups, f.schedule, cb, nullptr); });
  r.push_back({pr, "no forward callback", [&, cb0] { return ptdp_pipeline_run(f.groups, f.schedule, &cb0, nullptr); },
               PTDP_ERR_INVALID_ARGUMENT, {"callbacks->forward is NULL"}});
  r.push_back({pr, "options->masks set", [&, cb0] {
                 // Callbacks that would run, so that only the masks are wrong.
                 ptdp_stage_callbacks cb = cb0;
                 cb.forward = [](void*, int32_t, int32_t, ptdp_tensor, ptdp_tensor*) { return PTDP_SUCCESS; };
                 cb.backward_input = [](void*, int32_t, int32_t, ptdp_tensor, ptdp_tensor*) { return PTDP_SUCCESS; };
                 cb.activation_ndim = 1;
                 cb.activation_shape[0] = 4;
                 ptdp_batch_masks mk;
                 ptdp_batch_masks_init(&mk);
                 ptdp_pipeline_options po;
                 ptdp_pipeline_options_init(&po);
                 po.masks = &mk;
                 return ptdp_pipeline_run(f.groups, f.schedule, &cb, &po);
               }, PTDP_ERR_INVALID_ARGUMENT, {"options->masks is set", "callbacks"}});
  return r;
}

PTDP_BAD_INPUTS(layers) {
  std::vector<Row> r;
  const char* cp = "ptdp_column_parallel_linear_create";
  handle_rows(r, cp, "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_column_parallel_linear_create(g, 8, 8, 1, 0, 0.02f, 1, &o.layer); });
  r.push_back(null_row(cp, "out", [&] { return ptdp_column_parallel_linear_create(f.groups, 8, 8, 1, 0, 0.02f, 1, nullptr); }));
  r.push_back({cp, "negative in_features",
               [&] { return ptdp_column_parallel_linear_create(f.groups, -8, 8, 1, 0, 0.02f, 1, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"in_features = -8"}});
  r.push_back({cp, "out_features 0", [&] { return ptdp_column_parallel_linear_create(f.groups, 8, 0, 1, 0, 0.02f, 1, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"out_features = 0"}});
  r.push_back({cp, "bias 2", [&] { return ptdp_column_parallel_linear_create(f.groups, 8, 8, 2, 0, 0.02f, 1, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"bias = 2"}});
  r.push_back({cp, "gather_output -1",
               [&] { return ptdp_column_parallel_linear_create(f.groups, 8, 8, 1, -1, 0.02f, 1, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"gather_output = -1"}});
  r.push_back({cp, "NaN init_std", [&] {
                 return ptdp_column_parallel_linear_create(f.groups, 8, 8, 1, 0, static_cast<float>(bad::kNaN), 1, &o.layer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"init_std"}});
  r.push_back({cp, "in_features * out_features overflows", [&] {
                 return ptdp_column_parallel_linear_create(f.groups, int64_t{1} << 40, int64_t{1} << 40, 0, 0, 0.02f, 1, &o.layer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"overflow"}});
  const char* rp = "ptdp_row_parallel_linear_create";
  handle_rows(r, rp, "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_row_parallel_linear_create(g, 8, 8, 1, 0.02f, 1, &o.layer); });
  r.push_back(null_row(rp, "out", [&] { return ptdp_row_parallel_linear_create(f.groups, 8, 8, 1, 0.02f, 1, nullptr); }));
  r.push_back({rp, "negative out_features", [&] { return ptdp_row_parallel_linear_create(f.groups, 8, -1, 1, 0.02f, 1, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"out_features = -1"}});
  r.push_back({rp, "Inf init_std", [&] {
                 return ptdp_row_parallel_linear_create(f.groups, 8, 8, 1, static_cast<float>(bad::kInf), 1, &o.layer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"init_std"}});
  const char* ve = "ptdp_vocab_parallel_embedding_create";
  handle_rows(r, ve, "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_vocab_parallel_embedding_create(g, 16, 8, 0.02f, 1, &o.layer); });
  r.push_back(null_row(ve, "out", [&] { return ptdp_vocab_parallel_embedding_create(f.groups, 16, 8, 0.02f, 1, nullptr); }));
  r.push_back({ve, "negative vocab", [&] { return ptdp_vocab_parallel_embedding_create(f.groups, -16, 8, 0.02f, 1, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"vocab = -16"}});
  r.push_back({ve, "NaN init_std", [&] {
                 return ptdp_vocab_parallel_embedding_create(f.groups, 16, 8, static_cast<float>(bad::kNaN), 1, &o.layer);
               }, PTDP_ERR_INVALID_ARGUMENT, {"init_std"}});
  const char* ce = "ptdp_vocab_parallel_cross_entropy_create";
  handle_rows(r, ce, "groups", "ptdp_groups", f.dead_groups,
              [&](ptdp_groups g) { return ptdp_vocab_parallel_cross_entropy_create(g, 16, 16, &o.layer); });
  r.push_back(null_row(ce, "out", [&] { return ptdp_vocab_parallel_cross_entropy_create(f.groups, 16, 16, nullptr); }));
  r.push_back({ce, "padded_vocab below vocab", [&] { return ptdp_vocab_parallel_cross_entropy_create(f.groups, 16, 8, &o.layer); },
               PTDP_ERR_INVALID_ARGUMENT, {"padded_vocab"}});

  handle_rows(r, "ptdp_layer_forward", "layer", "ptdp_layer", f.dead_layer,
              [&](ptdp_layer l) { return ptdp_layer_forward(l, 0, f.hidden, nullptr, &o.tensor); });
  handle_rows(r, "ptdp_layer_forward", "input", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_layer_forward(f.layer, 0, t, nullptr, &o.tensor); });
  r.push_back(null_row("ptdp_layer_forward", "output", [&] { return ptdp_layer_forward(f.layer, 0, f.hidden, nullptr, nullptr); }));
  r.push_back({"ptdp_layer_forward", "negative microbatch",
               [&] { return ptdp_layer_forward(f.layer, -1, f.hidden, nullptr, &o.tensor); }, PTDP_ERR_INVALID_ARGUMENT,
               {"microbatch = -1"}});
  r.push_back({"ptdp_layer_forward", "labels for a linear layer",
               [&] { return ptdp_layer_forward(f.layer, 0, f.hidden, f.ints, &o.tensor); }, PTDP_ERR_INVALID_ARGUMENT,
               {"labels must be NULL"}});
  handle_rows(r, "ptdp_layer_backward", "layer", "ptdp_layer", f.dead_layer,
              [&](ptdp_layer l) { return ptdp_layer_backward(l, 0, f.hidden, &o.tensor); });
  handle_rows(r, "ptdp_layer_backward", "grad_output", "ptdp_tensor", f.dead_tensor,
              [&](ptdp_tensor t) { return ptdp_layer_backward(f.layer, 0, t, &o.tensor); });
  r.push_back(null_row("ptdp_layer_backward", "grad_input", [&] { return ptdp_layer_backward(f.layer, 0, f.hidden, nullptr); }));
  r.push_back({"ptdp_layer_backward", "negative microbatch", [&] { return ptdp_layer_backward(f.layer, -1, f.hidden, &o.tensor); },
               PTDP_ERR_INVALID_ARGUMENT, {"microbatch = -1"}});
  for (const char* fn : {"ptdp_layer_param", "ptdp_layer_grad"}) {
    const bool param = std::string(fn) == "ptdp_layer_param";
    auto call = [param](ptdp_layer l, const char* w, ptdp_tensor* out) {
      return param ? ptdp_layer_param(l, w, out) : ptdp_layer_grad(l, w, out);
    };
    handle_rows(r, fn, "layer", "ptdp_layer", f.dead_layer, [=, &o](ptdp_layer l) { return call(l, "weight", &o.tensor); });
    r.push_back(null_row(fn, "which", [=, &f, &o] { return call(f.layer, nullptr, &o.tensor); }));
    r.push_back(null_row(fn, "out", [=, &f] { return call(f.layer, "weight", nullptr); }));
    r.push_back({fn, "unknown which", [=, &f, &o] { return call(f.layer, "nope", &o.tensor); }, PTDP_ERR_INVALID_ARGUMENT,
                 {"which = 'nope'"}});
  }
  handle_rows(r, "ptdp_layer_zero_grad", "layer", "ptdp_layer", f.dead_layer, [](ptdp_layer l) { return ptdp_layer_zero_grad(l); });
  r.push_back({"ptdp_layer_destroy", "destroyed", [&] { return ptdp_layer_destroy(f.dead_layer); }, PTDP_ERR_INVALID_ARGUMENT,
               {"layer is not a live ptdp_layer"}});
  return r;
}

PTDP_BAD_INPUTS(schedule) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_schedule_costs_init", "costs", [] { return ptdp_schedule_costs_init(nullptr); }));
  const char* sc = "ptdp_schedule_create";
  r.push_back(null_row(sc, "out", [] { return ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, nullptr); }));
  r.push_back({sc, "kind out of range", [&] { return ptdp_schedule_create(static_cast<ptdp_schedule_kind>(99), 1, 2, 1, &o.schedule); },
               PTDP_ERR_INVALID_ARGUMENT, {"kind = 99"}});
  r.push_back({sc, "p 0", [&] { return ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 0, 2, 1, &o.schedule); },
               PTDP_ERR_INVALID_ARGUMENT, {"p = 0"}});
  r.push_back({sc, "negative m", [&] { return ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, -2, 1, &o.schedule); },
               PTDP_ERR_INVALID_ARGUMENT, {"m = -2"}});
  r.push_back({sc, "v 0", [&] { return ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 0, &o.schedule); },
               PTDP_ERR_INVALID_ARGUMENT, {"v = 0"}});
  r.push_back({sc, "p * m * v too large", [&] {
                 return ptdp_schedule_create(PTDP_SCHEDULE_INTERLEAVED_1F1B, 1 << 20, 1 << 20, 1 << 10, &o.schedule);
               }, PTDP_ERR_INVALID_ARGUMENT, {"p * m * v = 1048576 * 1048576 * 1024"}});
  const char* cc = "ptdp_schedule_create_custom";
  static const ptdp_action one[1] = {{PTDP_ACTION_FORWARD, 0, 0, -1}};
  static const int32_t counts[1] = {1};
  static const int32_t negative[1] = {-1};
  r.push_back(null_row(cc, "out", [] { return ptdp_schedule_create_custom(PTDP_SCHEDULE_GPIPE, 1, 1, 1, one, counts, nullptr); }));
  r.push_back(null_row(cc, "actions",
                       [&] { return ptdp_schedule_create_custom(PTDP_SCHEDULE_GPIPE, 1, 1, 1, nullptr, counts, &o.schedule); }));
  r.push_back(null_row(cc, "counts_per_rank",
                       [&] { return ptdp_schedule_create_custom(PTDP_SCHEDULE_GPIPE, 1, 1, 1, one, nullptr, &o.schedule); }));
  r.push_back({cc, "negative count", [&] {
                 return ptdp_schedule_create_custom(PTDP_SCHEDULE_GPIPE, 1, 1, 1, one, negative, &o.schedule);
               }, PTDP_ERR_INVALID_ARGUMENT, {"counts_per_rank[0] = -1"}});
  r.push_back({cc, "kind_label out of range", [&] {
                 return ptdp_schedule_create_custom(static_cast<ptdp_schedule_kind>(99), 1, 1, 1, one, counts, &o.schedule);
               }, PTDP_ERR_INVALID_ARGUMENT, {"kind_label = 99"}});
  r.push_back({cc, "negative p", [&] { return ptdp_schedule_create_custom(PTDP_SCHEDULE_GPIPE, -1, 1, 1, one, counts, &o.schedule); },
               PTDP_ERR_INVALID_ARGUMENT, {"p = -1"}});
  r.push_back({cc, "action kind out of range", [&] {
                 static const ptdp_action badk[1] = {{static_cast<ptdp_action_kind>(42), 0, 0, -1}};
                 return ptdp_schedule_create_custom(PTDP_SCHEDULE_GPIPE, 1, 1, 1, badk, counts, &o.schedule);
               }, PTDP_ERR_INVALID_ARGUMENT, {"kind = 42"}});
  r.push_back({"ptdp_schedule_destroy", "destroyed", [&] { return ptdp_schedule_destroy(f.dead_schedule); },
               PTDP_ERR_INVALID_ARGUMENT, {"schedule is not a live ptdp_schedule"}});
  handle_rows(r, "ptdp_schedule_info", "schedule", "ptdp_schedule", f.dead_schedule,
              [&](ptdp_schedule s) { return ptdp_schedule_info(s, &o.kind, &o.i32[0], &o.i32[1], &o.i32[2]); });
  handle_rows(r, "ptdp_schedule_num_actions", "schedule", "ptdp_schedule", f.dead_schedule,
              [&](ptdp_schedule s) { return ptdp_schedule_num_actions(s, 0, &o.i32[0]); });
  r.push_back({"ptdp_schedule_num_actions", "negative rank", [&] { return ptdp_schedule_num_actions(f.schedule, -1, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"rank = -1"}});
  r.push_back({"ptdp_schedule_num_actions", "rank past p", [&] { return ptdp_schedule_num_actions(f.schedule, 1, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"rank = 1"}});
  r.push_back(null_row("ptdp_schedule_num_actions", "count", [&] { return ptdp_schedule_num_actions(f.schedule, 0, nullptr); }));
  const char* sa = "ptdp_schedule_actions";
  handle_rows(r, sa, "schedule", "ptdp_schedule", f.dead_schedule,
              [&](ptdp_schedule s) { return ptdp_schedule_actions(s, 0, o.actions, 4, &o.i32[0]); });
  r.push_back({sa, "negative rank", [&] { return ptdp_schedule_actions(f.schedule, -1, o.actions, 4, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"rank = -1"}});
  r.push_back({sa, "negative capacity", [&] { return ptdp_schedule_actions(f.schedule, 0, o.actions, -1, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  r.push_back({sa, "capacity too small", [&] { return ptdp_schedule_actions(f.schedule, 0, o.actions, 1, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = 1"}});
  r.push_back(null_row(sa, "count", [&] { return ptdp_schedule_actions(f.schedule, 0, o.actions, 4, nullptr); }));
  handle_rows(r, "ptdp_schedule_check", "schedule", "ptdp_schedule", f.dead_schedule,
              [&](ptdp_schedule s) { return ptdp_schedule_check(s, &o.i32[0], o.text, 64); });
  r.push_back(null_row("ptdp_schedule_check", "ok", [&] { return ptdp_schedule_check(f.schedule, nullptr, o.text, 64); }));
  const char* sm = "ptdp_schedule_simulate";
  handle_rows(r, sm, "schedule", "ptdp_schedule", f.dead_schedule,
              [&](ptdp_schedule s) { return ptdp_schedule_simulate(s, nullptr, &o.d[0], &o.d[1], o.i32, 8); });
  r.push_back({sm, "negative capacity", [&] { return ptdp_schedule_simulate(f.schedule, nullptr, &o.d[0], &o.d[1], o.i32, -1); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  options_rows(r, sm, "costs", ptdp_schedule_costs_init, [&](const ptdp_schedule_costs* c) {
    return ptdp_schedule_simulate(f.schedule, c, &o.d[0], &o.d[1], o.i32, 8);
  });
  for (double v : {bad::kNaN, bad::kInf, -1.0}) {
    r.push_back(bad::field_row<ptdp_schedule_costs>(
        sm, "forward cost " + std::to_string(v), ptdp_schedule_costs_init, [=](ptdp_schedule_costs& c) { c.forward = v; },
        [&](const ptdp_schedule_costs* c) { return ptdp_schedule_simulate(f.schedule, c, &o.d[0], &o.d[1], o.i32, 8); },
        {"costs->forward"}));
  }
  const char* ct = "ptdp_schedule_costs_from_trace";
  r.push_back(null_row(ct, "path", [&] {
    return ptdp_schedule_costs_from_trace(nullptr, 1, &o.d[0], &o.d[1], &o.d[2], &o.d[3], &o.d[4]);
  }));
  r.push_back({ct, "missing file", [&] {
                 const std::string p = f.dir + "/no-such-trace.json";
                 return ptdp_schedule_costs_from_trace(p.c_str(), 1, &o.d[0], &o.d[1], &o.d[2], &o.d[3], &o.d[4]);
               }, PTDP_ERR_IO, {"no-such-trace.json"}});
  r.push_back({ct, "chunks 0", [&] {
                 return ptdp_schedule_costs_from_trace("x.json", 0, &o.d[0], &o.d[1], &o.d[2], &o.d[3], &o.d[4]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"chunks = 0"}});
  const char* sv = "ptdp_schedule_write_svg";
  handle_rows(r, sv, "schedule", "ptdp_schedule", f.dead_schedule, [&](ptdp_schedule s) {
    const std::string p = f.dir + "/s.svg";
    return ptdp_schedule_write_svg(s, nullptr, p.c_str());
  });
  r.push_back(null_row(sv, "path", [&] { return ptdp_schedule_write_svg(f.schedule, nullptr, nullptr); }));
  r.push_back({sv, "empty path", [&] { return ptdp_schedule_write_svg(f.schedule, nullptr, ""); }, PTDP_ERR_INVALID_ARGUMENT,
               {"path is empty"}});
  options_rows(r, sv, "costs", ptdp_schedule_costs_init, [&](const ptdp_schedule_costs* c) {
    const std::string p = f.dir + "/s.svg";
    return ptdp_schedule_write_svg(f.schedule, c, p.c_str());
  });
  return r;
}
