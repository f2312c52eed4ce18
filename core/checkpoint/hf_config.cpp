#include "core/checkpoint/hf_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iterator>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/file_read.h"
#include "io/json_text.h"

namespace ptdp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// config.json fields

// A float as the shortest decimal that reads back as the same float, widened: 1e-5f is written
// as 1e-05 rather than 9.999999747378752e-06.
double shortest(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

std::string float_text(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::string(buf, r.ptr);
}

[[noreturn]] void bad_field(const std::string& source, const std::string& key, const std::string& why) {
  throw_io_error(source, str_cat("\"", key, "\" ", why));
}

[[noreturn]] void unsupported(const std::string& source, const std::string& what) {
  throw_error(ErrorCode::Unsupported, str_cat(source, ": ", what));
}

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

int int_field(const json& j, const char* key, const std::string& source) {
  if (!present(j, key)) bad_field(source, key, "is missing");
  const json& v = j.at(key);
  if (!v.is_number_integer()) bad_field(source, key, str_cat("is not an integer: ", json_text(v)));
  const int64_t n = v.get<int64_t>();
  if (n < 0 || n > 2147483647) bad_field(source, key, str_cat("= ", n, " is outside [0, 2^31)"));
  return static_cast<int>(n);
}

int int_or(const json& j, const char* key, int fallback, const std::string& source) {
  return present(j, key) ? int_field(j, key, source) : fallback;
}

float float_or(const json& j, const char* key, float fallback, const std::string& source) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_number()) bad_field(source, key, str_cat("is not a number: ", json_text(v)));
  const double d = v.get<double>();  // 1e300 is a JSON number but no float
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max()))
    bad_field(source, key, str_cat("= ", json_text(v), " is not a finite float"));
  return static_cast<float>(d);
}

bool bool_or(const json& j, const char* key, bool fallback, const std::string& source) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_boolean()) bad_field(source, key, str_cat("is not true or false: ", json_text(v)));
  return v.get<bool>();
}

std::string string_or(const json& j, const char* key, const std::string& fallback, const std::string& source) {
  if (!present(j, key)) return fallback;
  const json& v = j.at(key);
  if (!v.is_string()) bad_field(source, key, str_cat("is not a string: ", json_text(v)));
  return v.get<std::string>();
}

// config.json's model_type and class of each architecture, in HfArchitecture's order.
struct HfNames {
  const char* model_type;
  const char* class_name;
};
constexpr HfNames kHfNames[] = {{"auto", "auto"},
                                {"gpt2", "GPT2LMHeadModel"},
                                {"llama", "LlamaForCausalLM"},
                                {"mistral", "MistralForCausalLM"},
                                {"qwen2", "Qwen2ForCausalLM"},
                                {"mixtral", "MixtralForCausalLM"},
                                {"qwen3_moe", "Qwen3MoeForCausalLM"},
                                {"qwen2_moe", "Qwen2MoeForCausalLM"},
                                {"olmoe", "OlmoeForCausalLM"},
                                {"deepseek_v2", "DeepseekV2ForCausalLM"},
                                {"deepseek_v3", "DeepseekV3ForCausalLM"}};

const HfNames* hf_names(HfArchitecture a) {
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(kHfNames) ? &kHfNames[i] : nullptr;
}

constexpr HfArchitecture kArchitectures[] = {HfArchitecture::Gpt2,     HfArchitecture::Llama,    HfArchitecture::Mistral,
                                             HfArchitecture::Qwen2,    HfArchitecture::Mixtral,  HfArchitecture::Qwen3Moe,
                                             HfArchitecture::Qwen2Moe, HfArchitecture::Olmoe,
                                             HfArchitecture::DeepseekV2, HfArchitecture::DeepseekV3};

// Settings of PreTrainedConfig itself that change what a model computes; ptdp computes none.
void refuse_generic_settings(const json& j, const std::string& source) {
  if (present(j, "pruned_heads") && !(j.at("pruned_heads").is_object() && j.at("pruned_heads").empty()))
    unsupported(source, str_cat("pruned_heads = ", json_text(j.at("pruned_heads")),
                                ": ptdp's layers have all their heads"));
  if (bool_or(j, "is_encoder_decoder", false, source))
    unsupported(source, "is_encoder_decoder = true: ptdp builds one decoder");
  if (bool_or(j, "add_cross_attention", false, source))
    unsupported(source, "add_cross_attention = true: ptdp's decoder has no cross-attention");
  if (present(j, "quantization_config"))
    unsupported(source, "quantization_config: ptdp reads float weights, not quantized ones");
}

GptConfig gpt2_config(const json& j, const std::string& source) {
  GptConfig c;
  c.vocab_size = int_field(j, "vocab_size", source);
  c.hidden_size = int_field(j, "n_embd", source);
  c.num_layers = int_field(j, "n_layer", source);
  c.num_attention_heads = int_field(j, "n_head", source);
  const int positions = present(j, "n_positions") ? int_field(j, "n_positions", source) : int_field(j, "n_ctx", source);
  c.max_position_embeddings = positions;
  c.seq_length = positions;
  c.ffn_hidden_size = int_or(j, "n_inner", 4 * c.hidden_size, source);
  const std::string act = string_or(j, "activation_function", "gelu_new", source);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    unsupported(source, str_cat("activation_function \"", act,
                                "\": ptdp's GeLU is the tanh approximation (gelu_new, gelu_pytorch_tanh, gelu_fast)"));
  if (!bool_or(j, "scale_attn_weights", true, source))
    unsupported(source, "scale_attn_weights = false: ptdp scales attention scores by 1/sqrt(head dim)");
  if (bool_or(j, "scale_attn_by_inverse_layer_idx", false, source))
    unsupported(source, "scale_attn_by_inverse_layer_idx = true is not computed by ptdp");
  c.layernorm_epsilon = float_or(j, "layer_norm_epsilon", 1e-5f, source);
  c.init_method_std = float_or(j, "initializer_range", 0.02f, source);
  c.hidden_dropout = float_or(j, "resid_pdrop", 0.1f, source);
  c.attention_dropout = float_or(j, "attn_pdrop", 0.1f, source);
  // ptdp's (Megatron's) embedding dropout is the hidden dropout.
  const float embd_pdrop = float_or(j, "embd_pdrop", c.hidden_dropout, source);
  if (embd_pdrop != c.hidden_dropout)
    unsupported(source, str_cat("embd_pdrop = ", float_text(embd_pdrop), " differs from resid_pdrop = ",
                                float_text(c.hidden_dropout), ": ptdp's embedding dropout is the hidden dropout"));
  c.tie_embeddings = bool_or(j, "tie_word_embeddings", true, source);
  c.normalization = Normalization::LayerNorm;
  c.position_embedding = PositionEmbedding::LearnedAbsolute;
  c.swiglu = false;
  c.add_bias_linear = true;
  return c;
}

// ---------------------------------------------------------------------------------------------
// RoPE: transformers 4's top-level rope_theta / rope_scaling and transformers 5's rope_parameters

// rope_type, or the older "type", of a RoPE dict ("default" when neither is there).
std::string rope_type_of(const json& s, const std::string& where) {
  const std::string type = string_or(s, "rope_type", "", where);
  return type.empty() ? string_or(s, "type", "default", where) : type;
}

// The keys a RoPE dict of `type` may hold; anything else is a setting ptdp does not compute.
bool rope_key_known(const std::string& key, const std::string& type) {
  static const std::set<std::string> common = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
  static const std::set<std::string> llama3 = {"factor", "low_freq_factor", "high_freq_factor",
                                               "original_max_position_embeddings"};
  static const std::set<std::string> yarn = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
                                             "mscale", "mscale_all_dim", "truncate"};
  return common.count(key) || (type == "llama3" && llama3.count(key)) || (type == "yarn" && yarn.count(key));
}

void check_rope_dict(const json& s, const std::string& field, const std::string& source) {
  if (!s.is_object()) bad_field(source, field, str_cat("is not an object: ", json_text(s)));
  const std::string type = rope_type_of(s, source + " " + field);
  if (type != "default" && type != "llama3" && type != "yarn")
    unsupported(source, str_cat(field, ".rope_type \"", type,
                                "\": ptdp computes plain RoPE, Llama 3.1's (\"llama3\") and YaRN (\"yarn\")"));
  for (const auto& [key, value] : s.items()) {
    if (value.is_object())
      unsupported(source, str_cat(field, ".", key, ": RoPE settings per layer type are not computed by ptdp"));
    if (!value.is_null() && !rope_key_known(key, type))
      unsupported(source, str_cat(field, ".", key, " = ", json_text(value), " is not computed by ptdp (rope_type \"",
                                  type, "\")"));
  }
}

