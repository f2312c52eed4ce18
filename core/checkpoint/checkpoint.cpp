#include "core/checkpoint/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/checkpoint/checkpoint_files.h"
#include "core/checkpoint/checkpoint_shards.h"
#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/save_lock.h"
#include "core/model/moe_layer_freq.h"
#include "io/json_read.h"
#include "io/json_text.h"

namespace ptdp {

namespace {

constexpr const char* kFormat = "ptdp-checkpoint";
constexpr int kFormatVersion = 1;
constexpr const char* kMetadataFile = "metadata.json";

// MoE models only (a dense model's metadata stays as it was): Megatron-Core's names.
nlohmann::json moe_to_json(const GptConfig& c) {
  static const char* const scores[] = {"softmax", "sigmoid"};
  static const char* const balancing[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};
  static const char* const drops[] = {"probs", "position"};
  static const char* const dispatchers[] = {"alltoall", "allgather"};
  const MoeConfig& m = c.moe;
  nlohmann::json j = {{"num_experts", m.num_experts},
          {"moe_layer_freq", format_moe_layer_freq(m.layer_pattern, c.num_layers)},
          {"moe_ffn_hidden_size", c.moe_ffn()},
          {"moe_shared_expert_intermediate_size", m.shared_expert_intermediate_size},
          {"moe_shared_expert_gate", m.shared_expert_gate},
          {"moe_router_topk", m.router_topk},
          {"moe_router_score_function", scores[static_cast<int>(m.score_function)]},
          {"moe_router_pre_softmax", m.pre_softmax},
          {"moe_router_topk_scaling_factor", m.topk_scaling_factor},
          {"moe_router_num_groups", m.num_groups},
          {"moe_router_group_topk", m.group_topk},
          {"moe_router_enable_expert_bias", m.enable_expert_bias},
          {"moe_router_bias_update_rate", m.bias_update_rate},
          {"moe_router_load_balancing_type", balancing[static_cast<int>(m.load_balancing)]},
          {"moe_aux_loss_coeff", m.aux_loss_coeff},
          {"moe_z_loss_coeff", m.z_loss_coeff},
          {"moe_expert_capacity_factor", m.capacity_factor},
          {"moe_token_drop_policy", drops[static_cast<int>(m.drop_policy)]},
          {"moe_pad_expert_input_to_capacity", m.pad_expert_input_to_capacity},
          {"moe_token_dispatcher_type", dispatchers[static_cast<int>(m.dispatcher)]},
          {"moe_layer_recompute", m.recompute}};
  // DeepSeek routing's settings, written only when set: the metadata of other models stays as it was.
  if (m.group_score_topk > 0) j["moe_router_group_score_topk"] = m.group_score_topk;
  if (m.topk_limited_devices > 0) j["moe_router_topk_limited_devices"] = m.topk_limited_devices;
  return j;
}

nlohmann::json config_to_json(const GptConfig& c) {
  nlohmann::json j = {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"ffn_hidden_size", c.ffn()},
          {"vocab_size", c.vocab_size},
          {"make_vocab_size_divisible_by", c.make_vocab_size_divisible_by},
          {"seq_length", c.seq_length},
          {"max_position_embeddings", c.max_positions()},
          {"hidden_dropout", c.hidden_dropout},
          {"attention_dropout", c.attention_dropout},
          {"init_method_std", c.init_method_std},
          {"layernorm_epsilon", c.layernorm_epsilon},
          {"untie_embeddings_and_output_weights", !c.tie_embeddings},
          {"recompute_granularity", recompute_name(c.recompute)},
          {"seed", c.seed},
          {"normalization", normalization_name(c.normalization)},
          {"swiglu", c.swiglu},
          {"position_embedding_type", position_embedding_name(c.position_embedding)},
          {"rotary_base", c.rotary_base},
          {"rotary_percent", c.rotary_percent},
          {"use_rope_scaling", c.rope_scaling.enabled},
          {"rope_scaling_factor", c.rope_scaling.factor},
          {"rope_low_freq_factor", c.rope_scaling.low_freq_factor},
          {"rope_high_freq_factor", c.rope_scaling.high_freq_factor},
          {"rope_original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
          {"num_query_groups", c.query_groups()},
          {"kv_channels", c.head_dim()},
          {"add_bias_linear", c.add_bias_linear},
          {"add_qkv_bias", c.add_qkv_bias},
          {"qk_layernorm", c.qk_layernorm}};
  // Only when set, as "moe": the metadata of every other model stays as it was.
  if (c.qk_layernorm_across_heads) j["qk_layernorm_across_heads"] = true;
  if (c.moe.enabled()) j["moe"] = moe_to_json(c);
  if (c.rope_type == RopeType::Yarn) {
    j["yarn"] = {{"rotary_scaling_factor", c.yarn.factor},
                 {"mscale", c.yarn.mscale},
                 {"mscale_all_dim", c.yarn.mscale_all_dim},
                 {"original_max_position_embeddings", c.yarn.original_max_position_embeddings},
                 {"beta_fast", c.yarn.beta_fast},
                 {"beta_slow", c.yarn.beta_slow},
                 {"truncate", c.yarn.truncate}};
  }
  if (c.multi_latent_attention) {  // only when set, as "moe"
    j["mla"] = {{"q_lora_rank", c.q_lora_rank},       {"kv_lora_rank", c.kv_lora_rank},
                {"qk_head_dim", c.qk_head_dim},       {"qk_pos_emb_head_dim", c.qk_pos_emb_head_dim},
                {"v_head_dim", c.v_head_dim}};
  }
  if (c.mtp_num_layers > 0) {
    j["mtp_num_layers"] = c.mtp_num_layers;
    j["mtp_loss_scaling_factor"] = c.mtp_loss_scaling_factor;
  }
  return j;
}

// A named enum value of the "model" entry; `names` in enum order.
template <typename E, std::size_t N>
E enum_from_json(const nlohmann::json& j, const char* key, const char* const (&names)[N], E fallback,
                 const std::string& source) {
  if (!j.contains(key)) return fallback;  // written before the Llama options existed
  const std::string v = j.at(key).get<std::string>();
  for (std::size_t i = 0; i < N; ++i)
    if (v == names[i]) return static_cast<E>(i);
  std::string msg = source;
  msg += ": \"model\" entry: ";
  msg += key;
  msg += " \"" + v + "\" is not known";
  throw_error(ErrorCode::Io, msg);
}

// The "yarn" object of the "model" entry, present only for --rope-type yarn (model_to_json).
void yarn_from_json(const nlohmann::json& j, GptConfig& c, const std::string& source) {
  namespace jr = json_read;
  const auto what = [&](const char* key) { return str_cat(source, ": \"model\" entry: \"yarn\": \"", key, "\""); };
  const auto f32 = [&](const char* key, float fallback) { return jr::field_or(j, key, fallback, what(key)); };
  YarnScaling& y = c.yarn;
  c.rope_type = RopeType::Yarn;
  y.factor = f32("rotary_scaling_factor", y.factor);
  y.mscale = f32("mscale", y.mscale);
  y.mscale_all_dim = f32("mscale_all_dim", y.mscale_all_dim);
  y.original_max_position_embeddings =
      jr::field_or(j, "original_max_position_embeddings", y.original_max_position_embeddings,
                   what("original_max_position_embeddings"));
  y.beta_fast = f32("beta_fast", y.beta_fast);
  y.beta_slow = f32("beta_slow", y.beta_slow);
  y.truncate = j.value("truncate", true);
}

// The "moe" object of the "model" entry (absent: a dense model, or a checkpoint that predates MoE).
void moe_from_json(const nlohmann::json& j, GptConfig& c, const std::string& source) {
  namespace jr = json_read;
  const auto what = [&](const char* key) { return str_cat(source, ": \"model\" entry: \"moe\": \"", key, "\""); };
  const auto i32 = [&](const char* key, int fallback) { return jr::field_or(j, key, fallback, what(key)); };
  const auto f32 = [&](const char* key, float fallback) { return jr::field_or(j, key, fallback, what(key)); };
  static const char* const scores[] = {"softmax", "sigmoid"};
  static const char* const balancing[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "none"};
  static const char* const drops[] = {"probs", "position"};
  static const char* const dispatchers[] = {"alltoall", "allgather"};
  MoeConfig& m = c.moe;
  m.num_experts = jr::integer<int>(j.at("num_experts"), what("num_experts"));
  try {
    m.layer_pattern = parse_moe_layer_freq(j.value("moe_layer_freq", std::string("1")), c.num_layers);
  } catch (const Error& e) {
    throw_error(ErrorCode::Io, str_cat(what("moe_layer_freq"), ": ", e.what()));
  }
  m.ffn_hidden_size = i32("moe_ffn_hidden_size", 0);
  if (m.ffn_hidden_size == c.ffn_hidden_size) m.ffn_hidden_size = 0;  // saved as the effective width
  m.shared_expert_intermediate_size = i32("moe_shared_expert_intermediate_size", 0);
  m.shared_expert_gate = j.value("moe_shared_expert_gate", false);
  m.router_topk = i32("moe_router_topk", m.router_topk);
  m.score_function = enum_from_json(j, "moe_router_score_function", scores, m.score_function, source);
  m.pre_softmax = j.value("moe_router_pre_softmax", false);
  m.topk_scaling_factor = f32("moe_router_topk_scaling_factor", m.topk_scaling_factor);
  m.num_groups = i32("moe_router_num_groups", 0);
  m.group_topk = i32("moe_router_group_topk", 0);
  m.enable_expert_bias = j.value("moe_router_enable_expert_bias", false);
  m.bias_update_rate = f32("moe_router_bias_update_rate", m.bias_update_rate);
  m.load_balancing = enum_from_json(j, "moe_router_load_balancing_type", balancing, m.load_balancing, source);
  m.aux_loss_coeff = f32("moe_aux_loss_coeff", m.aux_loss_coeff);
  m.z_loss_coeff = f32("moe_z_loss_coeff", m.z_loss_coeff);
  m.capacity_factor = f32("moe_expert_capacity_factor", m.capacity_factor);
  m.drop_policy = enum_from_json(j, "moe_token_drop_policy", drops, m.drop_policy, source);
  m.pad_expert_input_to_capacity = j.value("moe_pad_expert_input_to_capacity", false);
  m.dispatcher = enum_from_json(j, "moe_token_dispatcher_type", dispatchers, m.dispatcher, source);
  m.recompute = j.value("moe_layer_recompute", false);
  m.group_score_topk = i32("moe_router_group_score_topk", 0);
  m.topk_limited_devices = i32("moe_router_topk_limited_devices", 0);
}

GptConfig config_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    namespace jr = json_read;
    const auto what = [&](const char* key) { return str_cat(source, ": \"model\" entry: \"", key, "\""); };
    const auto i32 = [&](const char* key) { return jr::integer<int>(j.at(key), what(key)); };
    const auto f32 = [&](const char* key) { return jr::real<float>(j.at(key), what(key)); };
    GptConfig c;
    c.num_layers = i32("num_layers");
    c.hidden_size = i32("hidden_size");
    c.num_attention_heads = i32("num_attention_heads");
    c.ffn_hidden_size = i32("ffn_hidden_size");
    c.vocab_size = i32("vocab_size");
    c.make_vocab_size_divisible_by = i32("make_vocab_size_divisible_by");
    c.seq_length = i32("seq_length");
    c.max_position_embeddings = i32("max_position_embeddings");
    c.hidden_dropout = f32("hidden_dropout");
    c.attention_dropout = f32("attention_dropout");
    c.init_method_std = f32("init_method_std");
    c.layernorm_epsilon = f32("layernorm_epsilon");
    c.tie_embeddings = !j.at("untie_embeddings_and_output_weights").get<bool>();
    const std::string r = j.at("recompute_granularity").get<std::string>();
    c.recompute = r == "full" ? Recompute::Full : r == "selective" ? Recompute::Selective : Recompute::None;
    c.seed = jr::integer<uint64_t>(j.at("seed"), what("seed"));
    // The Llama-family fields (absent from checkpoints written before them: GPT defaults).
    static const char* const norms[] = {"LayerNorm", "RMSNorm"};
    static const char* const positions[] = {"learned_absolute", "rope", "none"};
    c.normalization = enum_from_json(j, "normalization", norms, Normalization::LayerNorm, source);
    c.position_embedding = enum_from_json(j, "position_embedding_type", positions, PositionEmbedding::LearnedAbsolute, source);
    c.swiglu = j.value("swiglu", false);
    c.rotary_base = jr::field_or(j, "rotary_base", c.rotary_base, what("rotary_base"));
    c.rotary_percent = jr::field_or(j, "rotary_percent", c.rotary_percent, what("rotary_percent"));
    c.rope_scaling.enabled = j.value("use_rope_scaling", false);
    c.rope_scaling.factor = jr::field_or(j, "rope_scaling_factor", c.rope_scaling.factor, what("rope_scaling_factor"));
    c.rope_scaling.low_freq_factor = jr::field_or(j, "rope_low_freq_factor", c.rope_scaling.low_freq_factor, what("rope_low_freq_factor"));
    c.rope_scaling.high_freq_factor = jr::field_or(j, "rope_high_freq_factor", c.rope_scaling.high_freq_factor, what("rope_high_freq_factor"));
    c.rope_scaling.original_max_position_embeddings =
        jr::field_or(j, "rope_original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings, what("rope_original_max_position_embeddings"));
    // Saved as the effective numbers; the defaults (a groups, h / a channels) read back as 0.
    c.num_query_groups = jr::field_or(j, "num_query_groups", 0, what("num_query_groups"));
    if (c.num_query_groups == c.num_attention_heads) c.num_query_groups = 0;
    c.kv_channels = jr::field_or(j, "kv_channels", 0, what("kv_channels"));
    if (c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0 &&
        c.kv_channels == c.hidden_size / c.num_attention_heads)
      c.kv_channels = 0;
    c.add_bias_linear = j.value("add_bias_linear", true);
    c.add_qkv_bias = j.value("add_qkv_bias", false);
    c.qk_layernorm = j.value("qk_layernorm", false);
    c.qk_layernorm_across_heads = j.value("qk_layernorm_across_heads", false);
    if (j.contains("moe")) moe_from_json(j.at("moe"), c, source);
    if (j.contains("yarn")) yarn_from_json(j.at("yarn"), c, source);
    if (j.contains("mla")) {  // multi-latent attention (absent: none)
      const nlohmann::json& m = j.at("mla");
      const auto mla = [&](const char* key) {
        return jr::integer<int>(m.at(key), str_cat(source, ": \"model\" entry: \"mla\": \"", key, "\""));
      };
      c.multi_latent_attention = true;
      c.q_lora_rank = mla("q_lora_rank");
      c.kv_lora_rank = mla("kv_lora_rank");
      c.qk_head_dim = mla("qk_head_dim");
      c.qk_pos_emb_head_dim = mla("qk_pos_emb_head_dim");
      c.v_head_dim = mla("v_head_dim");
    }
    c.mtp_num_layers = jr::field_or(j, "mtp_num_layers", 0, what("mtp_num_layers"));
    c.mtp_loss_scaling_factor = j.value("mtp_loss_scaling_factor", c.mtp_loss_scaling_factor);
    return c;
  } catch (const nlohmann::json::exception& e) {
    std::string msg = source;
    msg += ": bad \"model\" entry: ";
    msg += e.what();
    throw_error(ErrorCode::Io, msg);
  }
}

// An MLA size of `c` as the checkpoint's tensors depend on it: 0 without MLA.
int64_t mla_size(const GptConfig& c, int v) { return c.multi_latent_attention ? v : 0; }

// The fields a checkpoint's tensors depend on; the others (dropout, seed, recomputation,
// vocabulary padding) may change between runs.
void check_config(const GptConfig& saved, const GptConfig& model, const std::string& source) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"num_layers", {saved.num_layers, model.num_layers}},
      {"hidden_size", {saved.hidden_size, model.hidden_size}},
      {"num_attention_heads", {saved.num_attention_heads, model.num_attention_heads}},
      {"ffn_hidden_size", {saved.ffn(), model.ffn()}},
      {"vocab_size", {saved.vocab_size, model.vocab_size}},
      {"seq_length", {saved.seq_length, model.seq_length}},
      {"max_position_embeddings", {saved.max_positions(), model.max_positions()}},
      {"untie_embeddings_and_output_weights", {saved.tie_embeddings ? 0 : 1, model.tie_embeddings ? 0 : 1}},
      {"normalization (0 LayerNorm, 1 RMSNorm)",
       {static_cast<int>(saved.normalization), static_cast<int>(model.normalization)}},
      {"swiglu", {saved.swiglu, model.swiglu}},
      {"position_embedding_type (0 learned_absolute, 1 rope, 2 none)",
       {static_cast<int>(saved.position_embedding), static_cast<int>(model.position_embedding)}},
      {"num_query_groups", {saved.query_groups(), model.query_groups()}},
      {"kv_channels", {saved.head_dim(), model.head_dim()}},
      {"add_bias_linear", {saved.add_bias_linear, model.add_bias_linear}},
      {"add_qkv_bias", {saved.qkv_bias(), model.qkv_bias()}},
      {"qk_layernorm", {saved.qk_layernorm, model.qk_layernorm}},
      {"qk_layernorm_across_heads", {saved.qk_layernorm_across_heads, model.qk_layernorm_across_heads}},
      {"mtp_num_layers (--mtp-num-layers)", {saved.mtp_num_layers, model.mtp_num_layers}},
      // The experts: their number, widths and which layers have them, the router's expert bias.
      {"num_experts (--num-experts)", {saved.moe.num_experts, model.moe.num_experts}},
      {"moe_ffn_hidden_size (--moe-ffn-hidden-size)",
       {saved.moe.enabled() ? saved.moe_ffn() : 0, model.moe.enabled() ? model.moe_ffn() : 0}},
      {"moe_shared_expert_intermediate_size (--moe-shared-expert-intermediate-size)",
       {saved.moe.shared_expert_intermediate_size, model.moe.shared_expert_intermediate_size}},
      {"moe_shared_expert_gate (--moe-shared-expert-gate)",
       {saved.moe.shared_expert_gate, model.moe.shared_expert_gate}},
      {"moe_router_enable_expert_bias (--moe-router-enable-expert-bias)",
       {saved.moe.enable_expert_bias, model.moe.enable_expert_bias}},
      // Multi-latent attention's shapes (0 without it).
      {"multi_latent_attention (--multi-latent-attention)",
       {saved.multi_latent_attention, model.multi_latent_attention}},
      {"q_lora_rank (--q-lora-rank)", {mla_size(saved, saved.q_lora_rank), mla_size(model, model.q_lora_rank)}},
      {"kv_lora_rank (--kv-lora-rank)", {mla_size(saved, saved.kv_lora_rank), mla_size(model, model.kv_lora_rank)}},
      {"qk_head_dim (--qk-head-dim)", {mla_size(saved, saved.qk_head_dim), mla_size(model, model.qk_head_dim)}},
      {"qk_pos_emb_head_dim (--qk-pos-emb-head-dim)",
       {mla_size(saved, saved.qk_pos_emb_head_dim), mla_size(model, model.qk_pos_emb_head_dim)}},
      {"v_head_dim (--v-head-dim)", {mla_size(saved, saved.v_head_dim), mla_size(model, model.v_head_dim)}},
  };
  // Which layers are MoE ones (--moe-layer-freq): an empty pattern is every layer.
  for (int i = 0; i < model.num_layers && saved.moe.enabled() && model.moe.enabled(); ++i) {
    if (saved.moe.is_moe_layer(i) == model.moe.is_moe_layer(i)) continue;
    std::string msg = "the checkpoint " + source;
    msg += " was saved with decoder layer " + std::to_string(i) + (saved.moe.is_moe_layer(i) ? " an MoE" : " a dense");
    msg += " layer (moe_layer_freq); the model's is ";
    msg += model.moe.is_moe_layer(i) ? "an MoE one" : "a dense one";
    throw_error(ErrorCode::InvalidArgument, msg);
  }
  for (const auto& [name, values] : fields) {
    if (values.first == values.second) continue;
    std::string msg = "the checkpoint ";
    msg += source;
    msg += " was saved with ";
    msg += name;
    msg += " = " + std::to_string(values.first);
    msg += "; the model has ";
    msg += std::to_string(values.second);
    throw_error(ErrorCode::InvalidArgument, msg);
  }
  for (int layer = 0; layer < saved.num_layers; ++layer) {
    if (saved.moe.is_moe_layer(layer) == model.moe.is_moe_layer(layer)) continue;
    throw_error(ErrorCode::InvalidArgument,
                str_cat("the checkpoint ", source, " was saved with moe_layer_freq (--moe-layer-freq) ",
                        format_moe_layer_freq(saved.moe.layer_pattern, saved.num_layers), ", where layer ", layer,
                        saved.moe.is_moe_layer(layer) ? " is MoE" : " is dense", "; the model has moe_layer_freq ",
                        format_moe_layer_freq(model.moe.layer_pattern, model.num_layers)));
  }
}

