// The size every C struct with a struct_size had in the first header that published it: the
// smallest struct_size read_options() accepts, since a program built against that header
// passes exactly this many bytes. Each size is a literal, frozen for good; the asserts pin it
// to where the first version's last field ends (and, where fields came later, to where the
// first of them starts), so a struct that grows cannot move it. A new struct gets its line
// here when it is added; read_options() refuses to compile for a struct that has none.
//
// How the sizes were found: the first commit that declares each struct in
// capi/include/ptdp/ptdp.h (`git log --reverse -S'typedef struct ptdp_xxx {' --
// capi/include/ptdp/ptdp.h`), that header compiled and sizeof() printed; the last field named
// is the last one that version had.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ptdp/ptdp.h"

namespace ptdp::capi {

// The literals are LP64's (x86-64, aarch64, ppc64le: the platforms ptdp is built for). A port
// to another data model has other sizes and freezes its own table.
static_assert(sizeof(void*) == 8 && sizeof(std::size_t) == 8 && alignof(double) == 8 && alignof(int64_t) == 8,
              "the first published struct sizes below are those of LP64");

/// First published size and name of an options struct; only the specialisations below exist.
template <typename Struct>
struct FirstPublished;

/// Where a struct whose last field ends at `field_end` ends: padded to the struct's alignment,
/// as the compiler padded the first version (whose alignment is size_t's, as now).
template <typename Struct>
constexpr std::size_t padded_end(std::size_t field_end) {
  return (field_end + alignof(Struct) - 1) / alignof(Struct) * alignof(Struct);
}

#define PTDP_FIRST_PUBLISHED(Struct, bytes, last_field)                                                   \
  template <>                                                                                             \
  struct FirstPublished<Struct> {                                                                         \
    static constexpr std::size_t size = bytes;                                                            \
    static constexpr const char* name = #Struct;                                                          \
  };                                                                                                      \
  static_assert(FirstPublished<Struct>::size ==                                                           \
                    padded_end<Struct>(offsetof(Struct, last_field) + sizeof(Struct::last_field)),        \
                #Struct ": its first version ended with " #last_field ", which does not end at " #bytes); \
  static_assert(FirstPublished<Struct>::size <= sizeof(Struct), #Struct ": structs only grow")

// Struct                              bytes  last field of the first version     first published in
PTDP_FIRST_PUBLISHED(ptdp_tensor_options, 24, device_index);                      // 87701c1
PTDP_FIRST_PUBLISHED(ptdp_runtime_options, 24, use_mpi);                          // 490c050
PTDP_FIRST_PUBLISHED(ptdp_parallel_options, 24, virtual_pipeline_model_parallel_size);  // 490c050
PTDP_FIRST_PUBLISHED(ptdp_gpt_options, 72, seed);                                 // 0f88811
PTDP_FIRST_PUBLISHED(ptdp_pipeline_options, 24, trace_path);                      // 1fced69
PTDP_FIRST_PUBLISHED(ptdp_stage_callbacks, 112, activation_shape);                // 0290054
PTDP_FIRST_PUBLISHED(ptdp_schedule_costs, 48, p2p_latency);                       // 3369fc6
PTDP_FIRST_PUBLISHED(ptdp_optimizer_options, 112, ddp_bucket_size);               // aeb0475
PTDP_FIRST_PUBLISHED(ptdp_train_settings, 160, seed);                             // f2a3b70
PTDP_FIRST_PUBLISHED(ptdp_gpt_data_options, 72, num_samples);                     // f2a3b70
PTDP_FIRST_PUBLISHED(ptdp_generate_options, 32, seed);                            // f2a3b70
PTDP_FIRST_PUBLISHED(ptdp_checkpoint_state, 32, consumed_valid_samples);          // f2a3b70
PTDP_FIRST_PUBLISHED(ptdp_cluster, 128, inter_node_latency);                      // 49fd29a
PTDP_FIRST_PUBLISHED(ptdp_plan_options, 104, top);                                // 49fd29a
PTDP_FIRST_PUBLISHED(ptdp_plan_cli, 32, schedule_svg);                            // 49fd29a
PTDP_FIRST_PUBLISHED(ptdp_plan_layout, 208, mfu);                                 // 49fd29a

// Published with 0.2.0 (0ab8855^) and 0.3.0's last header (0d1f475), before 0.4.0 turned the
// lines that had held their sizes open (PTDP_UNRELEASED) into these literals.
PTDP_FIRST_PUBLISHED(ptdp_iteration_report, 152, saved);                         // 6eae2ed
PTDP_FIRST_PUBLISHED(ptdp_trainer_options, 40, print_log);                        // 6eae2ed
PTDP_FIRST_PUBLISHED(ptdp_batch_masks, 24, document_starts);                      // f8a65d5
PTDP_FIRST_PUBLISHED(ptdp_hf_save_options, 40, base_config);                      // f8a65d5
PTDP_FIRST_PUBLISHED(ptdp_tokenizer_options, 48, vocab_size);                     // f8a65d5
PTDP_FIRST_PUBLISHED(ptdp_preprocess_options, 104, skip_bad_lines);               // f8a65d5
PTDP_FIRST_PUBLISHED(ptdp_preprocess_result, 56, dtype_code);                     // f8a65d5

// Structs added since the last release: not published yet, so their first published size is
// whatever they hold at the release that publishes them. That release turns each line into a
// PTDP_FIRST_PUBLISHED one with the literal and the last field (see packaging/abi/README.md).
#define PTDP_UNRELEASED(Struct)                                 \
  template <>                                                   \
  struct FirstPublished<Struct> {                               \
    static constexpr std::size_t size = sizeof(Struct);         \
    static constexpr const char* name = #Struct;                \
  }

PTDP_UNRELEASED(ptdp_moe_metrics);

#undef PTDP_UNRELEASED
#undef PTDP_FIRST_PUBLISHED

// The structs that grew since: their first added field starts where the first version ended.
static_assert(FirstPublished<ptdp_runtime_options>::size == offsetof(ptdp_runtime_options, use_nccl));  // 1629582
static_assert(FirstPublished<ptdp_gpt_options>::size == offsetof(ptdp_gpt_options, device));  // ff06fad
static_assert(FirstPublished<ptdp_train_settings>::size == offsetof(ptdp_train_settings, exit_interval));  // 6e066a8
static_assert(offsetof(ptdp_train_settings, check_for_nan_in_loss_and_grad) == 168 &&
                  offsetof(ptdp_train_settings, launcher) == 184 && sizeof(ptdp_train_settings) == 192,
              "ptdp_train_settings: the fault-tolerance settings follow exit_interval");
static_assert(FirstPublished<ptdp_plan_options>::size == offsetof(ptdp_plan_options, rotary_base));  // Llama options
static_assert(FirstPublished<ptdp_gpt_data_options>::size ==
              offsetof(ptdp_gpt_data_options, train_data_path));  // per-split data paths (blends)
static_assert(FirstPublished<ptdp_parallel_options>::size ==
              offsetof(ptdp_parallel_options, decoder_first_pipeline_num_layers));  // uneven pipeline stages
static_assert(offsetof(ptdp_parallel_options, pipeline_chunk_placement) == 40,
              "ptdp_parallel_options: the chunk placement starts after the uneven stages' 40 bytes");
static_assert(offsetof(ptdp_parallel_options, context_parallel_size) == 56,
              "ptdp_parallel_options: the context-parallel size starts after the 56 bytes before it");
static_assert(FirstPublished<ptdp_schedule_costs>::size == offsetof(ptdp_schedule_costs, chunk_forward));  // predictor
static_assert(FirstPublished<ptdp_plan_layout>::size ==
              offsetof(ptdp_plan_layout, decoder_first_pipeline_num_layers));  // uneven pipeline stages
static_assert(FirstPublished<ptdp_cluster>::size == offsetof(ptdp_cluster, elementwise_bandwidth));  // GEMM tables

// A struct that grows again starts its new fields at or after the size of every version
// published before, tail padding included: a caller built against that version passes its
// padding uninitialised, and read_options() copies struct_size bytes. ptdp_gpt_options was 88
// bytes at 0.2.0, its last field (attention) ending at 84; the Llama options start at 88.
static_assert(offsetof(ptdp_runtime_options, use_nccl) + sizeof(int32_t) == 28 &&
                  offsetof(ptdp_runtime_options, reserved0) == 28 &&
                  offsetof(ptdp_runtime_options, cpu_threads) == 32,
              "ptdp_runtime_options: cpu_threads must start at its 0.2.0 size, 32, past its padding (reserved0)");
static_assert(offsetof(ptdp_gpt_options, attention) + sizeof(ptdp_attention) == 84 &&
                  offsetof(ptdp_gpt_options, rotary_base) == 88,
              "ptdp_gpt_options: the fields added after 0.2.0 must start at its 88 bytes, past its padding");

// The published releases, whose programs keep working with this library. Each is the header its
// programs were compiled from, vendored with its version script and samples in
// packaging/abi/releases/ (the ABI tests run those programs with this library):
//   0.1.0  cef1dbc^   every function at symbol version PTDP_0
//   0.2.0  0ab8855^   PTDP_0; PTDP_0.3 for the six functions whose structs had grown since cef1dbc
//                     (0.2.0's first header, whose structs were 0.1.0's sizes)
//   0.3.0  0ab8855    as 0.2.0
//   0.3.0  0d1f475    the last header numbered 0.3.0 ("0.3.0-last"): structs had grown again
//                     under the same number, most without a new symbol version
// A program calls a function at the symbol version its release's version script gave it, so an
// old version of a function serves every release that bound the function to that version. Such
// a version writes each struct at the size the oldest of those releases had (structs only grow),
// which the table below gives; capi/src/compat.cpp holds the old versions. A program built from
// 0.3.0's last header that calls one of them gets the smaller struct of 0.3.0's release commit
// (the two headers share a symbol version, and only one of the two sizes is safe for both): its
// struct_size says so, and the library reads the struct back at that size.
enum class Release { v0_1_0, v0_2_0, v0_3_0, v0_3_0_last };

/// sizeof(Struct) in each published release's ptdp.h, for the structs that an old version of a
/// function fills; only the specialisations below exist.
template <typename Struct>
struct ReleasedSizes;
#define PTDP_RELEASED_SIZES(Struct, at_0_1_0, at_0_2_0, at_0_3_0, at_0_3_0_last)                                       \
  template <>                                                                                                          \
  struct ReleasedSizes<Struct> {                                                                                       \
    static constexpr std::size_t at[] = {at_0_1_0, at_0_2_0, at_0_3_0, at_0_3_0_last};                                 \
  };                                                                                                                   \
  static_assert((at_0_1_0) <= (at_0_2_0) && (at_0_2_0) <= (at_0_3_0) && (at_0_3_0) <= (at_0_3_0_last) &&               \
                    (at_0_3_0_last) <= sizeof(Struct),                                                                 \
                #Struct ": structs only grow")
// Struct                               0.1.0  0.2.0  0.3.0  0.3.0-last
PTDP_RELEASED_SIZES(ptdp_gpt_options,        88,   152,   152,   152);
PTDP_RELEASED_SIZES(ptdp_plan_options,      104,   176,   176,   200);
PTDP_RELEASED_SIZES(ptdp_generate_options,   32,    40,    40,    40);
PTDP_RELEASED_SIZES(ptdp_parallel_options,   24,    24,    24,    72);
PTDP_RELEASED_SIZES(ptdp_cluster,           128,   128,   128,   648);
PTDP_RELEASED_SIZES(ptdp_runtime_options,    32,    32,    32,    40);
PTDP_RELEASED_SIZES(ptdp_train_settings,    168,   168,   168,   192);
PTDP_RELEASED_SIZES(ptdp_gpt_data_options,   72,    72,    72,    96);
PTDP_RELEASED_SIZES(ptdp_optimizer_options, 112,   112,   112,   120);
PTDP_RELEASED_SIZES(ptdp_schedule_costs,     48,    48,    48,    80);
PTDP_RELEASED_SIZES(ptdp_pipeline_options,   24,    24,    24,    24);
#undef PTDP_RELEASED_SIZES

/// The size of `Struct` in release `r`'s ptdp.h.
template <typename Struct>
constexpr std::size_t released_size(Release r) {
  return ReleasedSizes<Struct>::at[static_cast<int>(r)];
}

// Where each size ends in today's layout: the first field added after a release starts at or
// after its size (the fields before it are the release's, unmoved).
static_assert(released_size<ptdp_gpt_options>(Release::v0_1_0) == offsetof(ptdp_gpt_options, rotary_base) &&
                  released_size<ptdp_gpt_options>(Release::v0_3_0_last) == offsetof(ptdp_gpt_options, moe_layer_freq),
              "ptdp_gpt_options: the Llama options (from rotary_base) came after 0.1.0, the MoE fields (from "
              "moe_layer_freq) after 0.3.0's last header");
static_assert(released_size<ptdp_plan_options>(Release::v0_1_0) == offsetof(ptdp_plan_options, rotary_base) &&
                  released_size<ptdp_plan_options>(Release::v0_3_0) ==
                      offsetof(ptdp_plan_options, decoder_first_pipeline_num_layers) &&
                  released_size<ptdp_plan_options>(Release::v0_3_0_last) ==
                      offsetof(ptdp_plan_options, moe_layer_freq),
              "ptdp_plan_options: the Llama options after 0.1.0, the uneven stages on after 0.3.0, the MoE "
              "fields (from moe_layer_freq) after 0.3.0's last header");
static_assert(released_size<ptdp_generate_options>(Release::v0_1_0) == offsetof(ptdp_generate_options, no_kv_cache),
              "ptdp_generate_options: no_kv_cache came after 0.1.0");
static_assert(released_size<ptdp_parallel_options>(Release::v0_3_0) ==
                  offsetof(ptdp_parallel_options, decoder_first_pipeline_num_layers) &&
                  released_size<ptdp_parallel_options>(Release::v0_3_0_last) ==
                      offsetof(ptdp_parallel_options, expert_model_parallel_size),
              "ptdp_parallel_options: the uneven pipeline stages came after 0.3.0, the expert sizes after its last "
              "header");
static_assert(released_size<ptdp_cluster>(Release::v0_3_0) == offsetof(ptdp_cluster, elementwise_bandwidth),
              "ptdp_cluster: the GEMM tables came after 0.3.0");
static_assert(released_size<ptdp_runtime_options>(Release::v0_3_0) == offsetof(ptdp_runtime_options, cpu_threads),
              "ptdp_runtime_options: cpu_threads came after 0.3.0");
static_assert(released_size<ptdp_train_settings>(Release::v0_3_0) ==
                  offsetof(ptdp_train_settings, check_for_nan_in_loss_and_grad),
              "ptdp_train_settings: the fault-tolerance settings came after 0.3.0");
static_assert(released_size<ptdp_gpt_data_options>(Release::v0_3_0) ==
                  offsetof(ptdp_gpt_data_options, train_data_path),
              "ptdp_gpt_data_options: the per-split data paths came after 0.3.0");
static_assert(released_size<ptdp_optimizer_options>(Release::v0_3_0) ==
                      offsetof(ptdp_optimizer_options, overlap_grad_reduce) &&
                  released_size<ptdp_optimizer_options>(Release::v0_3_0_last) ==
                      offsetof(ptdp_optimizer_options, muon_momentum),
              "ptdp_optimizer_options: the overlap switches came after 0.3.0, the Muon fields (from muon_momentum) "
              "after 0.3.0's last header");
static_assert(released_size<ptdp_schedule_costs>(Release::v0_3_0) == offsetof(ptdp_schedule_costs, chunk_forward),
              "ptdp_schedule_costs: the measured chunk costs came after 0.3.0");
static_assert(released_size<ptdp_pipeline_options>(Release::v0_3_0_last) == offsetof(ptdp_pipeline_options, masks) &&
                  offsetof(ptdp_pipeline_options, masks) + sizeof(void*) == sizeof(ptdp_pipeline_options),
              "ptdp_pipeline_options: the masks came in 0.4.0, packed after 0.3.0's fields");
// The tails that old versions compare byte for byte (compat.cpp) hold no padding.
static_assert(offsetof(ptdp_train_settings, launcher) + sizeof(const char*) == sizeof(ptdp_train_settings) &&
                  offsetof(ptdp_train_settings, max_skipped_iterations) ==
                      offsetof(ptdp_train_settings, max_restarts) + sizeof(int32_t),
              "ptdp_train_settings: the fields after 0.3.0 are packed");
static_assert(offsetof(ptdp_gpt_data_options, test_data_path) + sizeof(const char*) == sizeof(ptdp_gpt_data_options),
              "ptdp_gpt_data_options: the fields after 0.3.0 are packed");
static_assert(offsetof(ptdp_optimizer_options, qk_clip_alpha) + sizeof(float) == sizeof(ptdp_optimizer_options) &&
                  sizeof(ptdp_optimizer_options) == 168,
              "ptdp_optimizer_options: the fields after 0.3.0 are packed");
static_assert(offsetof(ptdp_schedule_costs, chunk_backward_weight) + sizeof(const double*) ==
                  sizeof(ptdp_schedule_costs),
              "ptdp_schedule_costs: the fields after 0.3.0 are packed");

/// The smallest struct_size a caller may pass for `Struct`.
template <typename Struct>
inline constexpr std::size_t first_published_size = FirstPublished<Struct>::size;

}  // namespace ptdp::capi
