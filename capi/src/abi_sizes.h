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

// Structs added since the last release: not published yet, so their first published size is
// whatever they hold at the release that publishes them. That release turns each line into a
// PTDP_FIRST_PUBLISHED one with the literal and the last field (see packaging/abi/README.md).
#define PTDP_UNRELEASED(Struct)                                 \
  template <>                                                   \
  struct FirstPublished<Struct> {                               \
    static constexpr std::size_t size = sizeof(Struct);         \
    static constexpr const char* name = #Struct;                \
  }

PTDP_UNRELEASED(ptdp_iteration_report);
PTDP_UNRELEASED(ptdp_trainer_options);
PTDP_UNRELEASED(ptdp_batch_masks);
PTDP_UNRELEASED(ptdp_hf_save_options);
PTDP_UNRELEASED(ptdp_tokenizer_options);

PTDP_UNRELEASED(ptdp_preprocess_options);
PTDP_UNRELEASED(ptdp_preprocess_result);

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

// The sizes at release 0.2.0 of the structs that grew after it (ptdp.h of cef1dbc). A program
// built against 0.2.0 passes structs of these sizes to the functions that fill them without
// reading a struct_size first (the *_init functions, and the getters whose struct the caller
// does not initialise); it is bound to their 0.2.0 versions, which write no more than this
// (capi/src/compat_0_2.cpp).
template <typename Struct>
struct SizeAt0_2;
#define PTDP_SIZE_AT_0_2(Struct, bytes, first_new_field)                                         \
  template <>                                                                                    \
  struct SizeAt0_2<Struct> {                                                                     \
    static constexpr std::size_t size = bytes;                                                   \
  };                                                                                             \
  static_assert(offsetof(Struct, first_new_field) >= (bytes) && (bytes) < sizeof(Struct),       \
                #Struct ": the fields after 0.2.0 start at or after its 0.2.0 size")
PTDP_SIZE_AT_0_2(ptdp_gpt_options, 88, rotary_base);
PTDP_SIZE_AT_0_2(ptdp_plan_options, 104, rotary_base);
PTDP_SIZE_AT_0_2(ptdp_generate_options, 32, no_kv_cache);
PTDP_SIZE_AT_0_2(ptdp_parallel_options, 24, decoder_first_pipeline_num_layers);
PTDP_SIZE_AT_0_2(ptdp_cluster, 128, elementwise_bandwidth);
PTDP_SIZE_AT_0_2(ptdp_runtime_options, 32, cpu_threads);
#undef PTDP_SIZE_AT_0_2

/// The smallest struct_size a caller may pass for `Struct`.
template <typename Struct>
inline constexpr std::size_t first_published_size = FirstPublished<Struct>::size;

}  // namespace ptdp::capi
