// The old versions of the entry points whose caller could not tell the library how big its struct
// is: the functions that fill a struct without reading a struct_size first (the *_init functions,
// and the getters whose struct the caller does not initialise), for each struct that grew after
// a release that bound them. A program's references carry the symbol version its release's
// version script gave them (capi/ptdp.map): PTDP_0 for every function of 0.1.0, and for most of
// 0.2.0's and 0.3.0's; PTDP_0.3 for the few whose structs 0.2.0 had grown. Each definition here
// is that version (`.symver NAME@PTDP_x` at the end; their own names do not start with ptdp_, so
// the version script keeps them local); the current definitions are the default version, which
// new programs and dlsym() from the bindings get.
//
// Every old version runs the current function into structs of today's size, then hands the
// caller the prefix of each that the oldest release bound to that version had (abi_sizes.h's
// table of released sizes), with struct_size set to it, and nothing past it. When the prefix
// alone, read back as the library reads a struct of that size (the fields it lacks at their
// defaults), would mean something else than the whole struct (a Llama-family model, a
// --max-restarts flag, a cluster with GEMM tables of its own), it refuses with
// InvalidArgument naming the field and writes nothing: such a program cannot describe what it
// would be handed. Where a function's signature changed, its old version keeps the old one.
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>

#include "capi/src/api_guard.h"
#include "capi/src/convert.h"

