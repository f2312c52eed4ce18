// Prints what ptdp reads from Hugging Face configs (test_hf_config_fields.py): given a JSON file
// holding a list of config.json objects, writes one JSON object per line, in order: the model
// ptdp builds (every GptConfig and MoeConfig field the importer sets), or the refusal's error
// code and message.
//
//   hf_config_probe CONFIGS.json
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/error.h"
#include "core/checkpoint/hf_config.h"

namespace {

using json = nlohmann::json;

const char* code_name(ptdp::ErrorCode c) {
  switch (c) {
    case ptdp::ErrorCode::Unsupported:
      return "unsupported";
    case ptdp::ErrorCode::Io:
      return "io";
    case ptdp::ErrorCode::InvalidArgument:
      return "invalid_argument";
    default:
      return "other";
  }
}

json describe(const ptdp::HfConfig& hf) {
  const ptdp::GptConfig& c = hf.model;
  json moe_layers = json::array();
  for (int i = 0; i < c.num_layers; ++i) moe_layers.push_back(c.moe.is_moe_layer(i));
  return {{"architecture", ptdp::hf_class_name(hf.architecture)},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"ffn_hidden_size", c.ffn()},
          {"num_layers", c.num_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"num_query_groups", c.query_groups()},
          {"head_dim", c.head_dim()},
          {"max_position_embeddings", c.max_positions()},
          {"seq_length", c.seq_length},
          {"layernorm_epsilon", c.layernorm_epsilon},
          {"normalization", static_cast<int>(c.normalization)},
          {"swiglu", c.swiglu},
          {"position_embedding", static_cast<int>(c.position_embedding)},
          {"rotary_base", c.rotary_base},
          {"rotary_percent", c.rotary_percent},
          {"rope_scaling", c.rope_scaling.enabled},
          {"rope_scaling_factor", c.rope_scaling.factor},
          {"rope_low_freq_factor", c.rope_scaling.low_freq_factor},
          {"rope_high_freq_factor", c.rope_scaling.high_freq_factor},
          {"rope_original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
          {"rope_type", static_cast<int>(c.rope_type)},
          {"yarn_factor", c.yarn.factor},
          {"yarn_mscale", c.yarn.mscale},
          {"yarn_mscale_all_dim", c.yarn.mscale_all_dim},
          {"yarn_original_max_position_embeddings", c.yarn.original_max_position_embeddings},
          {"yarn_beta_fast", c.yarn.beta_fast},
          {"yarn_beta_slow", c.yarn.beta_slow},
          {"yarn_truncate", c.yarn.truncate},
          {"tie_embeddings", c.tie_embeddings},
          {"init_method_std", c.init_method_std},
          {"hidden_dropout", c.hidden_dropout},
          {"attention_dropout", c.attention_dropout},
          {"add_bias_linear", c.add_bias_linear},
          {"add_qkv_bias", c.add_qkv_bias},
          {"qk_layernorm", c.qk_layernorm},
          {"qk_layernorm_across_heads", c.qk_layernorm_across_heads},
          {"num_experts", c.moe.num_experts},
          {"moe_router_topk", c.moe.router_topk},
          {"moe_ffn_hidden_size", c.moe.enabled() ? c.moe_ffn() : 0},
          {"moe_layers", moe_layers},
          {"moe_shared_expert_intermediate_size", c.moe.shared_expert_intermediate_size},
          {"moe_shared_expert_gate", c.moe.shared_expert_gate},
          {"moe_router_pre_softmax", c.moe.pre_softmax},
          {"moe_aux_loss_coeff", c.moe.aux_loss_coeff},
          {"moe_load_balancing", static_cast<int>(c.moe.load_balancing)},
          {"moe_router_score_function", static_cast<int>(c.moe.score_function)},
          {"moe_router_topk_scaling_factor", c.moe.topk_scaling_factor},
          {"moe_router_num_groups", c.moe.num_groups},
          {"moe_router_group_topk", c.moe.group_topk},
          {"moe_router_group_score_topk", c.moe.group_score_topk},
          {"moe_router_enable_expert_bias", c.moe.enable_expert_bias},
          {"multi_latent_attention", c.multi_latent_attention},
          {"q_lora_rank", c.q_lora_rank},
          {"kv_lora_rank", c.kv_lora_rank},
          {"qk_head_dim", c.qk_head_dim},
          {"qk_pos_emb_head_dim", c.qk_pos_emb_head_dim},
          {"v_head_dim", c.v_head_dim},
          {"rope_interleave", hf.rope_interleave},
          {"nextn_predict_layers", hf.nextn_predict_layers}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hf_config_probe CONFIGS.json\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  const json configs = json::parse(text.str(), nullptr, false);
  if (!configs.is_array()) {
    std::fprintf(stderr, "hf_config_probe: %s is not a JSON list\n", argv[1]);
    return 2;
  }
  for (const json& config : configs) {
    json out;
    try {
      out = describe(ptdp::hf_config_from_json(config, "config.json"));
    } catch (const ptdp::Error& e) {
      out = {{"error", code_name(e.code())}, {"message", e.what()}};
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}
