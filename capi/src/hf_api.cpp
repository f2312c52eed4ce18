// Hugging Face checkpoints through the C API.
#include <string>

#include "capi/src/handles.h"
#include "core/checkpoint/hf_checkpoint.h"

static_assert(PTDP_HF_ARCHITECTURE_AUTO == static_cast<int>(ptdp::HfArchitecture::Auto));
static_assert(PTDP_HF_ARCHITECTURE_GPT2 == static_cast<int>(ptdp::HfArchitecture::Gpt2));
static_assert(PTDP_HF_ARCHITECTURE_LLAMA == static_cast<int>(ptdp::HfArchitecture::Llama));
static_assert(PTDP_HF_ARCHITECTURE_MISTRAL == static_cast<int>(ptdp::HfArchitecture::Mistral));
static_assert(PTDP_HF_ARCHITECTURE_QWEN2 == static_cast<int>(ptdp::HfArchitecture::Qwen2));
static_assert(PTDP_HF_ARCHITECTURE_MIXTRAL == static_cast<int>(ptdp::HfArchitecture::Mixtral));
static_assert(PTDP_HF_ARCHITECTURE_QWEN3_MOE == static_cast<int>(ptdp::HfArchitecture::Qwen3Moe));
static_assert(PTDP_HF_ARCHITECTURE_QWEN2_MOE == static_cast<int>(ptdp::HfArchitecture::Qwen2Moe));
static_assert(PTDP_HF_ARCHITECTURE_OLMOE == static_cast<int>(ptdp::HfArchitecture::Olmoe));
static_assert(PTDP_HF_ARCHITECTURE_DEEPSEEK_V2 == static_cast<int>(ptdp::HfArchitecture::DeepseekV2));
static_assert(PTDP_HF_ARCHITECTURE_DEEPSEEK_V3 == static_cast<int>(ptdp::HfArchitecture::DeepseekV3));

namespace {

using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

// The core's save options from the C struct (NULL: the defaults), every field checked.
ptdp::HfSaveOptions save_options(const ptdp_hf_save_options* options) {
  ptdp_hf_save_options defaults;
  ptdp_hf_save_options_init(&defaults);
  const ptdp_hf_save_options o = ptdp::capi::read_options(options, defaults, "options", "ptdp_hf_save_options_init");
  ptdp::HfSaveOptions out;
  switch (o.dtype) {
    case PTDP_DTYPE_F32:
      out.dtype = ptdp::StDType::F32;
      break;
    case PTDP_DTYPE_BF16:
      out.dtype = ptdp::StDType::BF16;
      break;
    case PTDP_DTYPE_F16:
      out.dtype = ptdp::StDType::F16;
      break;
    default:
      ptdp::throw_error(ptdp::ErrorCode::InvalidArgument,
                        "options->dtype = " + std::to_string(static_cast<int>(o.dtype)) +
                            " is not PTDP_DTYPE_F32, PTDP_DTYPE_BF16 or PTDP_DTYPE_F16");
  }
  PTDP_CHECK_ARG(o.max_shard_size >= 0,
                 "options->max_shard_size = " + std::to_string(o.max_shard_size) + " is negative (0: one file)");
  out.max_shard_size = static_cast<uint64_t>(o.max_shard_size);
  PTDP_CHECK_ARG(
      o.architecture >= PTDP_HF_ARCHITECTURE_AUTO && o.architecture <= PTDP_HF_ARCHITECTURE_DEEPSEEK_V3,
      "options->architecture = " + std::to_string(static_cast<int>(o.architecture)) + " is not a ptdp_hf_architecture");
  out.architecture = static_cast<ptdp::HfArchitecture>(o.architecture);
  if (o.base_config != nullptr) {
    out.base_config = o.base_config;
    PTDP_CHECK_ARG(!out.base_config.empty(), std::string("options->base_config is empty (NULL: none)"));
  }
  return out;
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_hf_save_options_init(ptdp_hf_save_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->dtype = PTDP_DTYPE_F32;
    options->max_shard_size = 0;
    options->architecture = PTDP_HF_ARCHITECTURE_AUTO;
    options->base_config = nullptr;
  });
}

PTDP_API ptdp_status ptdp_hf_read_options(const char* directory, ptdp_gpt_options* options,
                                          ptdp_hf_architecture* architecture) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    require_non_null(options, "options");
    const ptdp::HfConfig hf = ptdp::read_hf_config(directory);
    ptdp::capi::gpt_options_sized(hf.model, options);
    if (architecture != nullptr) *architecture = static_cast<ptdp_hf_architecture>(hf.architecture);
  });
}

PTDP_API ptdp_status ptdp_hf_load(const char* directory, ptdp_model model) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    ptdp_model_impl& m = live(model, "model");
    ptdp::load_hf_checkpoint(directory, *m.model);
  });
}

PTDP_API ptdp_status ptdp_hf_save(const char* directory, ptdp_model model, const ptdp_hf_save_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    ptdp_model_impl& m = live(model, "model");
    const ptdp::HfSaveOptions o = save_options(options);
    ptdp::save_hf_checkpoint(directory, *m.model, o);
  });
}

}  // extern "C"