// Where a setting is written twice (a transformers 4 field beside transformers 5's
// rope_parameters), the two must agree: each version reads only its own.
void check_agree(const json& a, const std::string& field_a, const json& b, const std::string& field_b,
                 const std::string& source) {
  if (a != b)
    unsupported(source, str_cat(field_a, " = ", json_text(a), " disagrees with ", field_b, " = ", json_text(b),
                                ": transformers 4 reads the first, transformers 5 the second"));
}

// YaRN's dict as _compute_yarn_parameters reads it: factor required; beta_fast and beta_slow
// of null or 0 mean 32 and 1 (its `or`); mscale weighs only beside a non-zero mscale_all_dim.
void read_yarn(const json& s, const std::string& field, LayerConfig& c, int positions, const std::string& source) {
  const std::string where = source + " " + field;
  if (!present(s, "factor")) unsupported(source, str_cat(field, ".factor is missing: YaRN needs it"));
  c.rope_type = RopeType::Yarn;
  YarnScaling& y = c.yarn;
  y.factor = float_or(s, "factor", 1.0f, where);
  // transformers 5 takes the context when the field is missing.
  y.original_max_position_embeddings = int_or(s, "original_max_position_embeddings", positions, where);
  const float fast = float_or(s, "beta_fast", 0.0f, where), slow = float_or(s, "beta_slow", 0.0f, where);
  y.beta_fast = fast != 0.0f ? fast : 32.0f;
  y.beta_slow = slow != 0.0f ? slow : 1.0f;
  const float mscale = float_or(s, "mscale", 0.0f, where), all_dim = float_or(s, "mscale_all_dim", 0.0f, where);
  if (all_dim != 0.0f && mscale == 0.0f)
    unsupported(source, str_cat(field, ".mscale_all_dim = ", json_text(s.at("mscale_all_dim")),
                                " without mscale: transformers then scales cos and sin by 0.1 ln(factor) + 1 and the "
                                "softmax of multi-latent attention by mscale_all_dim's; ptdp's YaRN needs both"));
  if (mscale != 0.0f && mscale != 1.0f && all_dim == 0.0f)
    unsupported(source, str_cat(field, ".mscale = ", json_text(s.at("mscale")),
                                " without mscale_all_dim, which transformers ignores and Megatron does not"));
  y.mscale = mscale != 0.0f ? mscale : 1.0f;
  y.mscale_all_dim = all_dim;
  y.truncate = bool_or(s, "truncate", true, where);
}

void read_rope(const json& j, HfArchitecture arch, LayerConfig& c, int positions, const std::string& source) {
  const json none = json::object();
  if (present(j, "rope_parameters")) check_rope_dict(j.at("rope_parameters"), "rope_parameters", source);
  if (present(j, "rope_scaling")) check_rope_dict(j.at("rope_scaling"), "rope_scaling", source);
  const json& params = present(j, "rope_parameters") ? j.at("rope_parameters") : none;
  const json& scaling = present(j, "rope_scaling") ? j.at("rope_scaling") : none;
  if (present(j, "rope_theta") && present(params, "rope_theta"))
    check_agree(j.at("rope_theta"), "rope_theta", params.at("rope_theta"), "rope_parameters.rope_theta", source);
  if (!scaling.empty() && !params.empty()) {
    for (const auto& [key, value] : scaling.items())
      if (key != "rope_theta" && key != "type" && present(params, key.c_str()))
        check_agree(value, "rope_scaling." + key, params.at(key), "rope_parameters." + key, source);
    check_agree(json(rope_type_of(scaling, source)), "rope_scaling.rope_type", json(rope_type_of(params, source)),
                "rope_parameters.rope_type", source);
  }
  // Mixtral's class default is 1e6 in both versions; every other class's 10000.
  const float default_theta = arch == HfArchitecture::Mixtral ? 1e6f : 10000.0f;
  c.rotary_base = present(params, "rope_theta") ? float_or(params, "rope_theta", default_theta, source + " rope_parameters")
                                                : float_or(j, "rope_theta", default_theta, source);
  for (const auto& [holder, field] : {std::pair<const json*, std::string>{&j, "partial_rotary_factor"},
                                      {&params, "rope_parameters.partial_rotary_factor"},
                                      {&scaling, "rope_scaling.partial_rotary_factor"}}) {
    if (float_or(*holder, "partial_rotary_factor", 1.0f, source) != 1.0f)
      unsupported(source, str_cat(field, " = ", json_text(holder->at("partial_rotary_factor")),
                                  ": this class rotates whole heads in ptdp's import"));
  }
  // transformers 5.x takes rope_scaling over rope_parameters when both are there.
  const json& s = !scaling.empty() ? scaling : params;
  const std::string field = !scaling.empty() ? "rope_scaling" : "rope_parameters";
  if (!s.empty() && rope_type_of(s, source) == "yarn") return read_yarn(s, field, c, positions, source);
  if (s.empty() || rope_type_of(s, source) != "llama3") return;
  const std::string where = source + " " + field;
  c.rope_scaling.enabled = true;
  c.rope_scaling.factor = float_or(s, "factor", 8.0f, where);
  c.rope_scaling.low_freq_factor = float_or(s, "low_freq_factor", 1.0f, where);
  c.rope_scaling.high_freq_factor = float_or(s, "high_freq_factor", 4.0f, where);
  // transformers 5 takes the context when the field is missing (4 required it).
  c.rope_scaling.original_max_position_embeddings = int_or(s, "original_max_position_embeddings", positions, where);
}

// ---------------------------------------------------------------------------------------------
// The Llama family and its mixtures of experts

// The sliding window of the Qwen classes: transformers 4 slides some layers when
// use_sliding_window is set (those from max_window_layers on), transformers 5 the
// "sliding_attention" entries of layer_types when that list is there. Either way ptdp's context
// becomes the window, within which sliding changes nothing. 0: none.
int qwen_window(const json& j, const std::string& source) {
  bool slides = bool_or(j, "use_sliding_window", false, source);
  if (present(j, "layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array()) bad_field(source, "layer_types", str_cat("is not a list: ", json_text(types)));
    for (const json& t : types) {
      if (t == "sliding_attention") {
        slides = true;
      } else if (t != "full_attention") {
        unsupported(source, str_cat("layer_types entry ", json_text(t),
                                    ": ptdp computes full_attention (and sliding_attention within the window)"));
      }
    }
  }
  return slides ? int_or(j, "sliding_window", 0, source) : 0;
}

// The layers of a Qwen MoE model that keep a dense MLP: mlp_only_layers and those where
// (i + 1) % decoder_sparse_step != 0. Returns MoeConfig::layer_pattern (empty: all MoE).
std::vector<int> qwen_layer_pattern(const json& j, int layers, const std::string& source) {
  const int step = int_or(j, "decoder_sparse_step", 1, source);
  if (step < 1) bad_field(source, "decoder_sparse_step", str_cat("= ", step, " is not >= 1"));
  std::vector<int> pattern(static_cast<std::size_t>(layers), 0);
  for (int i = 0; i < layers; ++i) pattern[static_cast<std::size_t>(i)] = (i + 1) % step == 0 ? 1 : 0;
  if (present(j, "mlp_only_layers")) {
    const json& dense = j.at("mlp_only_layers");
    if (!dense.is_array()) bad_field(source, "mlp_only_layers", str_cat("is not a list: ", json_text(dense)));
    for (const json& v : dense) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers)
        bad_field(source, "mlp_only_layers", str_cat("entry ", json_text(v), " is not a layer index below ", layers));
      pattern[static_cast<std::size_t>(v.get<int64_t>())] = 0;
    }
  }
  bool any = false, all = true;
  for (int p : pattern) any |= p != 0, all &= p != 0;
  if (!any)
    unsupported(source, "decoder_sparse_step and mlp_only_layers leave no MoE layer: convert a dense model as its "
                        "dense class");
  return all ? std::vector<int>{} : pattern;
}

// The expert count: transformers 5 writes Qwen3-MoE's as num_local_experts, 4 as num_experts;
// each class reads the other name as an alias.
int expert_count(const json& j, const std::string& source) {
  const bool local = present(j, "num_local_experts"), plain = present(j, "num_experts");
  if (local && plain) check_agree(j.at("num_local_experts"), "num_local_experts", j.at("num_experts"), "num_experts",
                                  source);
  const int e = local ? int_field(j, "num_local_experts", source) : int_field(j, "num_experts", source);
  if (e < 1) unsupported(source, "num_experts = 0: a model without experts is converted as its dense class");
  return e;
}

