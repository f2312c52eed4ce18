// ptdp-train's flags through the C API: a parsed command line (core/args/train_args.h) and the
// option structs of the other sections it implies.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/args/train_args.h"
#include "io/json_text.h"

static_assert(PTDP_DATA_MOCK == static_cast<int>(ptdp::DataSource::Mock));
static_assert(PTDP_DATA_INDEXED == static_cast<int>(ptdp::DataSource::Indexed));
static_assert(PTDP_DATA_TEXT == static_cast<int>(ptdp::DataSource::Text));
static_assert(PTDP_SCHEDULE_GPIPE == static_cast<int>(ptdp::ScheduleKind::GPipe));
static_assert(PTDP_SCHEDULE_1F1B == static_cast<int>(ptdp::ScheduleKind::OneFOneB));
static_assert(PTDP_SCHEDULE_INTERLEAVED_1F1B == static_cast<int>(ptdp::ScheduleKind::Interleaved1F1B));
static_assert(PTDP_SCHEDULE_ZB_H1 == static_cast<int>(ptdp::ScheduleKind::ZeroBubbleH1));
// The enums' numbers are checked against the core's where they are defined (model_api.cpp,
// optimizer_api.cpp).

namespace {

using ptdp::capi::copy_text;
using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

/// NULL for a flag that was not given.
const char* text_or_null(const std::string& s) { return s.empty() ? nullptr : s.c_str(); }

/// Another section's *_options_init(), which cannot fail on a non-NULL pointer.
void init_or_throw(ptdp_status status, const char* what) {
  if (status != PTDP_SUCCESS) ptdp::throw_error(ptdp::ErrorCode::Internal, std::string(what) + " failed");
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_train_config_parse(int32_t argc, const char* const* argv, ptdp_train_config* out) {
  return guard(__func__, [&] {
    PTDP_CHECK_ARG(argc >= 1, "argc = " + std::to_string(argc) + " is not >= 1 (argv[0] is the program name)");
    require_non_null(argv, "argv");
    require_non_null(out, "out");
    std::vector<std::string> args;
    args.reserve(static_cast<std::size_t>(argc));
    for (int32_t i = 1; i < argc; ++i) {
      std::string name = "argv[";  // built piecewise: GCC 12 misreports "literal" + string as overlapping
      name += std::to_string(i);
      name += ']';
      require_non_null(argv[i], name.c_str());
      args.emplace_back(argv[i]);
    }
    auto h = std::make_unique<ptdp_train_config_impl>();
    h->args = ptdp::parse_train_args(args);
    *out = h.release();
  });
}

PTDP_API ptdp_status ptdp_train_config_destroy(ptdp_train_config config) {
  return guard(__func__, [&] {
    if (config == nullptr) return;
    live(config, "config");
    ptdp::capi::release(config);
  });
}

PTDP_API ptdp_status ptdp_train_config_help(const char* program, char* buffer, size_t capacity, size_t* length) {
  return guard(__func__, [&] {
    require_non_null(length, "length");
    copy_text(ptdp::train_args_help(program ? program : "ptdp-train"), buffer, capacity, length);
  });
}

PTDP_API ptdp_status ptdp_train_config_to_json(ptdp_train_config config, char* buffer, size_t capacity,
                                               size_t* length) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(length, "length");
    // Paths need not be UTF-8; JSON text must be: bytes that are not UTF-8 become U+FFFD.
    copy_text(ptdp::json_text(ptdp::train_args_to_json(c.args)), buffer,
              capacity, length);
  });
}

PTDP_API ptdp_status ptdp_train_config_gpt_options(ptdp_train_config config, ptdp_gpt_options* options) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(options, "options");
    ptdp::capi::gpt_options(ptdp::to_gpt_config(c.args), options);
  });
}

PTDP_API ptdp_status ptdp_train_config_optimizer_options(ptdp_train_config config, ptdp_optimizer_options* options) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(options, "options");
    ptdp::capi::optimizer_options(ptdp::to_optimizer_config(c.args), options);
  });
}