namespace {

using ptdp::capi::Release;
using ptdp::capi::released_size;

// The symbol versions that old programs are bound to, and the releases that bound them.
struct Ptdp0 {
  static constexpr Release oldest = Release::v0_1_0;
  static constexpr const char* releases = "0.1.0 to 0.3.0";
};
struct Ptdp0_3 {
  static constexpr Release oldest = Release::v0_2_0;
  static constexpr const char* releases = "0.2.0 or 0.3.0";
};
// PTDP_0.3 as 0.3.0's last header bound it for the functions it added to that node (the
// parallel options' and the cluster's), whose structs had 0.3.0-last's sizes.
struct Ptdp0_3Last {
  static constexpr Release oldest = Release::v0_3_0_last;
  static constexpr const char* releases = "0.3.0 (its last header)";
};

// What the library reads for the fields a struct of an older size lacks.
template <typename T>
T defaults_for(ptdp_status (*init)(T*)) {
  T d{};
  if (init(&d) != PTDP_SUCCESS) ptdp::throw_error(ptdp::ErrorCode::Internal, "an *_options_init() failed");
  return d;
}
ptdp_gpt_options defaults(const ptdp_gpt_options*) { return defaults_for(ptdp_gpt_options_init); }
ptdp_plan_options defaults(const ptdp_plan_options*) { return defaults_for(ptdp_plan_options_init); }
ptdp_generate_options defaults(const ptdp_generate_options*) { return defaults_for(ptdp_generate_options_init); }
ptdp_parallel_options defaults(const ptdp_parallel_options*) { return defaults_for(ptdp_parallel_options_init); }
ptdp_cluster defaults(const ptdp_cluster*) { return defaults_for(ptdp_cluster_init); }
ptdp_runtime_options defaults(const ptdp_runtime_options*) { return defaults_for(ptdp_runtime_options_init); }
ptdp_gpt_data_options defaults(const ptdp_gpt_data_options*) { return defaults_for(ptdp_gpt_data_options_init); }
ptdp_optimizer_options defaults(const ptdp_optimizer_options*) { return defaults_for(ptdp_optimizer_options_init); }
ptdp_schedule_costs defaults(const ptdp_schedule_costs*) { return defaults_for(ptdp_schedule_costs_init); }
ptdp_pipeline_options defaults(const ptdp_pipeline_options*) { return defaults_for(ptdp_pipeline_options_init); }
// The settings have no init function: the settings of a command line without flags.
ptdp_train_settings defaults(const ptdp_train_settings*) {
  const char* const argv[] = {"ptdp-train"};
  ptdp_train_config config = nullptr;
  ptdp_train_settings d{};
  const bool ok = ptdp_train_config_parse(1, argv, &config) == PTDP_SUCCESS &&
                  ptdp_train_config_settings(config, &d) == PTDP_SUCCESS;
  ptdp_train_config_destroy(config);
  if (!ok) ptdp::throw_error(ptdp::ErrorCode::Internal, "the settings of an empty command line failed");
  return d;
}

// A struct as the library reads it, written back out: equal tails of two normalised structs mean
// the same thing (0 and 10000 are the same RoPE base, a cluster's GEMM tables are its preset's).
// The structs the library does not read back, or reads as they are, stand for themselves.
ptdp_gpt_options normalized(const ptdp_gpt_options& o) {
  ptdp_gpt_options out{};
  ptdp::capi::gpt_options(ptdp::capi::gpt_config(&o), &out);
  return out;
}
ptdp_plan_options normalized(const ptdp_plan_options& o) {
  ptdp_plan_options model = o;
  if (model.global_batch_size <= 0) model.global_batch_size = 1;  // unset before --global-batch-size; not compared
  ptdp_plan_options out{};
  ptdp::capi::plan_options_to_c(ptdp::capi::plan_request(&model), &out);
  return out;
}
ptdp_parallel_options normalized(const ptdp_parallel_options& o) {
  const ptdp::ParallelConfig c = ptdp::capi::parallel_config(&o);
  ptdp_parallel_options out{};
  out.struct_size = sizeof out;
  out.tensor_model_parallel_size = c.tensor;
  out.pipeline_model_parallel_size = c.pipeline;
  out.virtual_pipeline_model_parallel_size = c.virtual_stages;
  out.decoder_first_pipeline_num_layers = c.first_stage_layers;
  out.decoder_last_pipeline_num_layers = c.last_stage_layers;
  out.context_parallel_size = c.context;
  out.expert_model_parallel_size = c.expert_model;
  out.expert_tensor_parallel_size = c.expert_tensor;
  return out;
}
ptdp_cluster normalized(const ptdp_cluster& o) {
  ptdp_cluster out{};
  ptdp::capi::cluster_to_c(ptdp::capi::cluster_from_c(&o), &out);
  return out;
}
template <typename T>
const T& normalized(const T& o) {
  return o;
}

// Whether an old struct's prefix must carry everything the whole struct says. Not for the
// structs only an init function fills (the tail holds the defaults the library reads for a
// shorter struct), nor for the runtime options, whose only later field, cpu_threads, no getter
// sets (ptdp-train has no thread flag), and whose tail ends in padding.
template <typename T>
constexpr bool kChecked = !std::is_same_v<T, ptdp_generate_options> && !std::is_same_v<T, ptdp_runtime_options>;

// Throws, naming `what` and the first differing byte, unless a struct holding only `full`'s first
// `size` bytes reads back as `full` does.
template <typename T, typename Version>
void require_prefix_holds(const T& full, std::size_t size, const char* what) {
  T back = defaults(static_cast<const T*>(nullptr));
  std::memcpy(static_cast<void*>(&back), &full, size);
  back.struct_size = size;
  const T a = normalized(full), b = normalized(back);
  const auto* x = reinterpret_cast<const unsigned char*>(&a);
  const auto* y = reinterpret_cast<const unsigned char*>(&b);
  for (std::size_t i = size; i < sizeof(T); ++i) {
    PTDP_CHECK_ARG(x[i] == y[i], std::string(what) + " sets " + ptdp::capi::FirstPublished<T>::name +
                                     " fields past the " + std::to_string(size) +
                                     " bytes of a program built against ptdp " + Version::releases +
                                     " (the first at byte " + std::to_string(i) +
                                     "); rebuild the program against this version's ptdp.h");
  }
}

template <typename T>
using Fills = std::void_t<decltype(ptdp::capi::ReleasedSizes<T>::at)>;

// One argument of an old version on its way to the current function: passed through as it is...
template <typename Version, typename P, typename = void>
class Slot {
 public:
  explicit Slot(P arg) : arg_(arg) {}
  P pass() { return arg_; }
  void check(const char*) const {}
  void hand_out() const {}

 private:
  P arg_;
};

// ...unless it points to a struct that grew: the current function fills one of today's size,
// and the caller gets the prefix its release had.
template <typename Version, typename T>
class Slot<Version, T*, Fills<T>> {
 public:
  static constexpr std::size_t kOldSize = released_size<T>(Version::oldest);
  explicit Slot(T* user) : user_(user) {}
  T* pass() { return user_ ? &full_ : nullptr; }
  void check(const char* what) const {
    if (user_ && what && kChecked<T>) require_prefix_holds<T, Version>(full_, kOldSize, what);
  }
  void hand_out() const {
    if (!user_) return;
    T prefix = full_;
    prefix.struct_size = kOldSize;
    std::memcpy(static_cast<void*>(user_), &prefix, kOldSize);
  }

