// Named model shapes (--model-preset NAME for ptdp-train and ptdp-plan): the GPT-2 sizes, the
// GPTs of the paper's Table 1 (Narayanan et al. 2021), Llama 3 / 3.2 and Qwen2.5 decoders with
// their published shapes (vocabulary, heads, query groups, MLP width, RoPE base and scaling,
// norms, biases, tying), and the mixture-of-experts models Mixtral, Qwen3-MoE, OLMoE and
// Qwen2-MoE (experts, k, expert width, router, shared experts), and the DeepSeek-V3 family
// (DeepSeek-V3, DeepSeek-V2-Lite, Moonlight, Kimi K2: multi-latent attention, YaRN, DeepSeek's
// routers, shared experts, dense first layers, DeepSeek-V3's MTP). A preset fills a GptConfig;
// flags given after it override.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/model/gpt_config.h"

namespace ptdp {

struct ModelPreset {
  std::string name;         ///< e.g. "gpt2-124m", "llama-3.2-1b", "qwen2.5-7b" (lower case)
  std::string description;  ///< one line: family, parameter count, source of the shape
  GptConfig config;         ///< shape and architecture; training settings at ptdp's defaults
};

/// Every preset, in a fixed order (GPT-2, the paper's GPTs, Llama, Qwen2.5, the MoE models, the
/// DeepSeek-V3 family).
const std::vector<ModelPreset>& model_presets();

/// The preset called `name` (case-insensitive), or std::nullopt.
std::optional<ModelPreset> find_model_preset(const std::string& name);

/// The names of every preset, comma-separated (for error messages and --help).
std::string model_preset_names();

}  // namespace ptdp