PTDP_API ptdp_status ptdp_train_config_parallel_options(ptdp_train_config config, ptdp_parallel_options* options) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(options, "options");
    ptdp_parallel_options o;
    init_or_throw(ptdp_parallel_options_init(&o), "ptdp_parallel_options_init");
    o.tensor_model_parallel_size = c.args.tensor_model_parallel_size;
    o.pipeline_model_parallel_size = c.args.pipeline_model_parallel_size;
    o.virtual_pipeline_model_parallel_size = ptdp::virtual_pipeline_size(c.args);
    o.decoder_first_pipeline_num_layers = c.args.decoder_first_pipeline_num_layers.value_or(0);
    o.decoder_last_pipeline_num_layers = c.args.decoder_last_pipeline_num_layers.value_or(0);
    o.sequence_parallel = c.args.sequence_parallel ? 1 : 0;
    o.pipeline_model_parallel_layout =
        c.args.pipeline_model_parallel_layout.empty() ? nullptr : c.args.pipeline_model_parallel_layout.c_str();
    o.context_parallel_size = c.args.context_parallel_size;
    o.pipeline_chunk_placement = static_cast<int>(ptdp::placement_of(ptdp::schedule_kind(c.args)));
    o.expert_model_parallel_size = c.args.expert_model_parallel_size;
    o.expert_tensor_parallel_size = c.args.expert_tensor_parallel_size.value_or(0);
    *options = o;
  });
}

PTDP_API ptdp_status ptdp_train_config_runtime_options(ptdp_train_config config, ptdp_runtime_options* options) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(options, "options");
    ptdp_runtime_options o;
    init_or_throw(ptdp_runtime_options_init(&o), "ptdp_runtime_options_init");  // MPI, NCCL, checks: defaults
    o.comm_timeout_s = c.args.comm_timeout.value_or(0);  // 0: PTDP_COMM_TIMEOUT_S, else 300
    *options = o;
  });
}

PTDP_API ptdp_status ptdp_train_config_settings(ptdp_train_config config, ptdp_train_settings* settings) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(settings, "settings");
    const ptdp::TrainArgs& a = c.args;
    ptdp_train_settings s{};
    s.struct_size = sizeof(ptdp_train_settings);
    s.help = a.help ? 1 : 0;
    s.micro_batch_size = a.micro_batch_size;
    s.global_batch_size = a.global_batch_size;
    s.train_iters = a.train_iters;
    s.exit_interval = a.exit_interval;
    s.log_interval = a.log_interval;
    s.save_interval = a.save_interval;
    s.eval_interval = a.eval_interval;
    s.eval_iters = a.eval_iters;
    s.pipeline_schedule = static_cast<ptdp_schedule_kind>(ptdp::schedule_kind(a));
    s.data_source = static_cast<ptdp_data_source>(ptdp::data_source(a));
    s.data_path = text_or_null(a.data_path);
    s.split = a.split.c_str();
    s.text_file = text_or_null(a.text_file);
    s.tokenizer_type = text_or_null(a.tokenizer_type);
    s.save = text_or_null(a.save);
    s.load = text_or_null(a.load);
    s.log_json = text_or_null(a.log_json);
    s.profile_trace = text_or_null(a.profile_trace);
    s.device = a.device.c_str();
    s.fp16 = a.fp16 ? 1 : 0;
    s.bf16 = a.bf16 ? 1 : 0;
    s.seed = a.seed;
    s.check_for_nan_in_loss_and_grad = a.check_for_nan_in_loss_and_grad ? 1 : 0;
    s.max_restarts = a.max_restarts;
    s.max_skipped_iterations = a.max_skipped_iterations;
    s.launcher = text_or_null(a.launcher);
    *settings = s;
  });
}

PTDP_API ptdp_status ptdp_train_config_data_options(ptdp_train_config config, ptdp_gpt_data_options* options) {
  return guard(__func__, [&] {
    const ptdp_train_config_impl& c = live(config, "config");
    require_non_null(options, "options");
    const ptdp::TrainArgs& a = c.args;
    const std::array<int64_t, 3> samples = ptdp::train_num_samples(a);  // may throw: options stay unchanged
    ptdp_gpt_data_options o{};
    o.struct_size = sizeof(ptdp_gpt_data_options);
    o.source = static_cast<ptdp_data_source>(ptdp::data_source(a));
    o.path = o.source == PTDP_DATA_INDEXED ? a.data_path.c_str()
             : o.source == PTDP_DATA_TEXT  ? a.text_file.c_str()
                                           : nullptr;
    o.split = a.split.c_str();
    o.seq_length = a.seq_length;
    o.vocab_size = a.vocab_size;
    o.seed = a.seed;
    for (int i = 0; i < 3; ++i) o.num_samples[i] = samples[static_cast<std::size_t>(i)];
    o.train_data_path = text_or_null(a.train_data_path);  // Megatron's per-split lists
    o.valid_data_path = text_or_null(a.valid_data_path);
    o.test_data_path = text_or_null(a.test_data_path);
    *options = o;
  });
}

}  // extern "C"