std::vector<int64_t> dims(const Shape& s) {
  std::vector<int64_t> d;
  for (int i = 0; i < s.ndim(); ++i) d.push_back(s[i]);
  return d;
}

// A block of the global tensor a slice covers: rows [r0, r1) x cols [c0, c1), starting at row
// local_row of the slice.
struct Block {
  int64_t r0, r1, c0, c1, local_row;
};

// The blocks of a slice: one, or one per partition block (ParamInfo::partition_blocks).
std::vector<Block> blocks_of(const ParamInfo& p) {
  const int64_t rows = p.global_shape[0], cols = p.global_shape.ndim() > 1 ? p.global_shape[1] : 1;
  if (p.partition_dim == 1) return {{0, rows, p.slice_start, p.slice_start + p.local_shape[1], 0}};
  if (p.partition_dim < 0) return {{0, rows, 0, cols, 0}};
  std::vector<Block> blocks;
  for (const SliceRun& r : slice_runs(p)) blocks.push_back({r.global_start, r.global_start + r.count, 0, cols, r.local_start});
  return blocks;
}

/// The optimizer's name in a checkpoint's metadata ("kind"), as --optimizer spells it.
const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Adam: return "adam";
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Muon: return "muon";
  }
  throw_error(ErrorCode::Internal, str_cat("optimizer kind ", static_cast<int>(kind), " has no name"));
}