void read_moe(const json& j, HfArchitecture arch, GptConfig& c, const std::string& source) {
  MoeConfig& m = c.moe;
  m.num_experts = expert_count(j, source);
  m.router_topk = int_field(j, "num_experts_per_tok", source);
  m.score_function = MoeScoreFunction::Softmax;
  m.load_balancing = MoeLoadBalancing::AuxLoss;
  m.aux_loss_coeff = float_or(j, "router_aux_loss_coef", arch == HfArchitecture::Olmoe ? 0.01f : 0.001f, source);
  if (arch == HfArchitecture::Mixtral) {
    if (float_or(j, "router_jitter_noise", 0.0f, source) != 0.0f)
      unsupported(source, str_cat("router_jitter_noise = ", json_text(j.at("router_jitter_noise")),
                                  ": ptdp's router does not jitter its input"));
    m.pre_softmax = false;  // top k of the softmax, renormalised
    m.ffn_hidden_size = c.ffn_hidden_size;
    return;
  }
  m.pre_softmax = !bool_or(j, "norm_topk_prob", false, source);
  if (arch == HfArchitecture::Olmoe) {  // every layer MoE, its experts intermediate_size wide
    m.ffn_hidden_size = c.ffn_hidden_size;
    return;
  }
  m.ffn_hidden_size = int_field(j, "moe_intermediate_size", source);
  m.layer_pattern = qwen_layer_pattern(j, c.num_layers, source);
  if (arch == HfArchitecture::Qwen2Moe) {
    m.shared_expert_intermediate_size = int_field(j, "shared_expert_intermediate_size", source);
    if (m.shared_expert_intermediate_size < 1)
      unsupported(source, "shared_expert_intermediate_size = 0: Qwen2-MoE's shared expert and its gate are always there");
    m.shared_expert_gate = true;
  }
}

// Biases and q/k norms of each class of the Llama family.
void read_attention_extras(const json& j, HfArchitecture arch, GptConfig& c, const std::string& source) {
  c.add_bias_linear = false;
  c.add_qkv_bias = false;
  switch (arch) {
    case HfArchitecture::Llama: {
      const bool attention_bias = bool_or(j, "attention_bias", false, source);
      const bool mlp_bias = bool_or(j, "mlp_bias", false, source);
      if (attention_bias != mlp_bias)
        unsupported(source, str_cat("attention_bias = ", attention_bias, " with mlp_bias = ", mlp_bias,
                                    ": ptdp's linear biases are all on (add_bias_linear) or all off"));
      c.add_bias_linear = attention_bias;
      return;
    }
    case HfArchitecture::Qwen2:  // q, k and v always have biases, nothing else has
      c.add_qkv_bias = true;
      return;
    case HfArchitecture::Qwen2Moe:  // transformers 5 made the qkv bias a field; 4 always has it
      c.add_qkv_bias = bool_or(j, "qkv_bias", true, source);
      return;
    case HfArchitecture::Qwen3Moe:
    case HfArchitecture::Olmoe:
      if (bool_or(j, "attention_bias", false, source))
        unsupported(source, "attention_bias = true: ptdp has no bias on o_proj without one on the MLP");
      // Qwen3-MoE normalises each query and key head, OLMoE the whole query and key projections.
      c.qk_layernorm = true;
      if (arch == HfArchitecture::Qwen3Moe) return;
      c.qk_layernorm_across_heads = true;
      if (present(j, "clip_qkv"))
        unsupported(source, str_cat("clip_qkv = ", json_text(j.at("clip_qkv")), ": ptdp does not clamp q, k and v"));
      // q_norm is hidden_size wide whatever the head dim: only a*dh = hidden_size builds.
      if (c.attention_width() != c.hidden_size)
        unsupported(source, str_cat("head_dim = ", c.head_dim(), " with num_attention_heads = ", c.num_attention_heads,
                                    " is not hidden_size = ", c.hidden_size, " wide: OLMoE's q_norm is hidden_size "
                                    "wide"));
      return;
    default:  // Mistral, Mixtral: no biases
      return;
  }
}

// What the Llama-family classes and DeepSeek's share: the context length (also the training
// sequence), silu (SwiGLU), RMSNorm and its epsilon, RoPE and its scaling, tied embeddings, the
// init std, no hidden dropout, the attention dropout.
void read_llama_family_common(const json& j, HfArchitecture arch, GptConfig& c, const std::string& source) {
  const int positions = int_field(j, "max_position_embeddings", source);
  c.max_position_embeddings = positions;
  c.seq_length = positions;
  const std::string act = string_or(j, "hidden_act", "silu", source);
  if (act != "silu") unsupported(source, str_cat("hidden_act \"", act, "\": ptdp's SwiGLU uses silu"));
  c.layernorm_epsilon = float_or(j, "rms_norm_eps", 1e-6f, source);
  read_rope(j, arch, c, positions, source);
  c.tie_embeddings = bool_or(j, "tie_word_embeddings", false, source);
  c.init_method_std = float_or(j, "initializer_range", 0.02f, source);
  c.hidden_dropout = 0.0f;
  c.attention_dropout = float_or(j, "attention_dropout", 0.0f, source);
  c.normalization = Normalization::RMSNorm;
  c.position_embedding = PositionEmbedding::Rope;
  c.swiglu = true;
}

GptConfig llama_config(const json& j, HfArchitecture arch, const std::string& source) {
  GptConfig c;
  c.vocab_size = int_field(j, "vocab_size", source);
  c.hidden_size = int_field(j, "hidden_size", source);
  c.ffn_hidden_size = int_field(j, "intermediate_size", source);
  c.num_layers = int_field(j, "num_hidden_layers", source);
  c.num_attention_heads = int_field(j, "num_attention_heads", source);
  const int heads = c.num_attention_heads;
  const int kv = int_or(j, "num_key_value_heads", heads, source);
  c.num_query_groups = kv == heads ? 0 : kv;
  PTDP_CHECK_ARG(heads > 0 && (present(j, "head_dim") || c.hidden_size % heads == 0),
                 str_cat(source, ": hidden_size ", c.hidden_size, " is not a multiple of num_attention_heads ", heads,
                         " and there is no head_dim"));
  const int head_dim = int_or(j, "head_dim", heads > 0 ? c.hidden_size / heads : 0, source);
  c.kv_channels = heads > 0 && head_dim * heads == c.hidden_size ? 0 : head_dim;
  read_llama_family_common(j, arch, c, source);
  read_attention_extras(j, arch, c, source);
  int window = 0;
  if (arch == HfArchitecture::Mistral || arch == HfArchitecture::Mixtral) {
    window = int_or(j, "sliding_window", 0, source);
  } else if (arch == HfArchitecture::Qwen2 || arch == HfArchitecture::Qwen2Moe || arch == HfArchitecture::Qwen3Moe) {
    window = qwen_window(j, source);
  }
  // Within the window, sliding-window attention is full causal attention.
  if (window > 0 && window < c.seq_length) c.seq_length = window;
  if (hf_is_moe(arch)) read_moe(j, arch, c, source);
  return c;
}

// ---------------------------------------------------------------------------------------------
// DeepSeek-V2 and V3: multi-latent attention and DeepSeek's routers (hf_config.h)

// An optional string field that transformers does not read but DeepSeek's own code does: it must
// be what transformers computes, else the file describes two models.
void require_string(const json& j, const char* key, const std::string& want, const std::string& why,
                    const std::string& source) {
  if (!present(j, key)) return;
  const std::string v = string_or(j, key, want, source);
  if (v != want) unsupported(source, str_cat(key, " = \"", v, "\": ", why));
}