 private:
  T* user_;
  T full_{};
};

// ...and the other outputs of these functions (an iteration, ptdp-plan's switches) wait for the
// structs' checks too, so that a refusal writes nothing.
template <typename T>
using Buffered = std::enable_if_t<!std::is_const_v<T> && (std::is_arithmetic_v<T> || std::is_same_v<T, ptdp_plan_cli>)>;
template <typename Version, typename T>
class Slot<Version, T*, Buffered<T>> {
 public:
  explicit Slot(T* user) : user_(user) {}
  T* pass() { return user_ ? &value_ : nullptr; }
  void check(const char*) const {}
  void hand_out() const {
    if (user_) *user_ = value_;
  }

 private:
  T* user_;
  T value_{};
};

/// The old version of `current` (named `name` in messages; `what` names what it hands out, NULL
/// for the defaults of an init function, which the library reads for a shorter struct anyway):
/// calls it with today's structs, then checks every prefix before writing any.
template <typename Version, typename... Params>
ptdp_status old_version(ptdp_status (*current)(Params...), const char* name, const char* what,
                        std::type_identity_t<Params>... args) {
  std::tuple<Slot<Version, Params>...> slots{Slot<Version, Params>(args)...};
  const ptdp_status status = std::apply([&](auto&... s) { return current(s.pass()...); }, slots);
  if (status != PTDP_SUCCESS) return status;
  return ptdp::capi::guard(name, [&] {
    std::apply([&](const auto&... s) { (s.check(what), ...); }, slots);
    std::apply([&](const auto&... s) { (s.hand_out(), ...); }, slots);
  });
}

}  // namespace

