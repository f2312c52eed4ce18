// The GPT model through the C API.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "capi/src/batch_masks.h"
#include "capi/src/handles.h"
#include "capi/src/pipeline_run.h"
#include "core/model/generate.h"
#include "core/model/model_presets.h"
#include "core/train/forward_backward.h"
#include "core/train/memory_check.h"

static_assert(PTDP_RECOMPUTE_NONE == static_cast<int>(ptdp::Recompute::None));
static_assert(PTDP_RECOMPUTE_FULL == static_cast<int>(ptdp::Recompute::Full));
static_assert(PTDP_RECOMPUTE_SELECTIVE == static_cast<int>(ptdp::Recompute::Selective));
static_assert(PTDP_NORMALIZATION_LAYERNORM == static_cast<int>(ptdp::Normalization::LayerNorm));
static_assert(PTDP_NORMALIZATION_RMSNORM == static_cast<int>(ptdp::Normalization::RMSNorm));
static_assert(PTDP_POSITION_EMBEDDING_LEARNED_ABSOLUTE == static_cast<int>(ptdp::PositionEmbedding::LearnedAbsolute));
static_assert(PTDP_POSITION_EMBEDDING_ROPE == static_cast<int>(ptdp::PositionEmbedding::Rope));
static_assert(PTDP_POSITION_EMBEDDING_NONE == static_cast<int>(ptdp::PositionEmbedding::None));

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

}  // namespace

