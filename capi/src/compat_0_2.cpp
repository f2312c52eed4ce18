// The 0.2.0 versions of the entry points that fill a struct which has grown since: a program
// built against 0.2.0 passes a ptdp_gpt_options of 88 bytes, a ptdp_plan_options of 104, a
// ptdp_generate_options of 32, a ptdp_parallel_options of 24, a ptdp_cluster of 128 and a
// ptdp_runtime_options of 32 to functions that do not read a
// struct_size first, so the current
// versions would write past its end. Its references are bound to version PTDP_0 (the version
// node of every 0.2.0 symbol, capi/ptdp.map); these definitions are that version
// (`.symver NAME@PTDP_0`; their own names do not start with ptdp_, so the version script keeps
// them local), while the current ones are the default version PTDP_0.3 that new
// programs, and dlsym() from the bindings, get. Each runs the current function into a struct of
// today's size, then hands the caller its 0.2.0 prefix with struct_size set to it, and refuses
// (InvalidArgument, nothing written) a value that the prefix cannot carry: a model with
// options added after 0.2.0 (a Llama-family checkpoint, a --model-preset, uneven pipeline
// stages), which such a program cannot describe.
//
// Programs built against 0.1 (before device, precision and attention were added to
// ptdp_gpt_options) also bind to PTDP_0 and get 0.2.0's 88 bytes: that release wrote them too.
#include <cstring>

#include "capi/src/api_guard.h"
#include "capi/src/convert.h"