std::string state_tensor(const std::string& state, const std::string& name) { return "optimizer." + state + "." + name; }

// Whether the rank holding `p` stores it: split parameters on every rank, replicated ones on
// tensor rank 0 (expert ones on expert-tensor rank 0).
bool stores(const ParamInfo& p, int tp_rank) {
  return p.partition_dim >= 0 || (p.expert ? p.split_rank : tp_rank) == 0;
}

// Whether the layout's tables hold expert parameters (every rank computes the same). The
// experts of a chunk exist on every expert-parallel rank: the first rank of its stage shows them.
bool has_expert_params(const CheckpointShards& s) {
  const Layout& l = s.groups->layout();
  for (int c = 0; c < s.chunks; ++c) {
    const std::vector<ParamInfo> params = s.saved_params(c, l.expert_rank_of(s.rank_of_chunk(c), 0, 0, 0));
    if (std::any_of(params.begin(), params.end(), [](const ParamInfo& p) { return p.expert; })) return true;
  }
  return false;
}

// The files of a layout, in metadata order: the dense shards by pipeline and tensor rank, then
// (with experts) the expert shards by pipeline, expert-parallel and expert-tensor rank.
std::vector<std::string> shard_files(int64_t t, int64_t p, int64_t e, int64_t etp, bool experts) {
  std::vector<std::string> files;
  for (int64_t pr = 0; pr < p; ++pr)
    for (int64_t tr = 0; tr < t; ++tr)
      files.push_back(checkpoint_shard_name(static_cast<int>(tr), static_cast<int>(pr)));
  if (!experts) return files;
  for (int64_t pr = 0; pr < p; ++pr)
    for (int64_t er = 0; er < e; ++er)
      for (int64_t xr = 0; xr < etp; ++xr)
        files.push_back(checkpoint_expert_shard_name(static_cast<int>(xr), static_cast<int>(pr), static_cast<int>(er)));
  return files;
}