namespace {

using ptdp::capi::gpt_config;

ptdp::Step step_of(int64_t iteration, int64_t microbatch, bool training) {
  ptdp::Step s;
  s.iteration = iteration;
  s.microbatch = microbatch;
  s.training = training;
  return s;
}

const ptdp::ParamInfo& param_info(const ptdp_model_impl& m, const char* name) {
  require_non_null(name, "name");
  for (const ptdp::ParamInfo& p : m.model->all_params())
    if (p.name == name) return p;
  ptdp::throw_error(ptdp::ErrorCode::InvalidArgument, std::string("no parameter named '") + name + "'");
}

std::size_t global_bytes(const ptdp::ParamInfo& p) {
  return static_cast<std::size_t>(p.global_shape.numel()) * sizeof(float);
}

// A host buffer of `bytes` can take the global value of `p`.
void require_room(const ptdp::ParamInfo& p, const float* host, std::size_t bytes) {
  require_non_null(host, "host");
  PTDP_CHECK_ARG(bytes >= global_bytes(p), "bytes = " + std::to_string(bytes) + " is smaller than the " +
                                               std::to_string(global_bytes(p)) + " bytes of " + p.name + " " +
                                               p.global_shape.str());
}

// The whole model on this rank (pipeline size 1), for the single-microbatch calls.
ptdp::GptModel& whole(const ptdp_model_impl& m, const char* what) {
  if (m.model->pipeline_size() != 1) {
    ptdp::throw_error(ptdp::ErrorCode::Unsupported,
                      std::string(what) + " runs the whole model on one rank; with pipeline size " +
                          std::to_string(m.model->pipeline_size()) + " use ptdp_model_pipeline_forward_backward");
  }
  return *m.model->chunks().front();
}

// The bodies of the entry points and of their deprecated forms (each keeps its own name in
// messages), which hand them their masks inside the options.
float forward_backward(ptdp_model model, const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
                       int64_t iteration, int64_t microbatch, float grad_scale, const ptdp_pipeline_options* options,
                       const char* function) {
  ptdp_model_impl& m = live(model, "model");
  ptdp::capi::require_batch(tokens, labels, micro_batch_size);
  ptdp::capi::require_non_negative(iteration, "iteration");
  ptdp::capi::require_non_negative(microbatch, "microbatch");
  ptdp::capi::require_finite_positive(grad_scale, "grad_scale");
  const ptdp::DocumentLayout layout = ptdp::capi::untraced_layout(options, function);
  return whole(m, function).forward_backward(tokens, labels, micro_batch_size, step_of(iteration, microbatch, true),
                                             grad_scale, layout);
}

float forward(ptdp_model model, const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
              int64_t iteration, int64_t microbatch, int32_t training, const ptdp_pipeline_options* options,
              const float* loss, const char* function) {
  ptdp_model_impl& m = live(model, "model");
  ptdp::capi::require_batch(tokens, labels, micro_batch_size);
  require_non_null(loss, "loss");
  ptdp::capi::require_non_negative(iteration, "iteration");
  ptdp::capi::require_non_negative(microbatch, "microbatch");
  PTDP_CHECK_ARG(training == 0 || training == 1, "training = " + std::to_string(training) + " is not 0 or 1");
  const ptdp::DocumentLayout layout = ptdp::capi::untraced_layout(options, function);
  return whole(m, function)
      .forward_loss(tokens, labels, micro_batch_size, step_of(iteration, microbatch, training == 1), layout);
}

float pipeline_forward_backward(ptdp_model model, ptdp_schedule schedule, const int32_t* tokens, const int32_t* labels,
                                int32_t micro_batch_size, int64_t iteration, const ptdp_pipeline_options* options) {
  ptdp_model_impl& m = live(model, "model");
  const ptdp::Schedule& s = live(schedule, "schedule").schedule;
  ptdp::capi::require_batch(tokens, labels, micro_batch_size);
  ptdp::capi::require_non_negative(iteration, "iteration");
  const ptdp::capi::PipelineRun run(options);
  const float l = ptdp::forward_backward(*m.model, s, tokens, labels, micro_batch_size, iteration, run.executor(), {},
                                         run.layout());
  run.finish(*m.owner);
  return l;
}

float evaluate(ptdp_model model, const int32_t* tokens, const int32_t* labels, int32_t micro_batch_size,
               int32_t num_microbatches, const ptdp_pipeline_options* options, const float* loss,
               const char* function) {
  ptdp_model_impl& m = live(model, "model");
  require_non_null(tokens, "tokens");
  require_non_null(labels, "labels");
  require_non_null(loss, "loss");
  PTDP_CHECK_ARG(micro_batch_size > 0, "micro_batch_size must be > 0, got " + std::to_string(micro_batch_size));
  PTDP_CHECK_ARG(num_microbatches > 0, "num_microbatches must be > 0, got " + std::to_string(num_microbatches));
  const ptdp::DocumentLayout layout = ptdp::capi::untraced_layout(options, function);
  return ptdp::evaluate(*m.model, tokens, labels, micro_batch_size, num_microbatches, layout);
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_gpt_options_init(ptdp_gpt_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    const ptdp::GptConfig d;
    options->num_layers = d.num_layers;
    options->hidden_size = d.hidden_size;
    options->num_attention_heads = d.num_attention_heads;
    options->ffn_hidden_size = d.ffn_hidden_size;
    options->vocab_size = d.vocab_size;
    options->make_vocab_size_divisible_by = d.make_vocab_size_divisible_by;
    options->seq_length = d.seq_length;
    options->max_position_embeddings = d.max_position_embeddings;
    options->hidden_dropout = d.hidden_dropout;
    options->attention_dropout = d.attention_dropout;
    options->init_method_std = d.init_method_std;
    options->layernorm_epsilon = d.layernorm_epsilon;
    options->untie_embeddings_and_output_weights = d.tie_embeddings ? 0 : 1;
    options->recompute_granularity = PTDP_RECOMPUTE_NONE;
    options->seed = d.seed;
    options->device = PTDP_DEVICE_CPU;
    options->precision = static_cast<ptdp_dtype>(d.precision);
    options->attention = static_cast<ptdp_attention>(d.attention);
    // The fields added after 0.2.0 stay zero, which means the GPT's behaviour: a program that
    // leaves them so passes a zero tail, which a library that predates them accepts.
  });
}

PTDP_API ptdp_status ptdp_model_preset_count(int32_t* count) {
  return guard(__func__, [&] {
    require_non_null(count, "count");
    *count = static_cast<int32_t>(ptdp::model_presets().size());
  });
}

PTDP_API ptdp_status ptdp_model_preset_name(int32_t index, char* buffer, size_t capacity, size_t* length) {
  return guard(__func__, [&] {
    require_non_null(length, "length");
    const auto& presets = ptdp::model_presets();
    const auto n = static_cast<int32_t>(presets.size());
    PTDP_CHECK_ARG(index >= 0 && index < n,
                   "index = " + std::to_string(index) + " is outside [0, " + std::to_string(n) + ")");
    ptdp::capi::copy_text(presets[static_cast<std::size_t>(index)].name, buffer, capacity, length);
  });
}

PTDP_API ptdp_status ptdp_gpt_options_from_preset(const char* name, ptdp_gpt_options* options) {
  return guard(__func__, [&] {
    require_non_null(name, "name");
    require_non_null(options, "options");
    const std::optional<ptdp::ModelPreset> preset = ptdp::find_model_preset(name);
    PTDP_CHECK_ARG(preset.has_value(),
                   std::string("no model preset named '") + name + "'; the presets are " + ptdp::model_preset_names());
    ptdp::capi::gpt_options_sized(preset->config, options);
  });
}