void read_deepseek_moe(const json& j, HfArchitecture arch, GptConfig& c, const std::string& source) {
  const bool v3 = arch == HfArchitecture::DeepseekV3;
  const int dense = int_or(j, "first_k_dense_replace", v3 ? 3 : 0, source);
  if (present(j, "moe_layer_freq") && int_field(j, "moe_layer_freq", source) != 1)
    unsupported(source, str_cat("moe_layer_freq = ", json_text(j.at("moe_layer_freq")),
                                ": transformers makes every layer from first_k_dense_replace on MoE (DeepSeek's own "
                                "code every moe_layer_freq-th); only 1 means the same model in both"));
  if (dense >= c.num_layers) return;  // no MoE layer: a dense model
  MoeConfig& m = c.moe;
  const char* experts_key = present(j, "n_routed_experts") ? "n_routed_experts" : v3 ? "num_local_experts" : "num_experts";
  for (const char* alias : {"num_local_experts", "num_experts"})
    if (present(j, "n_routed_experts") && present(j, alias))
      check_agree(j.at("n_routed_experts"), "n_routed_experts", j.at(alias), alias, source);
  m.num_experts = int_field(j, experts_key, source);
  if (m.num_experts < 1) unsupported(source, str_cat(experts_key, " = 0 with MoE layers (first_k_dense_replace = ", dense,
                                                      " < num_hidden_layers): the MoE layers need experts"));
  m.router_topk = int_field(j, "num_experts_per_tok", source);
  m.ffn_hidden_size = int_field(j, "moe_intermediate_size", source);
  const int shared = int_or(j, "n_shared_experts", 0, source);
  if (shared < 1)
    unsupported(source, str_cat("n_shared_experts = ", shared, ": DeepSeek's MoE layers always have shared experts"));
  m.shared_expert_intermediate_size = shared * m.ffn_hidden_size;
  if (dense > 0) {
    m.layer_pattern.assign(static_cast<std::size_t>(c.num_layers), 1);
    for (int i = 0; i < dense; ++i) m.layer_pattern[static_cast<std::size_t>(i)] = 0;
  }
  const float scale = float_or(j, "routed_scaling_factor", v3 ? 2.5f : 1.0f, source);
  if (!(scale > 0.0f)) unsupported(source, str_cat("routed_scaling_factor = ", float_text(scale), " is not > 0"));
  m.topk_scaling_factor = scale == 1.0f ? 0.0f : scale;  // 1: none
  m.aux_loss_coeff = float_or(j, "aux_loss_alpha", 0.0f, source);
  m.load_balancing = m.aux_loss_coeff == 0.0f                    ? MoeLoadBalancing::None
                     : bool_or(j, "seq_aux", false, source) ? MoeLoadBalancing::SeqAuxLoss
                                                            : MoeLoadBalancing::AuxLoss;
  const bool norm = bool_or(j, "norm_topk_prob", v3, source);
  // transformers' class defaults: V3 8 groups of which 4 are kept, V2 none.
  const int groups = int_or(j, "n_group", v3 ? 8 : 0, source), group_topk = int_or(j, "topk_group", v3 ? 4 : 0, source);
  const auto use_groups = [&](int score_topk) {
    if (groups < 1 || group_topk < 1 || group_topk > groups || m.num_experts % groups != 0)
      unsupported(source, str_cat("n_group = ", groups, " and topk_group = ", group_topk, " with ", m.num_experts,
                                  " experts: group-limited routing needs 1 <= topk_group <= n_group dividing "
                                  "n_routed_experts"));
    if (groups == 1) return;  // one group, always kept: no limit
    m.num_groups = groups;
    m.group_topk = group_topk;
    m.group_score_topk = score_topk;
  };
  if (v3) {
    require_string(j, "scoring_func", "sigmoid", "transformers' DeepSeek-V3 router scores with sigmoid", source);
    require_string(j, "topk_method", "noaux_tc", "transformers' DeepSeek-V3 router is noaux_tc", source);
    m.score_function = MoeScoreFunction::Sigmoid;
    m.enable_expert_bias = true;
    // ptdp's sigmoid router renormalises the top k for k > 1 (Megatron's), never for k = 1.
    if (norm != (m.router_topk > 1))
      unsupported(source, str_cat("norm_topk_prob = ", norm ? "true" : "false", " with num_experts_per_tok = ",
                                  m.router_topk, ": ptdp's sigmoid router renormalises the top k exactly when k > 1"));
    use_groups(2);
    if (m.num_groups > 0 && m.num_experts / m.num_groups < 2)
      unsupported(source, str_cat("n_group = ", groups, " leaves one expert per group: DeepSeek-V3 scores a group by "
                                  "its top two"));
    return;
  }
  require_string(j, "scoring_func", "softmax", "transformers' DeepSeek-V2 router scores with softmax", source);
  if (norm)
    unsupported(source, "norm_topk_prob = true: transformers' DeepSeek-V2 router never renormalises its top k "
                        "(DeepSeek's own code does): the file describes two models");
  m.score_function = MoeScoreFunction::Softmax;
  m.pre_softmax = true;
  const std::string method = string_or(j, "topk_method", "greedy", source);
  if (method == "group_limited_greedy") {
    use_groups(1);
  } else if (method != "greedy") {
    unsupported(source, str_cat("topk_method = \"", method, "\": transformers' DeepSeek-V2 router computes greedy "
                                "and group_limited_greedy"));
  }
}

GptConfig deepseek_config(const json& j, HfArchitecture arch, const std::string& source) {
  GptConfig c;
  c.vocab_size = int_field(j, "vocab_size", source);
  c.hidden_size = int_field(j, "hidden_size", source);
  c.ffn_hidden_size = int_field(j, "intermediate_size", source);
  c.num_layers = int_field(j, "num_hidden_layers", source);
  c.num_attention_heads = int_field(j, "num_attention_heads", source);
  const int kv = int_or(j, "num_key_value_heads", c.num_attention_heads, source);
  if (kv != c.num_attention_heads)
    unsupported(source, str_cat("num_key_value_heads = ", kv, " is not num_attention_heads = ", c.num_attention_heads,
                                ": multi-latent attention expands every head's key and value from the latent"));
  c.multi_latent_attention = true;
  c.qk_layernorm = true;  // q_a_layernorm and kv_a_layernorm
  c.q_lora_rank = int_or(j, "q_lora_rank", 0, source);
  if (present(j, "q_lora_rank") && c.q_lora_rank == 0)
    unsupported(source, "q_lora_rank = 0: no query latent is q_lora_rank = null (a plain q_proj)");
  c.kv_lora_rank = int_field(j, "kv_lora_rank", source);
  c.qk_head_dim = int_field(j, "qk_nope_head_dim", source);
  c.qk_pos_emb_head_dim = int_field(j, "qk_rope_head_dim", source);
  c.v_head_dim = int_field(j, "v_head_dim", source);
  read_llama_family_common(j, arch, c, source);
  c.add_bias_linear = false;
  c.add_qkv_bias = false;
  if (bool_or(j, "attention_bias", false, source))
    unsupported(source, "attention_bias = true: ptdp's multi-latent attention has no biases on q_a_proj, "
                        "kv_a_proj_with_mqa and o_proj");
  if (bool_or(j, "mlp_bias", false, source))
    unsupported(source, "mlp_bias = true: DeepSeek-V2's dense MLPs would have biases, which ptdp has only together "
                        "with the attention's (add_bias_linear)");
  read_deepseek_moe(j, arch, c, source);
  return c;
}

}  // namespace

const char* hf_model_type(HfArchitecture a) {
  const HfNames* n = hf_names(a);
  return n ? n->model_type : "unknown";
}

const char* hf_class_name(HfArchitecture a) {
  const HfNames* n = hf_names(a);
  return n ? n->class_name : "unknown";
}

bool hf_is_moe(HfArchitecture a) {
  return a == HfArchitecture::Mixtral || a == HfArchitecture::Qwen3Moe || a == HfArchitecture::Qwen2Moe ||
         a == HfArchitecture::Olmoe;
}

bool hf_is_deepseek(HfArchitecture a) { return a == HfArchitecture::DeepseekV2 || a == HfArchitecture::DeepseekV3; }

bool hf_rope_interleave(HfArchitecture a, const json& base) {
  if (a == HfArchitecture::DeepseekV2) return true;
  if (a != HfArchitecture::DeepseekV3) return false;
  if (!base.is_object() || !present(base, "rope_interleave")) return true;
  return bool_or(base, "rope_interleave", true, "the base config");
}

HfArchitecture hf_architecture_of(const json& j, const std::string& source) {
  std::string type = string_or(j, "model_type", "", source);
  if (type.empty() && present(j, "architectures") && j.at("architectures").is_array() &&
      !j.at("architectures").empty() && j.at("architectures")[0].is_string()) {
    const std::string cls = j.at("architectures")[0].get<std::string>();
    for (HfArchitecture a : kArchitectures)
      if (cls == hf_class_name(a)) return a;
    type = cls;
  }
  if (type.empty()) bad_field(source, "model_type", "is missing (and \"architectures\" names no known class)");
  for (HfArchitecture a : kArchitectures)
    if (type == hf_model_type(a)) return a;
  unsupported(source, str_cat("model_type \"", type,
                              "\" is not one ptdp converts (gpt2, llama, mistral, qwen2, mixtral, qwen3_moe, "
                              "qwen2_moe, olmoe, deepseek_v2, deepseek_v3)"));
}

HfConfig hf_config_from_json(const json& j, const std::string& source) {
  PTDP_CHECK_ARG(j.is_object(), str_cat(source, ": a config must be a JSON object"));
  HfConfig out;
  out.architecture = hf_architecture_of(j, source);
  refuse_generic_settings(j, source);
  if (out.architecture == HfArchitecture::Gpt2) {
    out.model = gpt2_config(j, source);
  } else if (hf_is_deepseek(out.architecture)) {
    out.model = deepseek_config(j, out.architecture, source);
    out.rope_interleave = out.architecture == HfArchitecture::DeepseekV2 || bool_or(j, "rope_interleave", true, source);
    // transformers 5 writes num_nextn_predict_layers; num_mtp_layers is its attribute name.
    if (present(j, "num_nextn_predict_layers") && present(j, "num_mtp_layers"))
      check_agree(j.at("num_nextn_predict_layers"), "num_nextn_predict_layers", j.at("num_mtp_layers"),
                  "num_mtp_layers", source);
    out.nextn_predict_layers = present(j, "num_nextn_predict_layers") ? int_field(j, "num_nextn_predict_layers", source)
                                                                      : int_or(j, "num_mtp_layers", 0, source);
  } else {
    out.model = llama_config(j, out.architecture, source);
  }
  try {
    out.model.validate(1);
  } catch (const Error& e) {
    throw_error(e.code(), str_cat(source, ": ", e.what()));
  }
  return out;
}