// The tensor map of a whole layout, computed from parameter tables without memory, the same
// on every rank: which file holds which slice.
TensorMap layout_map(const CheckpointShards& s, const std::vector<std::string>& states, bool experts) {
  TensorMap map;
  const auto add = [&](const ParamInfo& info, const std::string& file) {
    const std::vector<Block> blocks = blocks_of(info);
    std::vector<std::string> names{info.name};
    for (std::size_t k = 0; k < states.size(); ++k)
      if (state_applies(states, k, info)) names.push_back(state_tensor(states[k], info.name));
    for (const std::string& n : names) {
      map.add_tensor(n, dims(info.global_shape), StDType::F32);
      for (const Block& b : blocks)
        map.add_piece(n, TensorPiece{file, n, b.r0, b.r1, b.c0, b.c1, blocks.size() > 1 ? b.local_row : -1});
    }
  };
  const Layout& l = s.groups->layout();
  for (int c = 0; c < s.chunks; ++c) {
    const int pr = s.rank_of_chunk(c);
    for (int r = 0; r < l.tensor(); ++r) {
      for (const ParamInfo& info : s.saved_params(c, l.rank_of({pr, 0, r, 0})))
        if (!info.expert && stores(info, r)) add(info, checkpoint_shard_name(r, pr));
    }
    if (!experts) continue;
    for (int er = 0; er < l.expert_model(); ++er) {
      for (int xr = 0; xr < l.expert_tensor(); ++xr) {
        for (const ParamInfo& info : s.saved_params(c, l.expert_rank_of(pr, xr, er, 0)))
          if (info.expert && stores(info, xr)) add(info, checkpoint_expert_shard_name(xr, pr, er));
      }
    }
  }
  return map;
}