PTDP_API ptdp_status ptdp_model_create(ptdp_groups groups, const ptdp_gpt_options* options, ptdp_model* out) {
  return guard(__func__, [&] {
    ptdp_groups_impl& g = live(groups, "groups");
    require_non_null(out, "out");
    ptdp::GptConfig cfg = gpt_config(options);
    // The model runs with the groups' sequence parallelism (GptPipeline takes it from them),
    // which MoE with t > 1 needs: validate() sees it as the model will.
    cfg.sequence_parallel = g.groups->layout().config().sequence_parallel;
    ptdp_gpt_options defaults;
    ptdp_gpt_options_init(&defaults);
    const ptdp_gpt_options o =
        ptdp::capi::read_options(options, defaults, "options", "ptdp_gpt_options_init");
    ptdp::Device device;
    if (o.device != PTDP_DEVICE_CPU) {
      PTDP_CHECK_ARG(o.device == PTDP_DEVICE_CUDA,
                     "options->device = " + std::to_string(static_cast<int>(o.device)) + " is not a ptdp_device");
#ifndef PTDP_HAVE_CUDA
      ptdp::throw_error(ptdp::ErrorCode::Unsupported,
                        "options->device is PTDP_DEVICE_CUDA but this build of ptdp has no CUDA support");
#endif
      const int gpu = g.owner->runtime->gpu();
      if (gpu < 0) {
        ptdp::throw_error(ptdp::ErrorCode::Device, "options->device is PTDP_DEVICE_CUDA but this rank has no GPU");
      }
      device = ptdp::Device{ptdp::DeviceType::CUDA, gpu};
    }
    cfg.validate(g.groups->size(ptdp::GroupKind::Tensor));  // the sizes, checked, before any estimate
    cfg.validate_experts(g.groups->layout().expert_model(), g.groups->layout().expert_tensor());
    ptdp::refuse_model_that_does_not_fit(cfg, *g.groups, device, g.owner->runtime->local_size());
    auto h = std::make_unique<ptdp_model_impl>();
    h->owner = &g;
    h->model = std::make_unique<ptdp::GptPipeline>(cfg, *g.groups, device);
    ++g.dependents;
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_model_destroy(ptdp_model model) {
  return guard(__func__, [&] {
    if (model == nullptr) return;
    ptdp_model_impl& m = live(model, "model");
    if (m.dependents.load() > 0) {
      ptdp::throw_error(ptdp::ErrorCode::InvalidState,
                        std::to_string(m.dependents.load()) + " ptdp_optimizer handles use this model; destroy them first");
    }
    --m.owner->dependents;
    ptdp::capi::release(model);
  });
}

PTDP_API ptdp_status ptdp_model_get_options(ptdp_model model, ptdp_gpt_options* options) {
  return guard(__func__, [&] {
    const ptdp_model_impl& m = live(model, "model");
    const ptdp_device device =
        m.model->device().type == ptdp::DeviceType::CUDA ? PTDP_DEVICE_CUDA : PTDP_DEVICE_CPU;
    ptdp::capi::gpt_options_sized(m.model->config(), options, device);
  });
}

PTDP_API ptdp_status ptdp_model_forward_backward(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                                 int32_t micro_batch_size, int64_t iteration, int64_t microbatch,
                                                 float grad_scale, const ptdp_pipeline_options* options, float* loss) {
  return guard(__func__, [&] {
    const float l =
        forward_backward(model, tokens, labels, micro_batch_size, iteration, microbatch, grad_scale, options, __func__);
    if (loss) *loss = l;
  });
}

PTDP_API ptdp_status ptdp_model_forward_backward_masked(ptdp_model model, const int32_t* tokens,
                                                        const int32_t* labels, const ptdp_batch_masks* masks,
                                                        int32_t micro_batch_size, int64_t iteration,
                                                        int64_t microbatch, float grad_scale, float* loss) {
  return guard(__func__, [&] {
    const ptdp_pipeline_options o = ptdp::capi::masked_options(nullptr, masks);
    const float l =
        forward_backward(model, tokens, labels, micro_batch_size, iteration, microbatch, grad_scale, &o, __func__);
    if (loss) *loss = l;
  });
}

PTDP_API ptdp_status ptdp_model_forward(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                        int32_t micro_batch_size, int64_t iteration, int64_t microbatch,
                                        int32_t training, const ptdp_pipeline_options* options, float* loss) {
  return guard(__func__, [&] {
    *loss = forward(model, tokens, labels, micro_batch_size, iteration, microbatch, training, options, loss, __func__);
  });
}

PTDP_API ptdp_status ptdp_model_forward_masked(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                               const ptdp_batch_masks* masks, int32_t micro_batch_size,
                                               int64_t iteration, int64_t microbatch, int32_t training,
                                               float* loss) {
  return guard(__func__, [&] {
    const ptdp_pipeline_options o = ptdp::capi::masked_options(nullptr, masks);
    *loss = forward(model, tokens, labels, micro_batch_size, iteration, microbatch, training, &o, loss, __func__);
  });
}

PTDP_API ptdp_status ptdp_model_zero_grad(ptdp_model model) {
  return guard(__func__, [&] { live(model, "model").model->zero_grads(); });
}

PTDP_API ptdp_status ptdp_model_num_params(ptdp_model model, int32_t* count) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    require_non_null(count, "count");
    *count = static_cast<int32_t>(m.model->all_params().size());
  });
}