namespace {

using ptdp::capi::SizeAt0_2;

// A struct as the library reads it, written back out: equal tails of two normalised structs
// mean the same model (0 and 10000 are the same RoPE base, for example).
ptdp_gpt_options normalized(const ptdp_gpt_options& o) {
  ptdp_gpt_options out{};
  ptdp::capi::gpt_options(ptdp::capi::gpt_config(&o), &out);
  return out;
}
ptdp_plan_options normalized(const ptdp_plan_options& o) {
  ptdp_plan_options out{};
  ptdp::capi::plan_options_to_c(ptdp::capi::plan_request(&o), &out);
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
  return out;
}

// Copies `full`'s 0.2.0 prefix to `user`, struct_size set to it, when that prefix alone (the
// rest zero, as an old program's struct reads) describes the same model; else refuses naming
// `what`, writing nothing.
template <typename Options>
void hand_out_prefix(const Options& full, Options* user, const char* what) {
  constexpr std::size_t old_size = SizeAt0_2<Options>::size;
  Options prefix = full;
  std::memset(reinterpret_cast<unsigned char*>(&prefix) + old_size, 0, sizeof(Options) - old_size);
  prefix.struct_size = old_size;
  const Options a = normalized(full), b = normalized(prefix);
  PTDP_CHECK_ARG(std::memcmp(reinterpret_cast<const unsigned char*>(&a) + old_size,
                             reinterpret_cast<const unsigned char*>(&b) + old_size, sizeof(Options) - old_size) == 0,
                 std::string(what) + " uses options added after ptdp 0.2.0 (e.g. the Llama family's), which the " +
                     std::to_string(old_size) + "-byte struct of a program built against 0.2.0 cannot hold; " +
                     "rebuild the program against this version's ptdp.h");
  std::memcpy(static_cast<void*>(user), &prefix, old_size);
}

// An init function's struct: nothing to compare (the defaults are the 0.2.0 ones).
template <typename Options>
void hand_out_defaults(const Options& full, Options* user) {
  constexpr std::size_t old_size = SizeAt0_2<Options>::size;
  std::memcpy(static_cast<void*>(user), &full, old_size);
  user->struct_size = old_size;
}

template <typename Options>
Options fresh(ptdp_status (*init)(Options*)) {
  Options o{};
  init(&o);
  return o;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status compat_ptdp_0_2_gpt_options_init(ptdp_gpt_options* options) {
  return ptdp::capi::guard("ptdp_gpt_options_init", [&] {
    ptdp::capi::require_non_null(options, "options");
    const ptdp_gpt_options full = fresh(ptdp_gpt_options_init);
    hand_out_defaults(full, options);
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_generate_options_init(ptdp_generate_options* options) {
  return ptdp::capi::guard("ptdp_generate_options_init", [&] {
    ptdp::capi::require_non_null(options, "options");
    const ptdp_generate_options full = fresh(ptdp_generate_options_init);
    hand_out_defaults(full, options);
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_plan_options_init(ptdp_plan_options* options) {
  return ptdp::capi::guard("ptdp_plan_options_init", [&] {
    ptdp::capi::require_non_null(options, "options");
    const ptdp_plan_options full = fresh(ptdp_plan_options_init);
    hand_out_defaults(full, options);
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_parallel_options_init(ptdp_parallel_options* options) {
  return ptdp::capi::guard("ptdp_parallel_options_init", [&] {
    ptdp::capi::require_non_null(options, "options");
    const ptdp_parallel_options full = fresh(ptdp_parallel_options_init);
    hand_out_defaults(full, options);
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_train_config_parallel_options(ptdp_train_config config,
                                                                   ptdp_parallel_options* options) {
  ptdp_parallel_options full{};
  const ptdp_status st = ptdp_train_config_parallel_options(config, &full);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_train_config_parallel_options", [&] {
    ptdp::capi::require_non_null(options, "options");
    hand_out_prefix(full, options, "the configuration's pipeline layout");
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_train_config_gpt_options(ptdp_train_config config, ptdp_gpt_options* options) {
  ptdp_gpt_options full{};
  const ptdp_status st = ptdp_train_config_gpt_options(config, &full);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_train_config_gpt_options", [&] {
    ptdp::capi::require_non_null(options, "options");
    hand_out_prefix(full, options, "the configuration's model");
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_checkpoint_read_options(const char* directory, ptdp_gpt_options* options,
                                                             int64_t* iteration) {
  ptdp_gpt_options full{};
  int64_t it = 0;
  const ptdp_status st = ptdp_checkpoint_read_options(directory, &full, &it);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_checkpoint_read_options", [&] {
    ptdp::capi::require_non_null(options, "options");
    hand_out_prefix(full, options, "the checkpoint's model");
    if (iteration) *iteration = it;
  });
}

PTDP_API ptdp_status compat_ptdp_0_2_plan_parse_args(int32_t argc, const char* const* argv, ptdp_plan_options* options,
                                                     ptdp_cluster* cluster, ptdp_plan_cli* cli) {
  ptdp_plan_options full{};
  ptdp_cluster full_cluster{};
  const ptdp_status st =
      ptdp_plan_parse_args(argc, argv, options ? &full : nullptr, cluster ? &full_cluster : nullptr, cli);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_plan_parse_args", [&] {
    if (options) hand_out_prefix(full, options, "the command line's model");
    // The 0.2.0 cluster ends before the GEMM tables (read back from the preset it names).
    if (cluster) hand_out_defaults(full_cluster, cluster);
  });
}

// ptdp_cluster grew the GEMM tables after 0.2.0: its 0.2.0 fillers write the 128-byte prefix
// (the library reads the rest of a 0.2.0 program's cluster from the preset it names, or
// ptdp_cluster_init()'s defaults).
PTDP_API ptdp_status compat_ptdp_0_2_cluster_init(ptdp_cluster* cluster) {
  ptdp_cluster full{};
  const ptdp_status st = ptdp_cluster_init(cluster ? &full : nullptr);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_cluster_init", [&] { hand_out_defaults(full, cluster); });
}

PTDP_API ptdp_status compat_ptdp_0_2_cluster_preset(const char* name, ptdp_cluster* cluster) {
  ptdp_cluster full{};
  const ptdp_status st = ptdp_cluster_preset(name, cluster ? &full : nullptr);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_cluster_preset", [&] { hand_out_defaults(full, cluster); });
}

PTDP_API ptdp_status compat_ptdp_0_2_cluster_load(const char* path, ptdp_cluster* cluster) {
  ptdp_cluster full{};
  const ptdp_status st = ptdp_cluster_load(path, cluster ? &full : nullptr);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_cluster_load", [&] { hand_out_defaults(full, cluster); });
}

// ptdp_runtime_options grew cpu_threads after 0.2.0: its 0.2.0 fillers write the 32-byte
// prefix (the library reads cpu_threads of such a struct as 0, the default).
PTDP_API ptdp_status compat_ptdp_0_2_runtime_options_init(ptdp_runtime_options* options) {
  return ptdp::capi::guard("ptdp_runtime_options_init", [&] {
    ptdp::capi::require_non_null(options, "options");
    const ptdp_runtime_options full = fresh(ptdp_runtime_options_init);
    hand_out_defaults(full, options);
  });
}

// The configuration sets no cpu_threads (ptdp-train has no thread flag), so the prefix always
// describes it.
PTDP_API ptdp_status compat_ptdp_0_2_train_config_runtime_options(ptdp_train_config config,
                                                                  ptdp_runtime_options* options) {
  ptdp_runtime_options full{};
  const ptdp_status st = ptdp_train_config_runtime_options(config, options ? &full : nullptr);
  if (st != PTDP_SUCCESS) return st;
  return ptdp::capi::guard("ptdp_train_config_runtime_options", [&] { hand_out_defaults(full, options); });
}

}  // extern "C"

// Bind each definition above to its public name at version PTDP_0 (see capi/ptdp.map).
__asm__(".symver compat_ptdp_0_2_gpt_options_init,ptdp_gpt_options_init@PTDP_0");
__asm__(".symver compat_ptdp_0_2_generate_options_init,ptdp_generate_options_init@PTDP_0");
__asm__(".symver compat_ptdp_0_2_plan_options_init,ptdp_plan_options_init@PTDP_0");
__asm__(".symver compat_ptdp_0_2_train_config_gpt_options,ptdp_train_config_gpt_options@PTDP_0");
__asm__(".symver compat_ptdp_0_2_checkpoint_read_options,ptdp_checkpoint_read_options@PTDP_0");
__asm__(".symver compat_ptdp_0_2_plan_parse_args,ptdp_plan_parse_args@PTDP_0");
__asm__(".symver compat_ptdp_0_2_parallel_options_init,ptdp_parallel_options_init@PTDP_0");
__asm__(".symver compat_ptdp_0_2_cluster_init,ptdp_cluster_init@PTDP_0");
__asm__(".symver compat_ptdp_0_2_cluster_preset,ptdp_cluster_preset@PTDP_0");
__asm__(".symver compat_ptdp_0_2_cluster_load,ptdp_cluster_load@PTDP_0");
__asm__(".symver compat_ptdp_0_2_train_config_parallel_options,ptdp_train_config_parallel_options@PTDP_0");
__asm__(".symver compat_ptdp_0_2_runtime_options_init,ptdp_runtime_options_init@PTDP_0");
__asm__(".symver compat_ptdp_0_2_train_config_runtime_options,ptdp_train_config_runtime_options@PTDP_0");