// Reads the block of `name` a local slice covers into `out` (local-shape row-major). Rows
// beyond the stored tensor (a larger vocabulary padding than the saving layout's) read as zero.
void read_slice(CheckpointReader& reader, const std::string& name, const ParamInfo& info, float* out) {
  const std::vector<int64_t> saved = reader.global_shape(name);
  const int64_t saved_rows = saved.empty() ? 1 : saved[0];
  const int64_t saved_cols = saved.size() > 1 ? saved[1] : 1;
  if (saved_cols != (info.global_shape.ndim() > 1 ? info.global_shape[1] : 1) || saved.size() != dims(info.global_shape).size() ||
      (info.partition_blocks > 1 && saved_rows != info.global_shape[0])) {
    std::string msg = "checkpoint tensor '" + name;
    msg += "' has global shape " + json_text(nlohmann::json(saved));
    msg += "; the model's is " + info.global_shape.str();
    throw_error(ErrorCode::InvalidArgument, msg);
  }
  for (const Block& b : blocks_of(info)) {
    const int64_t cols = b.c1 - b.c0;
    float* dst = out + b.local_row * cols;
    const int64_t r1 = std::min(b.r1, saved_rows);
    if (r1 > b.r0) reader.read_block(name, b.r0, r1, b.c0, b.c1, dst);
    std::fill(dst + std::max<int64_t>(0, r1 - b.r0) * cols, dst + (b.r1 - b.r0) * cols, 0.0f);
  }
}

// An integer field of `j` in [min, max], named in the refusal (json_read::integer refuses
// what is no integer or does not fit 64 bits).
int64_t meaning_int(const nlohmann::json& j, const char* key, int64_t min, const std::string& source, const std::string& where,
                    int64_t max = INT64_MAX) {
  if (!j.is_object() || !j.contains(key)) throw_io_error(source, str_cat(where, "has no \"", key, "\""));
  const int64_t x = json_read::integer<int64_t>(j.at(key), str_cat(source, ": ", where, "\"", key, "\""));
  if (x < min) throw_io_error(source, str_cat(where, "\"", key, "\" = ", x, " is below ", min));
  if (x > max) throw_io_error(source, str_cat(where, "\"", key, "\" = ", x, " is above ", max));
  return x;
}

// The checkpoint's metadata.json makes sense, beyond its hash: the manifest proves the files are
// what was written, this that what was written is a checkpoint of iteration `dir_iteration` that
// exists. Io naming metadata.json and the field.
void check_metadata_meaning(const nlohmann::json& md, const std::string& source, int64_t dir_iteration) {
  if (!md.is_object()) throw_io_error(source, "the metadata is not a JSON object");
  const int64_t iteration = meaning_int(md, "iteration", 0, source, "");
  if (iteration != dir_iteration)
    throw_io_error(source, str_cat("\"iteration\" = ", iteration, " differs from its directory's iteration ", dir_iteration,
                                   " (", checkpoint_iter_name(dir_iteration), ")"));
  meaning_int(md, "consumed_train_samples", 0, source, "");
  meaning_int(md, "consumed_valid_samples", 0, source, "");

  if (!md.contains("optimizer")) throw_io_error(source, "has no \"optimizer\" entry (null when saved without one)");
  const nlohmann::json& o = md.at("optimizer");
  if (!o.is_null()) {
    const std::string w = "\"optimizer\" entry: ";
    if (!o.is_object()) throw_io_error(source, w + "not an object");
    const nlohmann::json kind = o.value("kind", nlohmann::json());
    const bool known = kind.is_string() && (kind.get<std::string>() == "adam" || kind.get<std::string>() == "sgd" ||
                                            kind.get<std::string>() == "muon");
    if (!known) {
      throw_io_error(source, str_cat(w, "kind ", json_text(kind),
                                     " is not a known optimizer (\"adam\", \"sgd\" or \"muon\")"));
    }
    const nlohmann::json state = o.value("state", nlohmann::json());
    const nlohmann::json adam = {"exp_avg", "exp_avg_sq"};
    const nlohmann::json sgd_momentum = {"momentum_buffer"};
    // Muon: its matrices' momentum and the AdamW moments of the other parameters.
    const nlohmann::json muon = {"momentum_buffer", "exp_avg", "exp_avg_sq"};
    const std::string k = kind.get<std::string>();
    const bool state_ok = k == "adam"  ? state == adam
                          : k == "sgd" ? (state == sgd_momentum || (state.is_array() && state.empty()))
                                       : state == muon;
    if (!state_ok)
      throw_io_error(source, str_cat(w, "state ", json_text(state), " is not what a ", kind.get<std::string>(),
                                     " optimizer keeps"));
    const int64_t steps = meaning_int(o, "steps", 0, source, w);
    const int64_t skipped = meaning_int(o, "skipped_iterations", 0, source, w);
    if (skipped > iteration)
      throw_io_error(source, str_cat(w, "\"skipped_iterations\" = ", skipped, " exceeds the iteration ", iteration));
    (void)steps;
    meaning_int(o, "growth_tracker", 0, source, w, INT32_MAX);
    meaning_int(o, "hysteresis_left", 0, source, w, INT32_MAX);
    const nlohmann::json scale = o.value("loss_scale", nlohmann::json());
    if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() <= 0)
      throw_io_error(source, str_cat(w, "\"loss_scale\" = ", json_text(scale), " is not a finite number > 0"));
  }

  if (!md.contains("layout") || !md.at("layout").is_object()) throw_io_error(source, "has no \"layout\" object");
  const nlohmann::json& l = md.at("layout");
  const std::string lw = "\"layout\": ";
  const int64_t t = meaning_int(l, "tensor_model_parallel_size", 1, source, lw);
  const int64_t p = meaning_int(l, "pipeline_model_parallel_size", 1, source, lw);
  const int64_t d = meaning_int(l, "data_parallel_size", 1, source, lw);
  meaning_int(l, "virtual_pipeline_model_parallel_size", 1, source, lw);
  const int64_t world = meaning_int(l, "world_size", 1, source, lw);
  if (t > 4096 || p > 4096 || d > (int64_t{1} << 24) || world % (t * p * d) != 0)
    throw_io_error(source, str_cat(lw, "world_size ", world, " is not a multiple of t ", t, " x p ", p, " x d ", d,
                                   ": no such layout"));
  // Expert parallelism, recorded for models with expert parameters: e x etp divides the ranks of
  // a stage.
  const bool experts = l.contains("expert_model_parallel_size") || l.contains("expert_tensor_parallel_size");
  int64_t e = 1, etp = 1;
  if (experts) {
    e = meaning_int(l, "expert_model_parallel_size", 1, source, lw, 4096);
    etp = meaning_int(l, "expert_tensor_parallel_size", 1, source, lw, 4096);
    if ((world / p) % (e * etp) != 0)
      throw_io_error(source, str_cat(lw, "the ", world / p, " ranks of a pipeline stage are not divisible by "
                                     "expert_model_parallel_size ", e, " x expert_tensor_parallel_size ", etp,
                                     ": no such layout"));
  }
  // The shards the layout writes, exactly.
  const std::vector<std::string> expected = shard_files(t, p, e, etp, experts);
  const nlohmann::json files = md.value("files", nlohmann::json());
  if (files != nlohmann::json(expected))
    throw_io_error(source, str_cat("\"files\" ", json_text(files), " are not the shards of the layout t ", t, " x p ", p,
                                   experts ? str_cat(" with e ", e, " x etp ", etp) : std::string(), " (",
                                   json_text(nlohmann::json(expected)), ")"));
}

}  // namespace