extern "C" {

// ---- PTDP_0: the structs of 0.1.0 (0.2.0's and 0.3.0's too, for the functions they left there)

PTDP_API ptdp_status compat_PTDP_0_gpt_options_init(ptdp_gpt_options* options) {
  return old_version<Ptdp0>(ptdp_gpt_options_init, "ptdp_gpt_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_generate_options_init(ptdp_generate_options* options) {
  return old_version<Ptdp0>(ptdp_generate_options_init, "ptdp_generate_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_plan_options_init(ptdp_plan_options* options) {
  return old_version<Ptdp0>(ptdp_plan_options_init, "ptdp_plan_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_parallel_options_init(ptdp_parallel_options* options) {
  return old_version<Ptdp0>(ptdp_parallel_options_init, "ptdp_parallel_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_runtime_options_init(ptdp_runtime_options* options) {
  return old_version<Ptdp0>(ptdp_runtime_options_init, "ptdp_runtime_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_gpt_data_options_init(ptdp_gpt_data_options* options) {
  return old_version<Ptdp0>(ptdp_gpt_data_options_init, "ptdp_gpt_data_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_optimizer_options_init(ptdp_optimizer_options* options) {
  return old_version<Ptdp0>(ptdp_optimizer_options_init, "ptdp_optimizer_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_schedule_costs_init(ptdp_schedule_costs* costs) {
  return old_version<Ptdp0>(ptdp_schedule_costs_init, "ptdp_schedule_costs_init", nullptr, costs);
}
PTDP_API ptdp_status compat_PTDP_0_pipeline_options_init(ptdp_pipeline_options* options) {
  return old_version<Ptdp0>(ptdp_pipeline_options_init, "ptdp_pipeline_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_cluster_init(ptdp_cluster* cluster) {
  return old_version<Ptdp0>(ptdp_cluster_init, "ptdp_cluster_init", nullptr, cluster);
}
PTDP_API ptdp_status compat_PTDP_0_cluster_preset(const char* name, ptdp_cluster* cluster) {
  return old_version<Ptdp0>(ptdp_cluster_preset, "ptdp_cluster_preset", "the preset", name, cluster);
}
PTDP_API ptdp_status compat_PTDP_0_cluster_load(const char* path, ptdp_cluster* cluster) {
  return old_version<Ptdp0>(ptdp_cluster_load, "ptdp_cluster_load", "the cluster file", path, cluster);
}
PTDP_API ptdp_status compat_PTDP_0_train_config_settings(ptdp_train_config config, ptdp_train_settings* settings) {
  return old_version<Ptdp0>(ptdp_train_config_settings, "ptdp_train_config_settings", "the configuration's settings",
                            config, settings);
}
PTDP_API ptdp_status compat_PTDP_0_train_config_gpt_options(ptdp_train_config config, ptdp_gpt_options* options) {
  return old_version<Ptdp0>(ptdp_train_config_gpt_options, "ptdp_train_config_gpt_options", "the configuration's model",
                            config, options);
}
PTDP_API ptdp_status compat_PTDP_0_train_config_optimizer_options(ptdp_train_config config,
                                                                  ptdp_optimizer_options* options) {
  return old_version<Ptdp0>(ptdp_train_config_optimizer_options, "ptdp_train_config_optimizer_options",
                            "the configuration's optimizer", config, options);
}
PTDP_API ptdp_status compat_PTDP_0_train_config_parallel_options(ptdp_train_config config,
                                                                 ptdp_parallel_options* options) {
  return old_version<Ptdp0>(ptdp_train_config_parallel_options, "ptdp_train_config_parallel_options",
                            "the configuration's pipeline layout", config, options);
}
PTDP_API ptdp_status compat_PTDP_0_train_config_runtime_options(ptdp_train_config config,
                                                                ptdp_runtime_options* options) {
  return old_version<Ptdp0>(ptdp_train_config_runtime_options, "ptdp_train_config_runtime_options",
                            "the configuration's runtime", config, options);
}
PTDP_API ptdp_status compat_PTDP_0_train_config_data_options(ptdp_train_config config, ptdp_gpt_data_options* options) {
  return old_version<Ptdp0>(ptdp_train_config_data_options, "ptdp_train_config_data_options",
                            "the configuration's data", config, options);
}
PTDP_API ptdp_status compat_PTDP_0_checkpoint_read_options(const char* directory, ptdp_gpt_options* options,
                                                           int64_t* iteration) {
  return old_version<Ptdp0>(ptdp_checkpoint_read_options, "ptdp_checkpoint_read_options", "the checkpoint's model",
                            directory, options, iteration);
}
PTDP_API ptdp_status compat_PTDP_0_plan_parse_args(int32_t argc, const char* const* argv, ptdp_plan_options* options,
                                                   ptdp_cluster* cluster, ptdp_plan_cli* cli) {
  return old_version<Ptdp0>(ptdp_plan_parse_args, "ptdp_plan_parse_args", "the command line", argc, argv, options,
                            cluster, cli);
}

// ---- PTDP_0: the signatures of 0.1.0 to 0.3.0 of the calls that took options in 0.4.0

PTDP_API ptdp_status compat_PTDP_0_model_forward_backward(ptdp_model model, const int32_t* tokens,
                                                          const int32_t* labels, int32_t micro_batch_size,
                                                          int64_t iteration, int64_t microbatch, float grad_scale,
                                                          float* loss) {
  return ptdp_model_forward_backward(model, tokens, labels, micro_batch_size, iteration, microbatch, grad_scale,
                                     nullptr, loss);
}
PTDP_API ptdp_status compat_PTDP_0_model_forward(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                                 int32_t micro_batch_size, int64_t iteration, int64_t microbatch,
                                                 int32_t training, float* loss) {
  return ptdp_model_forward(model, tokens, labels, micro_batch_size, iteration, microbatch, training, nullptr, loss);
}
PTDP_API ptdp_status compat_PTDP_0_model_evaluate(ptdp_model model, const int32_t* tokens, const int32_t* labels,
                                                  int32_t micro_batch_size, int32_t num_microbatches, float* loss) {
  return ptdp_model_evaluate(model, tokens, labels, micro_batch_size, num_microbatches, nullptr, loss);
}

// ---- PTDP_0.3: the structs of 0.2.0 (0ab8855^) and 0.3.0 (0ab8855) for the functions they
// bound there, which grew again under 0.3.0's number

PTDP_API ptdp_status compat_PTDP_0_3_plan_options_init(ptdp_plan_options* options) {
  return old_version<Ptdp0_3>(ptdp_plan_options_init, "ptdp_plan_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_3_plan_parse_args(int32_t argc, const char* const* argv, ptdp_plan_options* options,
                                                     ptdp_cluster* cluster, ptdp_plan_cli* cli) {
  return old_version<Ptdp0_3>(ptdp_plan_parse_args, "ptdp_plan_parse_args", "the command line", argc, argv, options,
                              cluster, cli);
}

// ---- PTDP_0.3: the structs of 0.2.0 to 0.3.0's last header for the functions whose struct
// grew again after it (the model options and the parallel options took the MoE fields)

PTDP_API ptdp_status compat_PTDP_0_3_gpt_options_init(ptdp_gpt_options* options) {
  return old_version<Ptdp0_3>(ptdp_gpt_options_init, "ptdp_gpt_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_3_train_config_gpt_options(ptdp_train_config config, ptdp_gpt_options* options) {
  return old_version<Ptdp0_3>(ptdp_train_config_gpt_options, "ptdp_train_config_gpt_options",
                              "the configuration's model", config, options);
}
PTDP_API ptdp_status compat_PTDP_0_3_checkpoint_read_options(const char* directory, ptdp_gpt_options* options,
                                                             int64_t* iteration) {
  return old_version<Ptdp0_3>(ptdp_checkpoint_read_options, "ptdp_checkpoint_read_options", "the checkpoint's model",
                              directory, options, iteration);
}
PTDP_API ptdp_status compat_PTDP_0_3_parallel_options_init(ptdp_parallel_options* options) {
  return old_version<Ptdp0_3Last>(ptdp_parallel_options_init, "ptdp_parallel_options_init", nullptr, options);
}
PTDP_API ptdp_status compat_PTDP_0_3_train_config_parallel_options(ptdp_train_config config,
                                                                   ptdp_parallel_options* options) {
  return old_version<Ptdp0_3Last>(ptdp_train_config_parallel_options, "ptdp_train_config_parallel_options",
                                  "the configuration's pipeline layout", config, options);
}

}  // extern "C"

// Bind each definition above to its public name at its version (see capi/ptdp.map).
__asm__(".symver compat_PTDP_0_gpt_options_init,ptdp_gpt_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_generate_options_init,ptdp_generate_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_plan_options_init,ptdp_plan_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_parallel_options_init,ptdp_parallel_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_runtime_options_init,ptdp_runtime_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_gpt_data_options_init,ptdp_gpt_data_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_optimizer_options_init,ptdp_optimizer_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_schedule_costs_init,ptdp_schedule_costs_init@PTDP_0");
__asm__(".symver compat_PTDP_0_pipeline_options_init,ptdp_pipeline_options_init@PTDP_0");
__asm__(".symver compat_PTDP_0_cluster_init,ptdp_cluster_init@PTDP_0");
__asm__(".symver compat_PTDP_0_cluster_preset,ptdp_cluster_preset@PTDP_0");
__asm__(".symver compat_PTDP_0_cluster_load,ptdp_cluster_load@PTDP_0");
__asm__(".symver compat_PTDP_0_train_config_settings,ptdp_train_config_settings@PTDP_0");
__asm__(".symver compat_PTDP_0_train_config_gpt_options,ptdp_train_config_gpt_options@PTDP_0");
__asm__(".symver compat_PTDP_0_train_config_optimizer_options,ptdp_train_config_optimizer_options@PTDP_0");
__asm__(".symver compat_PTDP_0_train_config_parallel_options,ptdp_train_config_parallel_options@PTDP_0");
__asm__(".symver compat_PTDP_0_train_config_runtime_options,ptdp_train_config_runtime_options@PTDP_0");
__asm__(".symver compat_PTDP_0_train_config_data_options,ptdp_train_config_data_options@PTDP_0");
__asm__(".symver compat_PTDP_0_checkpoint_read_options,ptdp_checkpoint_read_options@PTDP_0");
__asm__(".symver compat_PTDP_0_plan_parse_args,ptdp_plan_parse_args@PTDP_0");
__asm__(".symver compat_PTDP_0_model_forward_backward,ptdp_model_forward_backward@PTDP_0");
__asm__(".symver compat_PTDP_0_model_forward,ptdp_model_forward@PTDP_0");
__asm__(".symver compat_PTDP_0_model_evaluate,ptdp_model_evaluate@PTDP_0");
__asm__(".symver compat_PTDP_0_3_plan_options_init,ptdp_plan_options_init@PTDP_0.3");
__asm__(".symver compat_PTDP_0_3_plan_parse_args,ptdp_plan_parse_args@PTDP_0.3");
__asm__(".symver compat_PTDP_0_3_gpt_options_init,ptdp_gpt_options_init@PTDP_0.3");
__asm__(".symver compat_PTDP_0_3_train_config_gpt_options,ptdp_train_config_gpt_options@PTDP_0.3");
__asm__(".symver compat_PTDP_0_3_checkpoint_read_options,ptdp_checkpoint_read_options@PTDP_0.3");
__asm__(".symver compat_PTDP_0_3_parallel_options_init,ptdp_parallel_options_init@PTDP_0.3");
__asm__(".symver compat_PTDP_0_3_train_config_parallel_options,ptdp_train_config_parallel_options@PTDP_0.3");