namespace {

// Whether the checkpoint in `dir` holds `name` (model.safetensors.index.json's weight map, else
// model.safetensors' header); false when neither is readable (the load reports that).
bool checkpoint_has(const std::string& dir, const std::string& name) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json", single = fs::path(dir) / "model.safetensors";
  try {
    if (fs::exists(index)) {
      const json j = json::parse(read_regular_file(index.string(), "index", kMaxJsonFileBytes), nullptr, false);
      return j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object() &&
             j.at("weight_map").contains(name);
    }
    if (fs::exists(single)) return SafetensorsFile(single.string()).has(name);
  } catch (const Error&) {
  }
  return false;
}

}  // namespace

HfConfig read_hf_config(const std::string& dir) {
  PTDP_CHECK_ARG(!dir.empty(), std::string("the Hugging Face directory is empty"));
  const std::string path = (fs::path(dir) / "config.json").string();
  const json j = json::parse(read_regular_file(path, "config", kMaxJsonFileBytes), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw_io_error(path, "is not valid JSON");
  if (!j.is_object()) throw_io_error(path, "is not a JSON object");
  HfConfig hf = hf_config_from_json(j, path);
  // DeepSeek's multi-token prediction layers are imported where the checkpoint holds them
  // (transformers writes num_nextn_predict_layers without them).
  const int L = hf.model.num_layers;
  if (hf_is_deepseek(hf.architecture) && hf.nextn_predict_layers > 0 &&
      checkpoint_has(dir, str_cat("model.layers.", L, ".eh_proj.weight"))) {
    // DeepSeek's MTP layer L + k is MoE from first_k_dense_replace on, as its decoder layers; ptdp's
    // are of the decoder's last layer's kind (GptConfig::mtp_moe()). They differ only where the
    // decoder is dense and an MTP layer is not.
    const int dense = int_or(j, "first_k_dense_replace", hf.architecture == HfArchitecture::DeepseekV3 ? 3 : 0, path);
    if (!hf.model.moe.enabled() && dense < L + hf.nextn_predict_layers)
      unsupported(path, str_cat("first_k_dense_replace = ", dense, " makes multi-token prediction layer model.layers.",
                                dense, ".* MoE while the ", L, " decoder layers are dense: ptdp's MTP layers are of "
                                "the decoder's last layer's kind"));
    hf.model.mtp_num_layers = hf.nextn_predict_layers;
    try {
      hf.model.validate(1);
    } catch (const Error& e) {
      throw_error(e.code(), str_cat(path, ": ", e.what()));
    }
  }
  return hf;
}

HfArchitecture hf_default_architecture(const GptConfig& c) {
  if (c.multi_latent_attention)
    return c.moe.enabled() && c.moe.score_function == MoeScoreFunction::Softmax ? HfArchitecture::DeepseekV2
                                                                                 : HfArchitecture::DeepseekV3;
  if (c.moe.enabled()) {
    if (c.qk_layernorm) return c.qk_layernorm_across_heads ? HfArchitecture::Olmoe : HfArchitecture::Qwen3Moe;
    return c.moe.shared_expert_intermediate_size > 0 ? HfArchitecture::Qwen2Moe : HfArchitecture::Mixtral;
  }
  if (c.normalization == Normalization::LayerNorm && c.learned_positions()) return HfArchitecture::Gpt2;
  if (!c.add_bias_linear && c.add_qkv_bias) return HfArchitecture::Qwen2;
  return c.normalization == Normalization::LayerNorm ? HfArchitecture::Gpt2 : HfArchitecture::Llama;
}

namespace {

// What the MoE classes share: Megatron's routing options that none of them has.
void check_moe_common(const GptConfig& c, HfArchitecture a, const std::function<void(const std::string&)>& refuse) {
  const MoeConfig& m = c.moe;
  if (!m.enabled()) refuse("it is a mixture of experts, the model is dense");
  if (m.score_function != MoeScoreFunction::Softmax) refuse("its router scores with softmax (--moe-router-score-function)");
  if (m.topk_scaling_factor != 0.0f) refuse("its router has no --moe-router-topk-scaling-factor");
  if (m.num_groups > 0) refuse("its router has no group-limited routing (--moe-router-num-groups)");
  if (m.enable_expert_bias) refuse("its router has no expert bias (--moe-router-enable-expert-bias)");
  if (m.capacity_factor > 0.0f) refuse("its experts drop no tokens (--moe-expert-capacity-factor)");
  if (c.add_bias_linear) refuse("its experts have no biases (--disable-bias-linear)");
  if (a == HfArchitecture::Mixtral) {
    if (m.pre_softmax) refuse("Mixtral renormalises the top-k probabilities (no --moe-router-pre-softmax)");
    if (m.shared_expert_intermediate_size > 0) refuse("Mixtral has no shared experts");
    if (!m.layer_pattern.empty())
      for (int p : m.layer_pattern)
        if (p == 0) refuse("every Mixtral layer is MoE (--moe-layer-freq)");
    if (c.qkv_bias()) refuse("Mixtral's linear layers have no biases");
    if (c.qk_layernorm) refuse("Mixtral has no q/k norms");
    if (c.rope_scaling.enabled || c.uses_yarn()) refuse("transformers 4's Mixtral has no rope_scaling");
  } else if (a == HfArchitecture::Qwen2Moe) {
    if (m.shared_expert_intermediate_size == 0 || !m.shared_expert_gate)
      refuse("Qwen2-MoE has a gated shared expert (--moe-shared-expert-intermediate-size, --moe-shared-expert-gate)");
    if (!c.add_qkv_bias) refuse("transformers 4's Qwen2-MoE has a qkv bias (--add-qkv-bias)");
    if (c.qk_layernorm) refuse("Qwen2-MoE has no q/k norms");
    if (c.attention_width() != c.hidden_size) refuse("Qwen2-MoE's head dim is hidden_size / num_attention_heads");
  } else if (a == HfArchitecture::Qwen3Moe) {
    if (m.shared_expert_intermediate_size > 0) refuse("Qwen3-MoE has no shared experts");
    if (c.qkv_bias()) refuse("Qwen3-MoE's linear layers have no biases");
    if (!c.qk_layernorm) refuse("Qwen3-MoE has q/k norms (--qk-layernorm)");
    if (c.qk_layernorm_across_heads)
      refuse("Qwen3-MoE's q/k norms are over each head, the model's across the heads (--qk-layernorm-across-heads)");
  } else {
    if (m.shared_expert_intermediate_size > 0) refuse("OLMoE has no shared experts");
    for (int p : m.layer_pattern)
      if (p == 0) refuse("every OLMoE layer is MoE (--moe-layer-freq)");
    if (c.qkv_bias()) refuse("OLMoE's linear layers have no biases");
    if (!c.qk_layernorm || !c.qk_layernorm_across_heads)
      refuse("OLMoE has q/k norms over the whole query and key projections (--qk-layernorm "
             "--qk-layernorm-across-heads)");
    if (c.attention_width() != c.hidden_size) refuse("OLMoE's head dim is hidden_size / num_attention_heads");
  }
}

// DeepSeek-V2/V3: multi-latent attention with both latent norms, SwiGLU MLPs without biases, the
// first k layers dense and the others MoE with shared experts, V3's or V2's router.
void check_deepseek(const GptConfig& c, HfArchitecture a, const std::function<void(const std::string&)>& refuse) {
  const MoeConfig& m = c.moe;
  const bool v3 = a == HfArchitecture::DeepseekV3;
  if (!c.multi_latent_attention) refuse("it has multi-latent attention (--multi-latent-attention)");
  if (!c.qk_layernorm) refuse("it normalises the attention latents (--qk-layernorm)");
  if (c.normalization != Normalization::RMSNorm) refuse("it uses RMSNorm, the model LayerNorm");
  if (!c.rope()) refuse("it uses rotary positions (RoPE), the model does not");
  if (!c.swiglu) refuse("its MLPs are SwiGLU, the model's are not");
  if (c.rotary_percent != 1.0f) refuse("RoPE rotates the whole qk_rope_head_dim, the model --rotary-percent " +
                                       float_text(c.rotary_percent));
  if (c.rope_scaling.enabled) refuse("its rope_parameters have no Llama 3.1 scaling (--use-rope-scaling)");
  if (c.qkv_bias() || c.add_bias_linear) refuse("its linear layers have no biases (--disable-bias-linear)");
  if (c.query_groups() != c.num_attention_heads) refuse("multi-latent attention has a key and value per head");
  if (c.mtp_num_layers > 0 && c.mtp_moe() != m.enabled())
    refuse(str_cat("its multi-token prediction layers are MoE exactly when the model has experts; the model's are ",
                   c.mtp_moe() ? "MoE" : "dense"));
  if (!m.enabled()) return;  // written with first_k_dense_replace = num_hidden_layers (+ the MTP layers)
  bool seen_moe = false;
  for (int i = 0; i < c.num_layers; ++i) {
    if (m.is_moe_layer(i)) seen_moe = true;
    else if (seen_moe) refuse("its dense layers are the first ones (first_k_dense_replace), then every layer is MoE "
                              "(--moe-layer-freq)");
  }
  if (m.shared_expert_intermediate_size == 0 || m.shared_expert_intermediate_size % c.moe_ffn() != 0)
    refuse(str_cat("its shared experts are n_shared_experts >= 1 times moe_intermediate_size wide: "
                   "--moe-shared-expert-intermediate-size ", m.shared_expert_intermediate_size,
                   " is no multiple of --moe-ffn-hidden-size ", c.moe_ffn()));
  if (m.shared_expert_gate) refuse("its shared experts have no gate (--moe-shared-expert-gate)");
  if (m.capacity_factor > 0.0f) refuse("its experts drop no tokens (--moe-expert-capacity-factor)");
  if (m.z_loss_coeff > 0.0f) refuse("its router has no z-loss (--moe-z-loss-coeff)");
  // The group score ptdp computes: group_score_topk, or Megatron's k / group_topk.
  const int score_topk = m.group_topk == 0 ? 0 : m.group_score_topk > 0 ? m.group_score_topk : m.router_topk / m.group_topk;
  if (v3) {
    if (m.score_function != MoeScoreFunction::Sigmoid)
      refuse("its router scores with sigmoid (--moe-router-score-function sigmoid); softmax routers are DeepSeek-V2's");
    if (!m.enable_expert_bias) refuse("its router has the expert bias e_score_correction_bias "
                                      "(--moe-router-enable-expert-bias)");
    if (m.group_topk > 0 && score_topk != 2)
      refuse(str_cat("it scores a group by its top-2 sum (--moe-router-group-score-topk 2), the model by its top ",
                     score_topk));
    return;
  }
  if (m.score_function != MoeScoreFunction::Softmax) refuse("its router scores with softmax");
  if (!m.pre_softmax) refuse("its router takes the top k of the softmax over all experts (--moe-router-pre-softmax)");
  if (m.enable_expert_bias) refuse("its router has no expert bias (--moe-router-enable-expert-bias)");
  if (m.group_topk > 0 && score_topk != 1)
    refuse(str_cat("its group_limited_greedy scores a group by its best expert (--moe-router-group-score-topk 1), the "
                   "model by its top ", score_topk));
}

}  // namespace

void check_hf_architecture(const GptConfig& c, HfArchitecture a) {
  PTDP_CHECK_ARG(a != HfArchitecture::Auto, std::string("check_hf_architecture needs an architecture, not Auto"));
  PTDP_CHECK_ARG(hf_names(a) != nullptr,
                 str_cat("check_hf_architecture: ", static_cast<int>(a), " is not an HfArchitecture"));
  const std::string cls = hf_class_name(a);
  const auto refuse = [&](const std::string& why) {
    throw_error(ErrorCode::Unsupported, str_cat("the model cannot be written as ", cls, ": ", why));
  };
  if (hf_is_deepseek(a)) return check_deepseek(c, a, refuse);
  if (c.multi_latent_attention)
    refuse("it has multi-latent attention (--multi-latent-attention): write it as deepseek_v2 or deepseek_v3");
  if (c.mtp_num_layers > 0) refuse("it has no multi-token prediction layers (--mtp-num-layers)");
  if (c.moe.enabled() && !hf_is_moe(a)) refuse("it is a mixture of experts (--num-experts)");
  if (c.qk_layernorm && a != HfArchitecture::Qwen3Moe && a != HfArchitecture::Olmoe)
    refuse("it has q/k norms (--qk-layernorm)");
  if (a == HfArchitecture::Gpt2) {
    if (c.normalization != Normalization::LayerNorm) refuse("GPT-2 uses LayerNorm, the model RMSNorm");
    if (!c.learned_positions()) refuse("GPT-2 has learned absolute positions, the model does not");
    if (c.swiglu) refuse("GPT-2's MLP is GeLU, the model's SwiGLU");
    if (!c.add_bias_linear) refuse("GPT-2's linear layers have biases, the model's do not");
    if (c.query_groups() != c.num_attention_heads) refuse("GPT-2 has no grouped-query attention");
    if (c.attention_width() != c.hidden_size) refuse("GPT-2's head dim is hidden_size / num_attention_heads");
    return;
  }
  if (c.normalization != Normalization::RMSNorm) refuse("it uses RMSNorm, the model LayerNorm");
  if (!c.rope()) refuse("it uses rotary positions (RoPE), the model does not");
  if (!c.swiglu) refuse("its MLP is SwiGLU, the model's is not");
  if (c.rotary_percent != 1.0f)
    refuse("RoPE rotates whole heads, the model --rotary-percent " + float_text(c.rotary_percent));
  if (hf_is_moe(a)) {
    check_moe_common(c, a, refuse);
  } else if (a == HfArchitecture::Llama) {
    if (!c.add_bias_linear && c.add_qkv_bias) refuse("a qkv bias alone is Qwen2's (write it as qwen2)");
  } else if (a == HfArchitecture::Mistral) {
    if (c.qkv_bias() || c.add_bias_linear) refuse("Mistral's linear layers have no biases");
    if (c.rope_scaling.enabled || c.uses_yarn()) refuse("Mistral's config has no rope_scaling");
  } else {
    if (c.add_bias_linear || !c.add_qkv_bias) refuse("Qwen2 has a qkv bias (--add-qkv-bias) and no other bias");
    if (c.attention_width() != c.hidden_size) refuse("Qwen2's head dim is hidden_size / num_attention_heads");
  }
}

namespace {

// YaRN's dict: factor and the original context always; the other fields where they differ
// from transformers' defaults or the base config has them (so that a config round-trips).
json yarn_dict(const GptConfig& c, const json& base) {
  const YarnScaling& y = c.yarn;
  json d = {{"rope_type", "yarn"},
            {"factor", shortest(y.factor)},
            {"original_max_position_embeddings", y.original_max_position_embeddings}};
  const json none = json::object();
  const json& old = present(base, "rope_parameters") ? base.at("rope_parameters")
                    : present(base, "rope_scaling") ? base.at("rope_scaling")
                                                    : none;
  const auto keep = [&](const char* key, bool differs) { return differs || (old.is_object() && present(old, key)); };
  if (keep("beta_fast", y.beta_fast != 32.0f)) d["beta_fast"] = shortest(y.beta_fast);
  if (keep("beta_slow", y.beta_slow != 1.0f)) d["beta_slow"] = shortest(y.beta_slow);
  if (keep("mscale", y.mscale_all_dim > 0.0f)) d["mscale"] = shortest(y.mscale);
  if (keep("mscale_all_dim", y.mscale_all_dim > 0.0f)) d["mscale_all_dim"] = shortest(y.mscale_all_dim);
  if (keep("truncate", !y.truncate)) d["truncate"] = y.truncate;
  if (keep("type", false)) d["type"] = "yarn";  // transformers 5 keeps transformers 4's key beside rope_type
  return d;
}

// The RoPE settings in both spellings: rope_parameters for transformers 5, rope_theta (and
// rope_scaling where the class reads it) for transformers 4.
void write_rope(const GptConfig& c, HfArchitecture a, json& j) {
  json params = {{"rope_theta", shortest(c.rotary_base)}, {"rope_type", "default"}};
  json scaling = nullptr;
  if (c.rope_scaling.enabled) {
    scaling = {{"rope_type", "llama3"},
               {"factor", shortest(c.rope_scaling.factor)},
               {"low_freq_factor", shortest(c.rope_scaling.low_freq_factor)},
               {"high_freq_factor", shortest(c.rope_scaling.high_freq_factor)},
               {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
    params.update(scaling);
  }
  if (c.uses_yarn()) {
    scaling = yarn_dict(c, j);
    params.update(scaling);
  }
  j["rope_parameters"] = params;
  j["rope_theta"] = shortest(c.rotary_base);
  if (a != HfArchitecture::Mistral && a != HfArchitecture::Mixtral) j["rope_scaling"] = scaling;
}

// The per-layer MoE pattern of a Qwen config, or empty when the config has none ptdp reads.
std::vector<int> layer_pattern_of(const json& j, int layers) {
  try {
    std::vector<int> p = qwen_layer_pattern(j, layers, "base config");
    if (p.empty()) p.assign(static_cast<std::size_t>(layers), 1);
    return p;
  } catch (const Error&) {
    return {};
  }
}

void write_moe(const GptConfig& c, HfArchitecture a, json& j) {
  const MoeConfig& m = c.moe;
  j["num_experts_per_tok"] = m.router_topk;
  j["router_aux_loss_coef"] = shortest(m.aux_loss_coeff);
  if (a == HfArchitecture::Mixtral) {
    j["num_local_experts"] = m.num_experts;
    j["intermediate_size"] = c.moe_ffn();
    j["router_jitter_noise"] = 0.0;
    return;
  }
  j["num_experts"] = m.num_experts;
  j["norm_topk_prob"] = !m.pre_softmax;
  if (a == HfArchitecture::Olmoe) {  // every layer MoE, intermediate_size the experts' width
    j["intermediate_size"] = c.moe_ffn();
    j["clip_qkv"] = nullptr;
    return;
  }
  if (a == HfArchitecture::Qwen3Moe) j["num_local_experts"] = m.num_experts;  // transformers 5's name
  j["moe_intermediate_size"] = c.moe_ffn();
  // The base's decoder_sparse_step and mlp_only_layers when they describe the model's layers; else
  // every layer sparse but the dense ones listed.
  std::vector<int> pattern(static_cast<std::size_t>(c.num_layers));
  json dense = json::array();
  for (int i = 0; i < c.num_layers; ++i) {
    pattern[static_cast<std::size_t>(i)] = m.is_moe_layer(i) ? 1 : 0;
    if (!m.is_moe_layer(i)) dense.push_back(i);
  }
  const bool described = j.contains("decoder_sparse_step") || j.contains("mlp_only_layers");
  if (!described || layer_pattern_of(j, c.num_layers) != pattern) {
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = dense;
  }
  if (a == HfArchitecture::Qwen2Moe) {
    j["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
    j["qkv_bias"] = true;
  }
}

// A window the model's context fits in changes nothing; a narrower one ptdp never computed.
void write_window(const GptConfig& c, HfArchitecture a, json& j) {
  const auto window_fits = [&] {
    return j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
           j["sliding_window"].get<int64_t>() >= c.seq_length;
  };
  if (a == HfArchitecture::Mistral || a == HfArchitecture::Mixtral) {
    if (!window_fits()) j["sliding_window"] = nullptr;
    return;
  }
  if (a != HfArchitecture::Qwen2 && a != HfArchitecture::Qwen2Moe && a != HfArchitecture::Qwen3Moe) return;
  if (!j.contains("use_sliding_window") || !j["use_sliding_window"].is_boolean() ||
      (j["use_sliding_window"].get<bool>() && !window_fits()))
    j["use_sliding_window"] = false;
  // transformers 5 reads layer_types, when there, instead of use_sliding_window.
  if (j.contains("layer_types") &&
      (!window_fits() || !j["layer_types"].is_array() || j["layer_types"].size() != static_cast<std::size_t>(c.num_layers)))
    j["layer_types"] = json(std::vector<std::string>(static_cast<std::size_t>(c.num_layers), "full_attention"));
}

// DeepSeek's fields (check_deepseek has accepted the model). `j` holds the base config's fields;
// those that only DeepSeek's own code reads (scoring_func, topk_method of V3, moe_layer_freq,
// aux_loss_alpha, seq_aux) are written where the base has them or the model sets them.
void write_deepseek(const GptConfig& c, HfArchitecture a, json& j) {
  const MoeConfig& m = c.moe;
  const bool v3 = a == HfArchitecture::DeepseekV3;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.ffn();
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_head_dim;
  j["qk_rope_head_dim"] = c.qk_pos_emb_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["head_dim"] = c.qk_pos_emb_head_dim;  // transformers' derived fields, written as it writes them
  j["qk_head_dim"] = c.mla_qk_dim();
  j["max_position_embeddings"] = c.max_positions();
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = shortest(c.layernorm_epsilon);
  j["attention_dropout"] = shortest(c.attention_dropout);
  j["attention_bias"] = false;
  if (!v3) j["mlp_bias"] = false;
  write_rope(c, a, j);
  if (v3) j["rope_interleave"] = hf_rope_interleave(a, j);
  if (c.mtp_num_layers > 0) j["num_nextn_predict_layers"] = c.mtp_num_layers;
  if (!m.enabled()) {  // every layer dense, the multi-token prediction layers too
    j["first_k_dense_replace"] = c.num_layers + c.mtp_num_layers;
    return;
  }
  int first_moe = 0;
  while (!m.is_moe_layer(first_moe)) ++first_moe;
  j["first_k_dense_replace"] = first_moe;
  if (j.contains("moe_layer_freq")) j["moe_layer_freq"] = 1;
  j["n_routed_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.router_topk;
  j["moe_intermediate_size"] = c.moe_ffn();
  j["n_shared_experts"] = m.shared_expert_intermediate_size / c.moe_ffn();
  j["routed_scaling_factor"] = m.topk_scaling_factor > 0.0f ? shortest(m.topk_scaling_factor) : 1.0;
  j["norm_topk_prob"] = v3 && m.router_topk > 1;
  const bool groups = m.group_topk > 0;
  j["n_group"] = groups ? json(m.num_groups) : v3 ? json(1) : json(nullptr);
  j["topk_group"] = groups ? json(m.group_topk) : v3 ? json(1) : json(nullptr);
  if (v3) {
    if (j.contains("scoring_func")) j["scoring_func"] = "sigmoid";
    if (j.contains("topk_method")) j["topk_method"] = "noaux_tc";
  } else {
    if (j.contains("scoring_func")) j["scoring_func"] = "softmax";
    j["topk_method"] = groups ? "group_limited_greedy" : "greedy";
  }
  const float alpha = m.load_balancing == MoeLoadBalancing::None ? 0.0f : m.aux_loss_coeff;
  if (alpha > 0.0f || j.contains("aux_loss_alpha")) j["aux_loss_alpha"] = shortest(alpha);
  if (m.load_balancing == MoeLoadBalancing::SeqAuxLoss || j.contains("seq_aux"))
    j["seq_aux"] = m.load_balancing == MoeLoadBalancing::SeqAuxLoss;
}

}  // namespace

json hf_config_to_json(const GptConfig& c, HfArchitecture a, StDType dtype, const json& base) {
  check_hf_architecture(c, a);
  PTDP_CHECK_ARG(base.is_object() || base.is_null(), std::string("the base config must be a JSON object"));
  PTDP_CHECK_ARG(dtype == StDType::F32 || dtype == StDType::BF16 || dtype == StDType::F16,
                 str_cat("a Hugging Face checkpoint is written as F32, BF16 or F16, not ", st_dtype_name(dtype)));
  json j = base.is_object() ? base : json::object();
  const char* torch_dtype = dtype == StDType::BF16 ? "bfloat16" : dtype == StDType::F16 ? "float16" : "float32";
  j["model_type"] = hf_model_type(a);
  j["architectures"] = json::array({hf_class_name(a)});
  j["vocab_size"] = c.vocab_size;
  j["torch_dtype"] = torch_dtype;
  if (j.contains("dtype")) j["dtype"] = torch_dtype;  // transformers 5's name, read before torch_dtype
  j["initializer_range"] = shortest(c.init_method_std);
  j["tie_word_embeddings"] = c.tie_embeddings;
  if (a == HfArchitecture::Gpt2) {
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_positions"] = c.max_positions();
    if (j.contains("n_ctx")) j["n_ctx"] = c.max_positions();
    j["n_inner"] = c.ffn() == 4 * c.hidden_size ? json(nullptr) : json(c.ffn());
    const std::string act = j.contains("activation_function") && j["activation_function"].is_string()
                                ? j["activation_function"].get<std::string>()
                                : std::string();
    if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast") j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = shortest(c.layernorm_epsilon);
    j["resid_pdrop"] = shortest(c.hidden_dropout);
    j["attn_pdrop"] = shortest(c.attention_dropout);
    j["embd_pdrop"] = shortest(c.hidden_dropout);
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    return j;
  }
  if (hf_is_deepseek(a)) {
    write_deepseek(c, a, j);
    return j;
  }
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.ffn();
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.query_groups();
  // Qwen2's and OLMoE's head dim is hidden_size / num_attention_heads (no head_dim field); a base
  // config's null head_dim (transformers 5's Mixtral) means that too and stays.
  const bool null_kept = j.contains("head_dim") && j["head_dim"].is_null() && c.attention_width() == c.hidden_size;
  if (a != HfArchitecture::Qwen2 && a != HfArchitecture::Qwen2Moe && a != HfArchitecture::Olmoe && !null_kept)
    j["head_dim"] = c.head_dim();
  j["max_position_embeddings"] = c.max_positions();
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = shortest(c.layernorm_epsilon);
  j["attention_dropout"] = shortest(c.attention_dropout);
  write_rope(c, a, j);
  if (a == HfArchitecture::Llama) {
    j["attention_bias"] = c.add_bias_linear;
    j["mlp_bias"] = c.add_bias_linear;
  } else if (a == HfArchitecture::Qwen3Moe || a == HfArchitecture::Olmoe) {
    j["attention_bias"] = false;
  }
  write_window(c, a, j);
  if (hf_is_moe(a)) write_moe(c, a, j);
  return j;
}

void check_hf_model_matches(const GptConfig& hf, const GptConfig& model, const std::string& source) {
  const auto mismatch = [&](const char* field, const std::string& a, const std::string& b) {
    throw_error(ErrorCode::InvalidArgument,
                str_cat("the Hugging Face config ", source, " has ", field, " = ", a, "; the model has ", b));
  };
  const MoeConfig &hm = hf.moe, &mm = model.moe;
  const std::pair<const char*, std::pair<int64_t, int64_t>> ints[] = {
      {"num_layers", {hf.num_layers, model.num_layers}},
      {"hidden_size", {hf.hidden_size, model.hidden_size}},
      {"num_attention_heads", {hf.num_attention_heads, model.num_attention_heads}},
      {"num_query_groups", {hf.query_groups(), model.query_groups()}},
      {"kv_channels", {hf.head_dim(), model.head_dim()}},
      {"ffn_hidden_size", {hf.ffn(), model.ffn()}},
      {"vocab_size", {hf.vocab_size, model.vocab_size}},
      {"untie_embeddings_and_output_weights", {!hf.tie_embeddings, !model.tie_embeddings}},
      {"normalization (0 LayerNorm, 1 RMSNorm)",
       {static_cast<int>(hf.normalization), static_cast<int>(model.normalization)}},
      {"swiglu", {hf.swiglu, model.swiglu}},
      {"position_embedding_type (0 learned_absolute, 1 rope, 2 none)",
       {static_cast<int>(hf.position_embedding), static_cast<int>(model.position_embedding)}},
      {"add_bias_linear", {hf.add_bias_linear, model.add_bias_linear}},
      {"add_qkv_bias", {hf.qkv_bias(), model.qkv_bias()}},
      {"qk_layernorm", {hf.qk_layernorm, model.qk_layernorm}},
      {"qk_layernorm_across_heads", {hf.qk_layernorm_across_heads, model.qk_layernorm_across_heads}},
      {"num_experts", {hm.num_experts, mm.num_experts}},
      {"mtp_num_layers (DeepSeek's num_nextn_predict_layers with their tensors)", {hf.mtp_num_layers, model.mtp_num_layers}},
  };
  for (const auto& [field, v] : ints)
    if (v.first != v.second) mismatch(field, std::to_string(v.first), std::to_string(v.second));
  if (hf.multi_latent_attention || model.multi_latent_attention) {
    const std::pair<const char*, std::pair<int64_t, int64_t>> mla[] = {
        {"multi_latent_attention", {hf.multi_latent_attention, model.multi_latent_attention}},
        {"q_lora_rank", {hf.q_lora_rank, model.q_lora_rank}},
        {"kv_lora_rank", {hf.kv_lora_rank, model.kv_lora_rank}},
        {"qk_head_dim", {hf.qk_head_dim, model.qk_head_dim}},
        {"qk_pos_emb_head_dim", {hf.qk_pos_emb_head_dim, model.qk_pos_emb_head_dim}},
        {"v_head_dim", {hf.v_head_dim, model.v_head_dim}},
    };
    for (const auto& [field, v] : mla)
      if (v.first != v.second) mismatch(field, std::to_string(v.first), std::to_string(v.second));
  }
  if (hm.enabled()) {
    const std::pair<const char*, std::pair<int64_t, int64_t>> moe_ints[] = {
        {"moe_router_topk", {hm.router_topk, mm.router_topk}},
        {"moe_ffn_hidden_size", {hf.moe_ffn(), model.moe_ffn()}},
        {"moe_shared_expert_intermediate_size", {hm.shared_expert_intermediate_size, mm.shared_expert_intermediate_size}},
        {"moe_shared_expert_gate", {hm.shared_expert_gate, mm.shared_expert_gate}},
        {"moe_router_pre_softmax", {hm.pre_softmax, mm.pre_softmax}},
        {"moe_router_score_function (0 softmax, 1 sigmoid)",
         {static_cast<int>(hm.score_function), static_cast<int>(mm.score_function)}},
        {"moe_router_enable_expert_bias", {hm.enable_expert_bias, mm.enable_expert_bias}},
        {"moe_router_num_groups", {hm.group_topk > 0 ? hm.num_groups : 0, mm.group_topk > 0 ? mm.num_groups : 0}},
        {"moe_router_group_topk", {hm.group_topk, mm.group_topk}},
        {"moe_router_group_score_topk",
         {hm.group_topk > 0 ? (hm.group_score_topk > 0 ? hm.group_score_topk : hm.router_topk / hm.group_topk) : 0,
          mm.group_topk > 0 ? (mm.group_score_topk > 0 ? mm.group_score_topk : mm.router_topk / mm.group_topk) : 0}},
    };
    for (const auto& [field, v] : moe_ints)
      if (v.first != v.second) mismatch(field, std::to_string(v.first), std::to_string(v.second));
    if (hm.topk_scaling_factor != mm.topk_scaling_factor)
      mismatch("moe_router_topk_scaling_factor", float_text(hm.topk_scaling_factor), float_text(mm.topk_scaling_factor));
    for (int i = 0; i < hf.num_layers; ++i)
      if (hm.is_moe_layer(i) != mm.is_moe_layer(i))
        mismatch(str_cat("moe_layer_freq (layer ", i, " MoE)").c_str(), std::to_string(hm.is_moe_layer(i)),
                 std::to_string(mm.is_moe_layer(i)));
  }
  if (hf.learned_positions() && hf.max_positions() != model.max_positions())
    mismatch("max_position_embeddings", std::to_string(hf.max_positions()), std::to_string(model.max_positions()));
  std::vector<std::pair<const char*, std::pair<float, float>>> floats = {
      {"layernorm_epsilon", {hf.layernorm_epsilon, model.layernorm_epsilon}}};
  if (hf.rope()) {
    floats.push_back({"rotary_base", {hf.rotary_base, model.rotary_base}});
    floats.push_back({"rotary_percent", {hf.rotary_percent, model.rotary_percent}});
    if (hf.rope_scaling.enabled != model.rope_scaling.enabled)
      mismatch("use_rope_scaling", std::to_string(hf.rope_scaling.enabled), std::to_string(model.rope_scaling.enabled));
    if (hf.rope_scaling.enabled) {
      floats.push_back({"rope_scaling_factor", {hf.rope_scaling.factor, model.rope_scaling.factor}});
      floats.push_back({"rope_low_freq_factor", {hf.rope_scaling.low_freq_factor, model.rope_scaling.low_freq_factor}});
      floats.push_back(
          {"rope_high_freq_factor", {hf.rope_scaling.high_freq_factor, model.rope_scaling.high_freq_factor}});
      if (hf.rope_scaling.original_max_position_embeddings != model.rope_scaling.original_max_position_embeddings)
        mismatch("rope_original_max_position_embeddings",
                 std::to_string(hf.rope_scaling.original_max_position_embeddings),
                 std::to_string(model.rope_scaling.original_max_position_embeddings));
    }
    if (hf.uses_yarn() != model.uses_yarn())
      mismatch("rope_type", hf.uses_yarn() ? "yarn" : "rope", model.uses_yarn() ? "yarn" : "rope");
    if (hf.uses_yarn()) {
      floats.push_back({"rotary_scaling_factor", {hf.yarn.factor, model.yarn.factor}});
      floats.push_back({"mscale", {hf.yarn.mscale, model.yarn.mscale}});
      floats.push_back({"mscale_all_dim", {hf.yarn.mscale_all_dim, model.yarn.mscale_all_dim}});
      floats.push_back({"beta_fast", {hf.yarn.beta_fast, model.yarn.beta_fast}});
      floats.push_back({"beta_slow", {hf.yarn.beta_slow, model.yarn.beta_slow}});
      if (hf.yarn.original_max_position_embeddings != model.yarn.original_max_position_embeddings)
        mismatch("original_max_position_embeddings", std::to_string(hf.yarn.original_max_position_embeddings),
                 std::to_string(model.yarn.original_max_position_embeddings));
      if (hf.yarn.truncate != model.yarn.truncate)
        mismatch("yarn truncate", std::to_string(hf.yarn.truncate), std::to_string(model.yarn.truncate));
    }
  }
  for (const auto& [field, v] : floats)
    if (v.first != v.second) mismatch(field, float_text(v.first), float_text(v.second));
}

}  // namespace ptdp