std::string checkpoint_shard_name(int tp_rank, int pp_rank) {
  char name[64];
  std::snprintf(name, sizeof name, "model_tp%02d_pp%02d.safetensors", tp_rank, pp_rank);
  return name;
}

void agree_on_failure(ProcessGroups& groups, const std::function<void()>& body) {
  std::exception_ptr error;
  try {
    body();
  } catch (...) {
    error = std::current_exception();
  }
  const int rank = groups.rank(GroupKind::World), size = groups.size(GroupKind::World);
  if (size == 1) {
    if (error) std::rethrow_exception(error);
    return;
  }
  Communicator& world = groups.comm(GroupKind::World);
  float first = static_cast<float>(error ? rank : size);
  world.all_reduce(Tensor::borrow(&first, {1}, DType::F32), ReduceOp::Min)->wait();
  if (static_cast<int>(first) == size) return;
  const int from = static_cast<int>(first);
  // [code, length, message bytes...] from the lowest failing rank.
  constexpr int kMax = 4096;
  std::vector<int32_t> buf(2 + kMax, 0);
  if (rank == from) {
    ErrorCode code = ErrorCode::Internal;
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      code = e.code();
      what = e.what();
    } catch (const std::bad_alloc&) {
      code = ErrorCode::OutOfMemory;
      what = "out of host memory";
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    const int n = std::min<int>(kMax, static_cast<int>(what.size()));
    buf[0] = static_cast<int32_t>(code);
    buf[1] = n;
    for (int i = 0; i < n; ++i) buf[static_cast<std::size_t>(2 + i)] = static_cast<unsigned char>(what[static_cast<std::size_t>(i)]);
  }
  world.broadcast(Tensor::borrow(buf.data(), {static_cast<int64_t>(buf.size())}, DType::I32), from)->wait();
  if (rank == from) std::rethrow_exception(error);
  std::string what;
  for (int i = 0; i < buf[1]; ++i) what += static_cast<char>(buf[static_cast<std::size_t>(2 + i)]);
  std::string msg = "rank " + std::to_string(from);
  msg += " reported: ";
  msg += what;
  throw Error(static_cast<ErrorCode>(buf[0]), msg);
}

std::string checkpoint_expert_shard_name(int etp_rank, int pp_rank, int ep_rank) {
  char name[64];
  std::snprintf(name, sizeof name, "model_tp%02d_pp%02d_ep%02d.safetensors", etp_rank, pp_rank, ep_rank);
  return name;
}

namespace {

// Writes this rank's shard files into `tmp`: its dense shard when it is the first data+context
// rank of its tensor and pipeline rank, its expert shard when it is the first expert-data-parallel
// rank of its expert coordinates. Every rank takes part in gathering the optimizer state and the
// sharded masters.
void write_shard_files(const std::string& tmp, const CheckpointShards& s, Optimizer* optimizer,
                       const std::vector<std::string>& states, bool experts) {
  ProcessGroups& g = *s.groups;
  const RankCoords k = g.layout().coords(g.rank(GroupKind::World));
  const int tp = g.rank(GroupKind::Tensor), pp = g.rank(GroupKind::Pipeline), dp = g.rank(GroupKind::DataContext);
  agree_on_failure(g, [&] {
    std::vector<std::vector<std::vector<float>>> values(s.tables.size());
    for (std::size_t j = 0; j < values.size(); ++j)
      for (std::size_t st = 0; st < states.size(); ++st)
        values[j].push_back(optimizer->get_state(static_cast<int>(j), static_cast<int>(st)));
    // Host copies of the tables' fp32 masters (the model may live on a GPU; with the distributed
    // optimizer and 16-bit weights they are gathered from the data-parallel shards).
    std::vector<std::vector<float>> host(s.tables.size());
    for (std::size_t j = 0; j < host.size(); ++j) host[j] = s.tables[j]->masters_to_host();
    const auto write = [&](bool expert_file, const std::string& name) {
      SafetensorsWriter writer;
      for (std::size_t j = 0; j < s.tables.size(); ++j) {
        const ParamTable& table = *s.tables[j];
        for (int i = 0; i < table.size(); ++i) {
          const ParamInfo& info = table.info(i);
          if (info.expert != expert_file || i == s.unsaved[j] || !stores(info, tp)) continue;
          writer.add(info.name, StDType::F32, dims(info.local_shape), host[j].data() + info.offset);
          for (std::size_t st = 0; st < states.size(); ++st)
            if (state_applies(states, st, info))
              writer.add(state_tensor(states[st], info.name), StDType::F32, dims(info.local_shape),
                         values[j][st].data() + info.offset);
        }
      }
      writer.set_metadata("format", kFormat);
      writer.write(tmp + "/" + name);
    };
    if (dp == 0) write(false, checkpoint_shard_name(tp, pp));
    if (experts && k.edp == 0) write(true, checkpoint_expert_shard_name(k.etp, pp, k.ep));
  });
}

}  // namespace