PTDP_API ptdp_status ptdp_model_param_info(ptdp_model model, int32_t index, char* name, size_t name_capacity,
                                           int32_t* ndim, int64_t* global_shape, int32_t* partition_dim) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    const auto& all = m.model->all_params();
    const auto n = static_cast<int32_t>(all.size());
    PTDP_CHECK_ARG(index >= 0 && index < n, "index = " + std::to_string(index) + " is outside [0, " +
                                                std::to_string(n) + ")");
    const ptdp::ParamInfo& p = all[static_cast<std::size_t>(index)];
    if (name_capacity > 0) {
      require_non_null(name, "name");
      PTDP_CHECK_ARG(p.name.size() < name_capacity, "name_capacity = " + std::to_string(name_capacity) +
                                                        " cannot hold '" + p.name + "' and its terminator");
      std::memcpy(name, p.name.c_str(), p.name.size() + 1);
    }
    if (ndim) *ndim = p.global_shape.ndim();
    if (global_shape)
      for (int d = 0; d < p.global_shape.ndim(); ++d) global_shape[d] = p.global_shape[d];
    if (partition_dim) *partition_dim = p.partition_dim;
  });
}

PTDP_API ptdp_status ptdp_model_get_param(ptdp_model model, const char* name, float* host, size_t bytes) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    const ptdp::ParamInfo& p = param_info(m, name);
    require_room(p, host, bytes);
    m.model->get_global(p.name, false, host);
  });
}

PTDP_API ptdp_status ptdp_model_set_param(ptdp_model model, const char* name, const float* host, size_t bytes) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    const ptdp::ParamInfo& p = param_info(m, name);
    require_non_null(host, "host");
    PTDP_CHECK_ARG(bytes == global_bytes(p), "bytes = " + std::to_string(bytes) + " does not match the " +
                                                 std::to_string(global_bytes(p)) + " bytes of " + p.name + " " +
                                                 p.global_shape.str());
    m.model->set_global(p.name, host);
  });
}

PTDP_API ptdp_status ptdp_model_get_grad(ptdp_model model, const char* name, float* host, size_t bytes) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    const ptdp::ParamInfo& p = param_info(m, name);
    require_room(p, host, bytes);
    m.model->get_global(p.name, true, host);
  });
}

PTDP_API ptdp_status ptdp_pipeline_options_init(ptdp_pipeline_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->scatter_gather = 1;
    options->trace_path = nullptr;
    options->masks = nullptr;
  });
}

PTDP_API ptdp_status ptdp_model_pipeline_forward_backward(ptdp_model model, ptdp_schedule schedule,
                                                          const int32_t* tokens, const int32_t* labels,
                                                          int32_t micro_batch_size, int64_t iteration,
                                                          const ptdp_pipeline_options* options, float* loss) {
  return guard(__func__, [&] {
    const float l = pipeline_forward_backward(model, schedule, tokens, labels, micro_batch_size, iteration, options);
    if (loss) *loss = l;
  });
}

PTDP_API ptdp_status ptdp_model_pipeline_forward_backward_masked(ptdp_model model, ptdp_schedule schedule,
                                                                 const int32_t* tokens, const int32_t* labels,
                                                                 const ptdp_batch_masks* masks,
                                                                 int32_t micro_batch_size, int64_t iteration,
                                                                 const ptdp_pipeline_options* options, float* loss) {
  return guard(__func__, [&] {
    const ptdp_pipeline_options o = ptdp::capi::masked_options(options, masks);
    const float l = pipeline_forward_backward(model, schedule, tokens, labels, micro_batch_size, iteration, &o);
    if (loss) *loss = l;
  });
}