void save_checkpoint_shards(const std::string& dir, const CheckpointShards& shards, Optimizer* optimizer,
                            const nlohmann::json& extra, const CheckpointState& state) {
  PTDP_CHECK_ARG(!dir.empty(), "checkpoint directory is empty");
  PTDP_CHECK_ARG(state.iteration >= 0, "checkpoint iteration must be >= 0, got " + std::to_string(state.iteration));
  PTDP_CHECK_ARG(shards.groups != nullptr && shards.tables.size() == shards.unsaved.size() && shards.chunks > 0 &&
                     shards.rank_of_chunk && shards.saved_params,
                 "checkpoint shards are incomplete");
  ProcessGroups& g = *shards.groups;
  const int world_rank = g.rank(GroupKind::World);

  // The writing rank holds DIR's lock for the save (shared with its run's, when a run holds it):
  // a save into a directory another run uses is refused before anything is written.
  std::unique_ptr<SaveDirLock> lock;
  agree_on_failure(g, [&] {
    if (world_rank != 0) return;
    lock = std::make_unique<SaveDirLock>(dir, SaveDirLock::Mode::Save);
    prepare_tmp_dir(dir, state.iteration);
  });

  // A failed save leaves no partial directory behind: the .tmp directory goes, the previous
  // checkpoint and the tracker stay as they were.
  try {
    const std::vector<std::string> states = optimizer ? optimizer->state_names() : std::vector<std::string>{};
    const bool experts = has_expert_params(shards);
    const std::string tmp = checkpoint_tmp_dir(dir, state.iteration);
    write_shard_files(tmp, shards, optimizer, states, experts);
    agree_on_failure(g, [&] {
      if (world_rank != 0) return;
      const Layout& l = g.layout();
      nlohmann::json md;
      md["format"] = kFormat;
      md["version"] = kFormatVersion;
      md["iteration"] = state.iteration;
      md["consumed_train_samples"] = state.consumed_train_samples;
      md["consumed_valid_samples"] = state.consumed_valid_samples;
      md["layout"] = {{"tensor_model_parallel_size", l.tensor()},
                      {"pipeline_model_parallel_size", l.pipeline()},
                      {"data_parallel_size", g.size(GroupKind::Data)},
                      {"virtual_pipeline_model_parallel_size", shards.chunks / l.pipeline()},
                      {"world_size", g.size(GroupKind::World)}};
      if (experts) {
        md["layout"]["expert_model_parallel_size"] = l.expert_model();
        md["layout"]["expert_tensor_parallel_size"] = l.expert_tensor();
      }
      for (const auto& [key, value] : extra.items()) {
        if (key == "layout") md["layout"].update(value);
        else md[key] = value;
      }
      if (optimizer) {
        const Optimizer::Counters c = optimizer->counters();
        md["optimizer"] = {{"kind", optimizer_kind_name(optimizer->config().kind)},
                           {"state", states},
                           {"steps", c.steps},
                           {"skipped_iterations", c.skipped},
                           {"loss_scale", c.loss_scale},
                           {"growth_tracker", c.growth_tracker},
                           {"hysteresis_left", c.hysteresis_left}};
      } else {
        md["optimizer"] = nullptr;
      }
      std::vector<std::string> files =
          shard_files(l.tensor(), l.pipeline(), l.expert_model(), l.expert_tensor(), experts);
      md["files"] = files;
      md["tensors"] = layout_map(shards, states, experts).to_json();
      // The recorded flags may hold paths that are not UTF-8: such bytes are written as U+FFFD.
      write_file_synced(tmp + "/" + kMetadataFile, json_text(md, 1) + "\n");
      files.push_back(kMetadataFile);
      finalize_checkpoint(dir, state.iteration, files);
    });
  } catch (...) {
    if (world_rank == 0) {
      std::error_code ec;
      std::filesystem::remove_all(checkpoint_tmp_dir(dir, state.iteration), ec);
    }
    throw;
  }
}

namespace {

// A GptPipeline's chunks as checkpoint shards: the tables of other ranks are the chunks' tables
// as a GptModel without memory declares them for those ranks' tensor and expert coordinates.
CheckpointShards gpt_shards(GptPipeline& model) {
  CheckpointShards s;
  s.groups = &model.groups();
  for (const auto& chunk : model.chunks()) {
    s.tables.push_back(&chunk->params());
    s.unsaved.push_back(chunk->tied_head_weight());
  }
  s.chunks = model.pipeline_size() * model.virtual_stages();
  s.rank_of_chunk = [&model](int c) { return model.rank_of_chunk(c); };
  s.saved_params = [&model](int c, int world_rank) {
    const RankCoords k = model.groups().layout().coords(world_rank);
    TensorParallel tp = model.tensor_parallel();
    tp.rank = k.tp;
    tp.ep.ep_rank = k.ep;
    tp.ep.etp_rank = k.etp;
    const GptModel meta(model.config(), tp, Device{}, model.chunk_stage(c), false);
    std::vector<ParamInfo> params;
    for (int i = 0; i < meta.params().size(); ++i)
      if (i != meta.tied_head_weight()) params.push_back(meta.params().info(i));
    return params;
  };
  return s;
}

}  // namespace

void save_checkpoint(const std::string& dir, GptPipeline& model, Optimizer* optimizer,
                     const nlohmann::json* train_config, const CheckpointState& state) {
  nlohmann::json extra;
  // Megatron's uneven first and last stages or its layout string, when set (informative: layers
  // are named by their global index, so any split loads any other's checkpoint).
  nlohmann::json layout = nlohmann::json::object();
  const PipelineSplit& split = model.split();
  if (split.first_stage_layers > 0) layout["decoder_first_pipeline_num_layers"] = split.first_stage_layers;
  if (split.last_stage_layers > 0) layout["decoder_last_pipeline_num_layers"] = split.last_stage_layers;
  if (!split.layout.empty()) layout["pipeline_model_parallel_layout"] = split.layout;
  // The V placement (ZB-V, DualPipeV), informative as well: shard pp<r> holds chunks r and
  // 2p - 1 - r then; the loader finds every layer by name.
  if (model.placement() == ChunkPlacement::V) layout["pipeline_chunk_placement"] = "V";
  extra["layout"] = layout;
  extra["model"] = config_to_json(model.config());
  extra["rng"] = {{"generator", "philox4x32-10"},
                  {"seed", model.config().seed},
                  {"keys", "dropout masks are pure functions of (seed, iteration, microbatch, layer, site); "
                           "resuming at the saved iteration redraws the uninterrupted run's masks"}};
  if (train_config) extra["train_config"] = *train_config;
  save_checkpoint_shards(dir, gpt_shards(model), optimizer, extra, state);
}

CheckpointState load_checkpoint_shards(const std::string& dir, const CheckpointShards& shards, Optimizer* optimizer,
                                       const CheckpointModelCheck& check_model) {
  PTDP_CHECK_ARG(!dir.empty(), "checkpoint directory is empty");
  PTDP_CHECK_ARG(shards.groups != nullptr, "checkpoint shards have no process groups");
  ProcessGroups& g = *shards.groups;
  CheckpointState state;
  Optimizer::Counters counters;
  const std::vector<std::string> states = optimizer ? optimizer->state_names() : std::vector<std::string>{};
  // Everything is read into staging buffers first; the model changes only once every rank has
  // read its part without error.
  std::vector<std::vector<float>> params(shards.tables.size());
  std::vector<std::vector<std::vector<float>>> moments(shards.tables.size());

  agree_on_failure(g, [&] {
    CheckpointReader reader(dir);
    const std::string source = reader.path_for(kMetadataFile);
    const nlohmann::json md = reader.read_metadata();
    try {
      if (md.at("format").get<std::string>() != kFormat || json_read::integer<int64_t>(md.at("version"), source + ": \"version\"") != kFormatVersion) {
        std::string msg = source;
        msg += ": not a version 1 ptdp checkpoint";
        throw_error(ErrorCode::Io, msg);
      }
      check_metadata_meaning(md, source, reader.iteration());
      if (check_model) check_model(md, source);
      if (md.contains("train_config")) state.train_config = md.at("train_config");
      if (optimizer) {
        const nlohmann::json& o = md.at("optimizer");
        if (o.is_null()) {
          std::string msg = "the checkpoint " + source;
          msg += " holds no optimizer state (saved without an optimizer)";
          throw_error(ErrorCode::InvalidArgument, msg);
        }
        // A state of the same names from another optimizer (SGD's and Muon's momentum) would load
        // as if it were this one's.
        const std::string saved_kind = o.at("kind").get<std::string>();
        const char* kind = optimizer_kind_name(optimizer->config().kind);
        if (saved_kind != kind) {
          std::string msg = "the checkpoint " + source;
          msg += " was saved by the " + saved_kind + " optimizer; this one is " + kind;
          msg += " (--optimizer " + std::string(kind) + "): its state does not carry over (load the parameters "
                 "alone, as --finetune does, to change optimizers)";
          throw_error(ErrorCode::InvalidArgument, msg);
        }
        if (o.at("state").get<std::vector<std::string>>() != states) {
          std::string msg = "the checkpoint " + source;
          msg += " holds optimizer state " + json_text(o.at("state"));
          msg += " (" + o.at("kind").get<std::string>();
          msg += "); this optimizer keeps " + json_text(nlohmann::json(states));
          throw_error(ErrorCode::InvalidArgument, msg);
        }
        const std::string ow = source + ": \"optimizer\" entry: ";
        counters.steps = json_read::integer<int64_t>(o.at("steps"), ow + "\"steps\"");
        counters.skipped = json_read::integer<int64_t>(o.at("skipped_iterations"), ow + "\"skipped_iterations\"");
        counters.loss_scale = json_read::real<float>(o.at("loss_scale"), ow + "\"loss_scale\"");
        counters.growth_tracker = json_read::integer<int>(o.at("growth_tracker"), ow + "\"growth_tracker\"");
        counters.hysteresis_left = json_read::integer<int>(o.at("hysteresis_left"), ow + "\"hysteresis_left\"");
      }
      state.iteration = json_read::integer<int64_t>(md.at("iteration"), source + ": \"iteration\"");
      state.consumed_train_samples =
          json_read::integer<int64_t>(md.at("consumed_train_samples"), source + ": \"consumed_train_samples\"");
      state.consumed_valid_samples =
          json_read::integer<int64_t>(md.at("consumed_valid_samples"), source + ": \"consumed_valid_samples\"");
      reader.set_tensor_map(TensorMap::from_json(md.at("tensors"), source));
      // ptdp writes every tensor as F32, and its pieces are read only as what the map declares.
      for (const auto& [name, entry] : reader.tensor_map().entries()) {
        if (entry.dtype != StDType::F32)
          throw_io_error(source, str_cat("tensor map entry '", name, "' has dtype ", st_dtype_name(entry.dtype),
                                         "; a ptdp checkpoint holds F32 tensors"));
      }
      reader.require_declared_dtypes(true);
      // Every file the manifest lists must be sound, whether or not this layout reads it.
      if (g.rank(GroupKind::World) == 0) {
        for (const auto& f : md.at("files")) reader.verify(f.get<std::string>());
      }
    } catch (const nlohmann::json::exception& e) {
      std::string msg = source;
      msg += ": malformed metadata: ";
      msg += e.what();
      throw_error(ErrorCode::Io, msg);
    }
    for (std::size_t j = 0; j < shards.tables.size(); ++j) {
      const ParamTable& table = *shards.tables[j];
      params[j].assign(static_cast<std::size_t>(table.capacity()), 0.0f);
      for (std::size_t k = 0; k < states.size(); ++k) moments[j].emplace_back(static_cast<std::size_t>(table.capacity()), 0.0f);
      for (int i = 0; i < table.size(); ++i) {
        const ParamInfo& info = table.info(i);
        read_slice(reader, info.name, info, params[j].data() + info.offset);
        for (std::size_t k = 0; k < states.size(); ++k)
          if (state_applies(states, k, info))
            read_slice(reader, state_tensor(states[k], info.name), info, moments[j][k].data() + info.offset);
      }
    }
  });

  for (std::size_t j = 0; j < shards.tables.size(); ++j) {
    ParamTable& table = *shards.tables[j];
    table.masters_from_host(params[j].data());  // this rank's shard of them when sharded
    for (std::size_t k = 0; k < states.size(); ++k)
      optimizer->set_state(static_cast<int>(j), static_cast<int>(k), moments[j][k].data());
  }
  if (optimizer) optimizer->restore(counters);
  return state;
}

CheckpointState load_checkpoint(const std::string& dir, GptPipeline& model, Optimizer* optimizer) {
  const auto check = [&](const nlohmann::json& md, const std::string& source) {
    check_config(config_from_json(md.at("model"), source), model.config(), source);
  };
  return load_checkpoint_shards(dir, gpt_shards(model), optimizer, check);
}

GptConfig read_checkpoint_config(const std::string& dir, int64_t* iteration) {
  CheckpointReader reader(dir);
  const nlohmann::json md = reader.read_metadata();
  const std::string source = reader.path_for(kMetadataFile);
  if (!md.contains("model")) {
    std::string msg = source;
    msg += ": no \"model\" entry";
    throw_error(ErrorCode::Io, msg);
  }
  if (iteration) *iteration = reader.iteration();
  return config_from_json(md.at("model"), source);
}

}  // namespace ptdp