PTDP_API ptdp_status ptdp_model_train_step(ptdp_model model, ptdp_schedule schedule, const int32_t* tokens,
                                           const int32_t* labels, int32_t micro_batch_size, int64_t iteration,
                                           const ptdp_pipeline_options* options, float* loss) {
  return guard(__func__, [&] {  // its own name in messages
    const float l = pipeline_forward_backward(model, schedule, tokens, labels, micro_batch_size, iteration, options);
    if (loss) *loss = l;
  });
}

PTDP_API ptdp_status ptdp_model_evaluate(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                         int32_t micro_batch_size, int32_t num_microbatches,
                                         const ptdp_pipeline_options* options, float* loss) {
  return guard(__func__, [&] {
    *loss = evaluate(model, tokens, labels, micro_batch_size, num_microbatches, options, loss, __func__);
  });
}

PTDP_API ptdp_status ptdp_model_evaluate_masked(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                                const ptdp_batch_masks* masks, int32_t micro_batch_size,
                                                int32_t num_microbatches, float* loss) {
  return guard(__func__, [&] {
    const ptdp_pipeline_options o = ptdp::capi::masked_options(nullptr, masks);
    *loss = evaluate(model, tokens, labels, micro_batch_size, num_microbatches, &o, loss, __func__);
  });
}

PTDP_API ptdp_status ptdp_model_logits(ptdp_model model, const int32_t* tokens, int32_t batch, float* logits,
                                       size_t bytes) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    require_non_null(tokens, "tokens");
    require_non_null(logits, "logits");
    PTDP_CHECK_ARG(batch > 0, "batch must be > 0, got " + std::to_string(batch));
    ptdp::GptModel& g = whole(m, "ptdp_model_logits");
    const ptdp::GptConfig& c = g.config();
    const std::size_t need = static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.seq_length) *
                             static_cast<std::size_t>(c.vocab_size) * sizeof(float);
    PTDP_CHECK_ARG(bytes >= need, "bytes = " + std::to_string(bytes) + " is less than batch * seq_length * vocab_size * 4 = " +
                                      std::to_string(need));
    const std::vector<float> out = g.logits(tokens, batch);
    std::memcpy(logits, out.data(), need);
  });
}

PTDP_API ptdp_status ptdp_generate_options_init(ptdp_generate_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->max_new_tokens = 64;
    options->top_k = 0;
    options->temperature = 1.0f;
    options->seed = 1234;
  });
}

PTDP_API ptdp_status ptdp_model_generate(ptdp_model model, const int32_t* prompt, int32_t prompt_length,
                                         const ptdp_generate_options* options, int32_t* out, int32_t capacity,
                                         int32_t* count) {
  return guard(__func__, [&] {
    ptdp_model_impl& m = live(model, "model");
    require_non_null(prompt, "prompt");
    require_non_null(out, "out");
    require_non_null(count, "count");
    PTDP_CHECK_ARG(prompt_length > 0, "prompt_length must be > 0, got " + std::to_string(prompt_length));
    ptdp_generate_options defaults;
    ptdp_generate_options_init(&defaults);
    const ptdp_generate_options o = ptdp::capi::read_options(options, defaults, "options",
                                                             "ptdp_generate_options_init");
    ptdp::GenerateConfig c;
    c.max_new_tokens = o.max_new_tokens;
    c.top_k = o.top_k;
    c.temperature = o.temperature;
    c.seed = o.seed;
    PTDP_CHECK_ARG(o.no_kv_cache == 0 || o.no_kv_cache == 1,
                   "options->no_kv_cache = " + std::to_string(o.no_kv_cache) + " is not 0 or 1");
    c.use_kv_cache = o.no_kv_cache == 0;
    try {
      c.validate();
    } catch (const ptdp::Error& e) {
      ptdp::throw_error(e.code(), std::string("options->") + e.what());
    }
    PTDP_CHECK_ARG(capacity >= o.max_new_tokens, "capacity = " + std::to_string(capacity) +
                                                     " is less than options->max_new_tokens = " +
                                                     std::to_string(o.max_new_tokens));
    ptdp::GptModel& g = whole(m, "ptdp_model_generate");
    const std::vector<int32_t> tokens = ptdp::generate(g, std::vector<int32_t>(prompt, prompt + prompt_length), c);
    std::copy(tokens.begin(), tokens.end(), out);
    *count = static_cast<int32_t>(tokens.size());
  });
}

}  // extern "C"
