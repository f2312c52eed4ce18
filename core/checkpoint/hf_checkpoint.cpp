#include "core/checkpoint/hf_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpoint_files.h"
#include "io/file_read.h"
#include "io/json_text.h"

namespace ptdp {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// ---------------------------------------------------------------------------------------------
// Mappings

std::string layer(int i) { return "decoder.layers." + std::to_string(i) + "."; }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<int64_t>& shape) { return json_text(json(shape)); }

// Names of buffers that older exports carry beside the weights and that nothing reads.
bool ignorable_buffer(const std::string& name, HfArchitecture arch) {
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (arch == HfArchitecture::Gpt2) return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
  return ends_with(".rotary_emb.inv_freq");
}

std::string json_text(const std::string& path, const char* what) {
  return read_regular_file(path, what, kMaxJsonFileBytes);
}

json parse_json_file(const std::string& path, const char* what) {
  const json j = json::parse(json_text(path, what), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw_io_error(path, "is not valid JSON");
  if (!j.is_object()) throw_io_error(path, "is not a JSON object");
  return j;
}

// Writes `text` to path through a temporary file renamed over it.
void write_text(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

bool is_shard_file_name(const std::string& name) {
  static const std::regex pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, pattern);
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// Mappings

namespace {

// The MoE MLP of layer i: the router, every expert (J global, as on the hub and in Megatron's
// distributed checkpoints) and Qwen2-MoE's gated shared expert. Mixtral names its block
// block_sparse_moe and its experts' linears w1 (gate), w3 (up), w2 (down).
// L: ptdp's layer prefix ("decoder.layers.{i}.", or an MTP module's transformer_layer), H: Hugging
// Face's ("model.layers.{i}.").
void add_moe_mappings_at(const GptConfig& c, HfArchitecture a, const std::string& ptdp_layer, const std::string& H,
                         std::vector<HfMapping>& m) {
  const bool deepseek = hf_is_deepseek(a);
  const int64_t h = c.hidden_size, fe = c.moe_ffn(), fs = c.moe.shared_expert_intermediate_size;
  const std::string L = ptdp_layer + "mlp.";
  const bool mixtral = a == HfArchitecture::Mixtral;
  const std::string M = H + (mixtral ? "block_sparse_moe." : "mlp.");
  const auto add = [&](std::string param, std::vector<int64_t> shape, HfLayout layout, std::vector<HfTensor> t) {
    m.push_back(HfMapping{std::move(param), std::move(shape), layout, std::move(t)});
  };
  add(L + "router.weight", {c.moe.num_experts, h}, HfLayout::Copy, {{M + "gate.weight", {c.moe.num_experts, h}}});
  if (c.moe.enable_expert_bias)  // DeepSeek-V3's e_score_correction_bias
    add(L + "router.expert_bias", {c.moe.num_experts}, HfLayout::Copy,
        {{M + "gate.e_score_correction_bias", {c.moe.num_experts}}});
  for (int J = 0; J < c.moe.num_experts; ++J) {
    const std::string E = M + "experts." + std::to_string(J) + ".", j = std::to_string(J);
    add(L + "experts.linear_fc1.weight" + j, {2 * fe, h}, HfLayout::GateUp,
        {{E + (mixtral ? "w1.weight" : "gate_proj.weight"), {fe, h}},
         {E + (mixtral ? "w3.weight" : "up_proj.weight"), {fe, h}}});
    add(L + "experts.linear_fc2.weight" + j, {h, fe}, HfLayout::Copy,
        {{E + (mixtral ? "w2.weight" : "down_proj.weight"), {h, fe}}});
  }
  if (fs == 0) return;
  const std::string S = M + (deepseek ? "shared_experts." : "shared_expert.");
  add(L + "shared_experts.linear_fc1.weight", {2 * fs, h}, HfLayout::GateUp,
      {{S + "gate_proj.weight", {fs, h}}, {S + "up_proj.weight", {fs, h}}});
  add(L + "shared_experts.linear_fc2.weight", {h, fs}, HfLayout::Copy, {{S + "down_proj.weight", {h, fs}}});
  if (c.moe.shared_expert_gate)
    add(L + "shared_experts.gate_weight", {1, h}, HfLayout::Copy, {{M + "shared_expert_gate.weight", {1, h}}});
}

void add_moe_mappings(const GptConfig& c, HfArchitecture a, int i, std::vector<HfMapping>& m) {
  add_moe_mappings_at(c, a, layer(i), "model.layers." + std::to_string(i) + ".", m);
}

// transformers' dot_natural_key (core_model_loading.py): a name split at ".", numbers compared as
// numbers and before words, a word's trailing digits as a number after the word.
struct NaturalPart {
  bool word = false;
  std::string text;
  int64_t number = -1;  // -1: a word without trailing digits
  bool operator<(const NaturalPart& o) const {
    return std::tie(word, text, number) < std::tie(o.word, o.text, o.number);
  }
};

std::vector<NaturalPart> natural_key(const std::string& name) {
  std::vector<NaturalPart> key;
  std::size_t at = 0;
  while (at <= name.size()) {
    const std::size_t end = std::min(name.find('.', at), name.size());
    const std::string part = name.substr(at, end - at);
    const std::size_t digits = part.find_last_not_of("0123456789") + 1;  // 0 when all digits
    NaturalPart p;
    p.word = digits > 0 || part.empty();
    p.text = part.substr(0, digits);
    if (digits < part.size()) p.number = std::stoll(part.substr(digits));
    key.push_back(p);
    at = end + 1;
  }
  return key;
}

// The order transformers 5 saves a mixture of experts in: it fuses each layer's experts in memory
// (mlp.experts.gate_up_proj [E, 2 f, h], mlp.experts.down_proj [E, h, f]; Mixtral's
// block_sparse_moe is mlp there too), sorts the in-memory names by dot_natural_key, and expands each
// fused tensor in place into the hub's per-expert tensors: down (w2) of every expert, then gate
// (w1) of every expert, then up (w3). Its shards (max_shard_size) follow that order; the down, the
// gate and the up tensors of a layer's experts are views of three storages, each sized once and
// kept in the shard of its first view. Returns the tensors in order, grouped by storage.
std::vector<std::vector<std::string>> moe_save_order(const std::vector<std::string>& order) {
  struct Unit {
    std::vector<NaturalPart> key;
    std::vector<std::pair<std::pair<int, int64_t>, std::string>> tensors;  // ((gate 0 / up 1, expert), name)
  };
  std::map<std::string, Unit> units;
  for (const std::string& name : order) {
    std::string memory = name;
    std::pair<int, int64_t> within{0, 0};
    const std::size_t experts = name.find(".experts.");
    const std::size_t layer_end = name.find(name.find(".block_sparse_moe.") != std::string::npos ? ".block_sparse_moe."
                                                                                                 : ".mlp.");
    if (experts != std::string::npos && layer_end != std::string::npos) {
      const std::size_t j_end = name.find('.', experts + 9);
      const std::string which = name.substr(j_end + 1);  // "w1.weight", "gate_proj.weight", ...
      const bool down = which == "w2.weight" || which == "down_proj.weight";
      const bool up = which == "w3.weight" || which == "up_proj.weight";
      memory = name.substr(0, layer_end) + ".mlp.experts." + (down ? "down_proj" : "gate_up_proj");
      within = {up ? 1 : 0, std::stoll(name.substr(experts + 9, j_end - experts - 9))};
    } else if (name.find(".block_sparse_moe.gate.") != std::string::npos) {
      memory = name.substr(0, name.find(".block_sparse_moe.")) + ".mlp.gate.weight";
    }
    Unit& u = units[memory];
    u.key = natural_key(memory);
    u.tensors.emplace_back(within, name);
  }
  std::vector<const Unit*> sorted;
  for (const auto& [memory, u] : units) sorted.push_back(&u);
  std::sort(sorted.begin(), sorted.end(), [](const Unit* x, const Unit* y) { return x->key < y->key; });
  std::vector<std::vector<std::string>> out;  // tensors of one storage: one tensor, or E expert views
  for (const Unit* u : sorted) {
    auto tensors = u->tensors;
    std::sort(tensors.begin(), tensors.end());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (i == 0 || tensors[i].first.first != tensors[i - 1].first.first) out.emplace_back();
      out.back().push_back(tensors[i].second);
    }
  }
  return out;
}

}  // namespace

// DeepSeek's multi-latent attention of layer i (mla_attention.h: the same row orders, the RoPE
// rows permuted where the hub stores them interleaved).
void add_mla_mappings(const GptConfig& c, const std::string& ptdp_layer, const std::string& H, bool interleave,
                      std::vector<HfMapping>& m) {
  const int64_t h = c.hidden_size, a = c.num_attention_heads, rq = c.q_lora_rank, r = c.kv_lora_rank;
  const int64_t dq = c.mla_qk_dim(), dn = c.qk_head_dim, dv = c.v_head_dim, dr = c.qk_pos_emb_head_dim;
  const std::string L = ptdp_layer + "self_attention.", A = H + "self_attn.";
  const auto add = [&](std::string param, std::vector<int64_t> shape, HfLayout layout, std::vector<HfTensor> t) {
    m.push_back(HfMapping{std::move(param), std::move(shape), layout, std::move(t)});
  };
  const HfLayout q_rope = interleave ? HfLayout::MlaQRope : HfLayout::Copy;
  if (rq > 0) {
    add(L + "linear_q_down_proj.weight", {rq, h}, HfLayout::Copy, {{A + "q_a_proj.weight", {rq, h}}});
    add(L + "q_layernorm.weight", {rq}, HfLayout::Copy, {{A + "q_a_layernorm.weight", {rq}}});
    add(L + "linear_q_up_proj.weight", {a * dq, rq}, q_rope, {{A + "q_b_proj.weight", {a * dq, rq}}});
  } else {
    add(L + "linear_q_proj.weight", {a * dq, h}, q_rope, {{A + "q_proj.weight", {a * dq, h}}});
  }
  add(L + "linear_kv_down_proj.weight", {r + dr, h}, interleave ? HfLayout::MlaKvRope : HfLayout::Copy,
      {{A + "kv_a_proj_with_mqa.weight", {r + dr, h}}});
  add(L + "kv_layernorm.weight", {r}, HfLayout::Copy, {{A + "kv_a_layernorm.weight", {r}}});
  add(L + "linear_kv_up_proj.weight", {a * (dn + dv), r}, HfLayout::Copy, {{A + "kv_b_proj.weight", {a * (dn + dv), r}}});
  add(L + "linear_proj.weight", {h, a * dv}, HfLayout::Copy, {{A + "o_proj.weight", {h, a * dv}}});
}

// One DeepSeek decoder layer: ptdp's `L` ("decoder.layers.{i}." or "mtp.layers.{k}.transformer_layer.")
// from Hugging Face's `H` ("model.layers.{i}."), its MLP MoE or dense.
void add_deepseek_layer(const GptConfig& c, HfArchitecture a, const std::string& L, const std::string& H, bool moe,
                        bool interleave, std::vector<HfMapping>& m) {
  const int64_t h = c.hidden_size, f = c.ffn();
  const std::string M = H + "mlp.";
  const auto add = [&](std::string param, std::vector<int64_t> shape, HfLayout layout, std::vector<HfTensor> t) {
    m.push_back(HfMapping{std::move(param), std::move(shape), layout, std::move(t)});
  };
  add(L + "input_layernorm.weight", {h}, HfLayout::Copy, {{H + "input_layernorm.weight", {h}}});
  add_mla_mappings(c, L, H, interleave, m);
  add(L + "pre_mlp_layernorm.weight", {h}, HfLayout::Copy, {{H + "post_attention_layernorm.weight", {h}}});
  if (moe) return add_moe_mappings_at(c, a, L, H, m);
  add(L + "mlp.linear_fc1.weight", {2 * f, h}, HfLayout::GateUp,
      {{M + "gate_proj.weight", {f, h}}, {M + "up_proj.weight", {f, h}}});
  add(L + "mlp.linear_fc2.weight", {h, f}, HfLayout::Copy, {{M + "down_proj.weight", {h, f}}});
}

// DeepSeek's multi-token prediction module k, stored as decoder layer num_layers + k: enorm, hnorm,
// eh_proj ([h, 2h]: the embedding's columns first, as Megatron's), the decoder layer (MoE as the
// decoder's last layer, GptConfig::mtp_moe(), which is DeepSeek's rule for its layouts),
// shared_head.norm (ptdp's final_layernorm); its embed_tokens and shared_head.head are copies of
// the model's embedding and head (hf_mappings adds them as mirrors of those).
void add_mtp_module(const GptConfig& c, HfArchitecture a, int k, bool interleave, std::vector<HfMapping>& m) {
  const int64_t h = c.hidden_size;
  const std::string P = "mtp.layers." + std::to_string(k) + ".", H = "model.layers." + std::to_string(c.num_layers + k) + ".";
  const auto add = [&](std::string param, std::vector<int64_t> shape, HfLayout layout, std::vector<HfTensor> t) {
    m.push_back(HfMapping{std::move(param), std::move(shape), layout, std::move(t)});
  };
  add(P + "enorm.weight", {h}, HfLayout::Copy, {{H + "enorm.weight", {h}}});
  add(P + "hnorm.weight", {h}, HfLayout::Copy, {{H + "hnorm.weight", {h}}});
  add(P + "eh_proj.weight", {h, 2 * h}, HfLayout::Copy, {{H + "eh_proj.weight", {h, 2 * h}}});
  add_deepseek_layer(c, a, P + "transformer_layer.", H, c.mtp_moe(), interleave, m);
  add(P + "final_layernorm.weight", {h}, HfLayout::Copy, {{H + "shared_head.norm.weight", {h}}});
}

std::vector<HfMapping> hf_mappings(const GptConfig& c, HfArchitecture a, bool rope_interleave) {
  PTDP_CHECK_ARG(a != HfArchitecture::Auto, std::string("hf_mappings needs an architecture, not Auto"));
  const int64_t h = c.hidden_size, V = c.vocab_size, f = c.ffn(), P = c.max_positions();
  const int64_t a_dh = c.attention_width(), g_dh = static_cast<int64_t>(c.query_groups()) * c.head_dim();
  const int64_t dh = c.head_dim();
  std::vector<HfMapping> m;
  const auto add = [&](std::string param, std::vector<int64_t> shape, HfLayout layout, std::vector<HfTensor> t) {
    m.push_back(HfMapping{std::move(param), std::move(shape), layout, std::move(t)});
  };
  if (a == HfArchitecture::Gpt2) {
    const std::string p = "transformer.";
    add("embedding.word_embeddings.weight", {V, h}, HfLayout::VocabRows, {{p + "wte.weight", {V, h}}});
    add("embedding.position_embeddings.weight", {P, h}, HfLayout::Copy, {{p + "wpe.weight", {P, h}}});
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string L = layer(i), H = p + "h." + std::to_string(i) + ".";
      add(L + "input_layernorm.weight", {h}, HfLayout::Copy, {{H + "ln_1.weight", {h}}});
      add(L + "input_layernorm.bias", {h}, HfLayout::Copy, {{H + "ln_1.bias", {h}}});
      add(L + "self_attention.linear_qkv.weight", {3 * h, h}, HfLayout::QkvConv1D,
          {{H + "attn.c_attn.weight", {h, 3 * h}}});
      add(L + "self_attention.linear_qkv.bias", {3 * h}, HfLayout::QkvFused, {{H + "attn.c_attn.bias", {3 * h}}});
      add(L + "self_attention.linear_proj.weight", {h, h}, HfLayout::Transpose, {{H + "attn.c_proj.weight", {h, h}}});
      add(L + "self_attention.linear_proj.bias", {h}, HfLayout::Copy, {{H + "attn.c_proj.bias", {h}}});
      add(L + "pre_mlp_layernorm.weight", {h}, HfLayout::Copy, {{H + "ln_2.weight", {h}}});
      add(L + "pre_mlp_layernorm.bias", {h}, HfLayout::Copy, {{H + "ln_2.bias", {h}}});
      add(L + "mlp.linear_fc1.weight", {f, h}, HfLayout::Transpose, {{H + "mlp.c_fc.weight", {h, f}}});
      add(L + "mlp.linear_fc1.bias", {f}, HfLayout::Copy, {{H + "mlp.c_fc.bias", {f}}});
      add(L + "mlp.linear_fc2.weight", {h, f}, HfLayout::Transpose, {{H + "mlp.c_proj.weight", {f, h}}});
      add(L + "mlp.linear_fc2.bias", {h}, HfLayout::Copy, {{H + "mlp.c_proj.bias", {h}}});
    }
    add("decoder.final_layernorm.weight", {h}, HfLayout::Copy, {{p + "ln_f.weight", {h}}});
    add("decoder.final_layernorm.bias", {h}, HfLayout::Copy, {{p + "ln_f.bias", {h}}});
  } else {
    const std::string p = "model.";
    add("embedding.word_embeddings.weight", {V, h}, HfLayout::VocabRows, {{p + "embed_tokens.weight", {V, h}}});
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string L = layer(i), H = p + "layers." + std::to_string(i) + ".";
      const std::string A = H + "self_attn.", M = H + "mlp.";
      if (hf_is_deepseek(a)) {
        add_deepseek_layer(c, a, L, H, c.moe.is_moe_layer(i), rope_interleave, m);
        continue;
      }
      add(L + "input_layernorm.weight", {h}, HfLayout::Copy, {{H + "input_layernorm.weight", {h}}});
      add(L + "self_attention.linear_qkv.weight", {a_dh + 2 * g_dh, h}, HfLayout::Qkv,
          {{A + "q_proj.weight", {a_dh, h}}, {A + "k_proj.weight", {g_dh, h}}, {A + "v_proj.weight", {g_dh, h}}});
      if (c.qkv_bias())
        add(L + "self_attention.linear_qkv.bias", {a_dh + 2 * g_dh}, HfLayout::Qkv,
            {{A + "q_proj.bias", {a_dh}}, {A + "k_proj.bias", {g_dh}}, {A + "v_proj.bias", {g_dh}}});
      add(L + "self_attention.linear_proj.weight", {h, a_dh}, HfLayout::Copy, {{A + "o_proj.weight", {h, a_dh}}});
      if (c.add_bias_linear)
        add(L + "self_attention.linear_proj.bias", {h}, HfLayout::Copy, {{A + "o_proj.bias", {h}}});
      if (c.qk_layernorm) {
        // Per head ([dh], Qwen3), or across the heads (OLMoE: [a*dh] and [g*dh], the heads in
        // q_proj's and k_proj's order, which is ptdp's global order).
        const int64_t qn = c.qk_layernorm_across_heads ? a_dh : dh, kn = c.qk_layernorm_across_heads ? g_dh : dh;
        add(L + "self_attention.q_layernorm.weight", {qn}, HfLayout::Copy, {{A + "q_norm.weight", {qn}}});
        add(L + "self_attention.k_layernorm.weight", {kn}, HfLayout::Copy, {{A + "k_norm.weight", {kn}}});
      }
      add(L + "pre_mlp_layernorm.weight", {h}, HfLayout::Copy, {{H + "post_attention_layernorm.weight", {h}}});
      if (c.moe.is_moe_layer(i)) {
        add_moe_mappings(c, a, i, m);
        continue;
      }
      add(L + "mlp.linear_fc1.weight", {2 * f, h}, HfLayout::GateUp,
          {{M + "gate_proj.weight", {f, h}}, {M + "up_proj.weight", {f, h}}});
      if (c.add_bias_linear)
        add(L + "mlp.linear_fc1.bias", {2 * f}, HfLayout::GateUp,
            {{M + "gate_proj.bias", {f}}, {M + "up_proj.bias", {f}}});
      add(L + "mlp.linear_fc2.weight", {h, f}, HfLayout::Copy, {{M + "down_proj.weight", {h, f}}});
      if (c.add_bias_linear) add(L + "mlp.linear_fc2.bias", {h}, HfLayout::Copy, {{M + "down_proj.bias", {h}}});
    }
    add("decoder.final_layernorm.weight", {h}, HfLayout::Copy, {{p + "norm.weight", {h}}});
  }
  if (!c.tie_embeddings) add("output_layer.weight", {V, h}, HfLayout::VocabRows, {{"lm_head.weight", {V, h}}});
  if (hf_is_deepseek(a) && c.mtp_num_layers > 0) {
    // Each MTP layer stores its own copies of the embedding and the head: mirrors, the same rows.
    for (int k = 0; k < c.mtp_num_layers; ++k) {
      const std::string H = "model.layers." + std::to_string(c.num_layers + k) + ".";
      m.front().tensors.push_back({H + "embed_tokens.weight", {V, h}});
      (c.tie_embeddings ? m.front() : m.back()).tensors.push_back({H + "shared_head.head.weight", {V, h}});
    }
    for (int k = 0; k < c.mtp_num_layers; ++k) add_mtp_module(c, a, k, rope_interleave, m);
  }
  return m;
}

std::vector<HfTensor> hf_state_dict(const GptConfig& c, HfArchitecture a) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const HfMapping& m : hf_mappings(c, a))
    for (const HfTensor& t : m.tensors) shapes[t.name] = t.shape;
  std::vector<std::string> order;
  if (a == HfArchitecture::Gpt2) {
    order = {"transformer.wte.weight", "transformer.wpe.weight"};
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string H = "transformer.h." + std::to_string(i) + ".";
      for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                            "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                            "mlp.c_proj.weight", "mlp.c_proj.bias"})
        order.push_back(H + s);
    }
    order.push_back("transformer.ln_f.weight");
    order.push_back("transformer.ln_f.bias");
  } else {
    order = {"model.embed_tokens.weight"};
    const auto weight_and_bias = [&](const std::string& module) {
      order.push_back(module + ".weight");
      order.push_back(module + ".bias");
    };
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string H = "model.layers." + std::to_string(i) + ".";
      for (const char* s : {"self_attn.q_proj", "self_attn.q_a_proj", "self_attn.q_a_layernorm", "self_attn.q_b_proj",
                            "self_attn.k_proj", "self_attn.v_proj", "self_attn.kv_a_proj_with_mqa",
                            "self_attn.kv_a_layernorm", "self_attn.kv_b_proj", "self_attn.o_proj", "self_attn.q_norm",
                            "self_attn.k_norm"})
        weight_and_bias(H + s);
      if (!c.moe.is_moe_layer(i)) {
        for (const char* s : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) weight_and_bias(H + s);
      } else {
        const bool mixtral = a == HfArchitecture::Mixtral;
        const std::string M = H + (mixtral ? "block_sparse_moe." : "mlp.");
        order.push_back(M + "gate.weight");
        order.push_back(M + "gate.e_score_correction_bias");
        for (int J = 0; J < c.moe.num_experts; ++J) {
          const std::string E = M + "experts." + std::to_string(J) + ".";
          for (const char* s : {"w1", "w2", "w3", "gate_proj", "up_proj", "down_proj"}) weight_and_bias(E + s);
        }
        for (const char* s : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                              "shared_expert_gate", "shared_experts.gate_proj", "shared_experts.up_proj",
                              "shared_experts.down_proj"})
          weight_and_bias(M + s);
      }
      order.push_back(H + "input_layernorm.weight");
      order.push_back(H + "post_attention_layernorm.weight");
    }
    order.push_back("model.norm.weight");
  }
  order.push_back("lm_head.weight");
  std::vector<HfTensor> out;
  // transformers 5 saves DeepSeek as the MoE classes: its experts fused in memory, so in
  // dot_natural_key order.
  if (hf_is_moe(a) || hf_is_deepseek(a)) {
    std::vector<std::string> present;
    if (hf_is_deepseek(a)) {  // every name (its MTP layers' too): the order is the names' sort
      for (const auto& [n, shape] : shapes) present.push_back(n);
    } else {
      for (const std::string& n : order)
        if (shapes.count(n)) present.push_back(n);
    }
    for (const std::vector<std::string>& storage : moe_save_order(present)) {
      const int first = static_cast<int>(out.size());
      for (const std::string& n : storage)
        out.push_back(HfTensor{n, shapes.at(n), static_cast<int>(out.size()) == first ? -1 : first});
    }
    order.clear();
  }
  for (const std::string& n : order) {
    const auto it = shapes.find(n);
    if (it != shapes.end()) out.push_back(HfTensor{n, it->second});
  }
  if (out.size() != shapes.size())
    throw_error(ErrorCode::Internal, "hf_state_dict: the state-dict order misses a tensor of the mappings");
  return out;
}

// -----------------------------------------------------------------------------------------------
// Layout conversions

void hf_transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) out[k * rows + r] = in[r * cols + k];
}

void hf_qkv_to_grouped(const float* q, const float* k, const float* v, int heads, int groups, int head_dim,
                       int64_t cols, float* out) {
  PTDP_CHECK_ARG(groups > 0 && heads % groups == 0,
                 str_cat("hf_qkv_to_grouped: ", heads, " heads do not split into ", groups, " groups"));
  const int per = heads / groups;
  const int64_t block = static_cast<int64_t>(head_dim) * cols;  // one head's rows
  for (int g = 0; g < groups; ++g) {
    float* dst = out + static_cast<int64_t>(g) * (per + 2) * block;
    std::memcpy(dst, q + static_cast<int64_t>(g) * per * block, static_cast<std::size_t>(per * block) * sizeof(float));
    std::memcpy(dst + per * block, k + g * block, static_cast<std::size_t>(block) * sizeof(float));
    std::memcpy(dst + (per + 1) * block, v + g * block, static_cast<std::size_t>(block) * sizeof(float));
  }
}

void hf_qkv_from_grouped(const float* qkv, int heads, int groups, int head_dim, int64_t cols, float* q, float* k,
                         float* v) {
  PTDP_CHECK_ARG(groups > 0 && heads % groups == 0,
                 str_cat("hf_qkv_from_grouped: ", heads, " heads do not split into ", groups, " groups"));
  const int per = heads / groups;
  const int64_t block = static_cast<int64_t>(head_dim) * cols;
  for (int g = 0; g < groups; ++g) {
    const float* src = qkv + static_cast<int64_t>(g) * (per + 2) * block;
    std::memcpy(q + static_cast<int64_t>(g) * per * block, src, static_cast<std::size_t>(per * block) * sizeof(float));
    std::memcpy(k + g * block, src + per * block, static_cast<std::size_t>(block) * sizeof(float));
    std::memcpy(v + g * block, src + (per + 1) * block, static_cast<std::size_t>(block) * sizeof(float));
  }
}

namespace {

// The RoPE rows [offset, offset + rope) of each of `blocks` blocks of block_rows rows: row
// offset + i of the rotate-half order (i < rope/2 the first halves, rope/2 + i the second) is row
// offset + 2i (or 2i + 1) of the interleaved order. `to_half` copies interleaved -> rotate-half,
// otherwise back; every other row is copied as it is.
void permute_rope_rows(const char* what, const float* in, int64_t blocks, int64_t block_rows, int64_t offset,
                       int64_t rope, int64_t cols, float* out, bool to_half) {
  PTDP_CHECK_ARG(rope % 2 == 0 && offset >= 0 && offset + rope <= block_rows,
                 str_cat(what, ": ", rope, " RoPE rows from ", offset, " do not fit ", block_rows, " rows or are odd"));
  const auto row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* src = in + b * block_rows * cols;
    float* dst = out + b * block_rows * cols;
    std::memcpy(dst, src, static_cast<std::size_t>(offset) * row_bytes);
    for (int64_t i = 0; i < rope; ++i) {
      const int64_t half = offset + (i % 2 == 0 ? i / 2 : rope / 2 + i / 2), interleaved = offset + i;
      const int64_t to = to_half ? half : interleaved, from = to_half ? interleaved : half;
      std::memcpy(dst + to * cols, src + from * cols, row_bytes);
    }
    const int64_t tail = block_rows - offset - rope;
    std::memcpy(dst + (offset + rope) * cols, src + (offset + rope) * cols, static_cast<std::size_t>(tail) * row_bytes);
  }
}

}  // namespace

void hf_rope_deinterleave(const float* in, int64_t blocks, int64_t block_rows, int64_t offset, int64_t rope,
                          int64_t cols, float* out) {
  permute_rope_rows("hf_rope_deinterleave", in, blocks, block_rows, offset, rope, cols, out, true);
}

void hf_rope_interleave_rows(const float* in, int64_t blocks, int64_t block_rows, int64_t offset, int64_t rope,
                             int64_t cols, float* out) {
  permute_rope_rows("hf_rope_interleave_rows", in, blocks, block_rows, offset, rope, cols, out, false);
}

void hf_to_param(const HfMapping& m, const GptConfig& c, const std::vector<const float*>& hf, int64_t rows,
                 float* out) {
  PTDP_CHECK_ARG(hf.size() == m.tensors.size(),
                 str_cat(m.param, ": ", hf.size(), " tensors given, the mapping takes ", m.tensors.size()));
  const int64_t cols = m.shape.size() > 1 ? m.shape[1] : 1;
  const int heads = c.num_attention_heads, groups = c.query_groups(), dh = c.head_dim();
  const auto copy = [](const float* src, int64_t n, float* dst) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  };
  switch (m.layout) {
    case HfLayout::Copy:
      copy(hf[0], numel(m.shape), out);
      return;
    case HfLayout::Transpose:
      hf_transpose(hf[0], m.tensors[0].shape[0], m.tensors[0].shape[1], out);
      return;
    case HfLayout::VocabRows:
      PTDP_CHECK_ARG(rows >= m.shape[0],
                     str_cat(m.param, ": ", rows, " rows cannot hold the vocabulary of ", m.shape[0]));
      // DeepSeek's MTP layers hold copies of the embedding and the head: they must be the same.
      for (std::size_t k = 1; k < hf.size(); ++k)
        if (std::memcmp(hf[k], hf[0], static_cast<std::size_t>(numel(m.shape)) * sizeof(float)) != 0)
          throw_error(ErrorCode::Io, str_cat("'", m.tensors[k].name, "' differs from '", m.tensors[0].name,
                                             "', of which ptdp's multi-token prediction shares one copy (", m.param,
                                             ")"));
      copy(hf[0], numel(m.shape), out);
      std::fill(out + numel(m.shape), out + rows * cols, 0.0f);
      return;
    case HfLayout::Qkv:
      hf_qkv_to_grouped(hf[0], hf[1], hf[2], heads, groups, dh, cols, out);
      return;
    case HfLayout::QkvConv1D: {
      const int64_t h = m.tensors[0].shape[0];
      std::vector<float> t(static_cast<std::size_t>(3 * h * h));
      hf_transpose(hf[0], h, 3 * h, t.data());  // [3h, h]: the q rows, the k rows, the v rows
      hf_qkv_to_grouped(t.data(), t.data() + h * h, t.data() + 2 * h * h, heads, heads, dh, h, out);
      return;
    }
    case HfLayout::QkvFused: {
      const int64_t h = m.shape[0] / 3;
      hf_qkv_to_grouped(hf[0], hf[0] + h, hf[0] + 2 * h, heads, heads, dh, 1, out);
      return;
    }
    case HfLayout::GateUp: {
      const int64_t n = numel(m.tensors[0].shape);
      copy(hf[0], n, out);
      copy(hf[1], n, out + n);
      return;
    }
    case HfLayout::MlaQRope:
      hf_rope_deinterleave(hf[0], c.num_attention_heads, c.mla_qk_dim(), c.qk_head_dim, c.qk_pos_emb_head_dim, cols, out);
      return;
    case HfLayout::MlaKvRope:
      hf_rope_deinterleave(hf[0], 1, m.shape[0], c.kv_lora_rank, c.qk_pos_emb_head_dim, cols, out);
      return;
  }
  throw_error(ErrorCode::Internal, str_cat(m.param, ": unknown layout ", static_cast<int>(m.layout)));
}

void param_to_hf(const HfMapping& m, const GptConfig& c, const float* param, const std::vector<float*>& hf) {
  PTDP_CHECK_ARG(hf.size() == m.tensors.size(),
                 str_cat(m.param, ": ", hf.size(), " tensors given, the mapping makes ", m.tensors.size()));
  const int64_t cols = m.shape.size() > 1 ? m.shape[1] : 1;
  const int heads = c.num_attention_heads, groups = c.query_groups(), dh = c.head_dim();
  const auto copy = [](const float* src, int64_t n, float* dst) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  };
  switch (m.layout) {
    case HfLayout::Copy:
      copy(param, numel(m.shape), hf[0]);
      return;
    case HfLayout::VocabRows:  // and DeepSeek's MTP copies of the embedding and the head
      for (float* out : hf) copy(param, numel(m.shape), out);
      return;
    case HfLayout::Transpose:
      hf_transpose(param, m.shape[0], m.shape[1], hf[0]);
      return;
    case HfLayout::Qkv:
      hf_qkv_from_grouped(param, heads, groups, dh, cols, hf[0], hf[1], hf[2]);
      return;
    case HfLayout::QkvConv1D: {
      const int64_t h = m.shape[1];
      std::vector<float> t(static_cast<std::size_t>(3 * h * h));
      hf_qkv_from_grouped(param, heads, heads, dh, h, t.data(), t.data() + h * h, t.data() + 2 * h * h);
      hf_transpose(t.data(), 3 * h, h, hf[0]);
      return;
    }
    case HfLayout::QkvFused: {
      const int64_t h = m.shape[0] / 3;
      hf_qkv_from_grouped(param, heads, heads, dh, 1, hf[0], hf[0] + h, hf[0] + 2 * h);
      return;
    }
    case HfLayout::GateUp: {
      const int64_t n = numel(m.tensors[0].shape);
      copy(param, n, hf[0]);
      copy(param + n, n, hf[1]);
      return;
    }
    case HfLayout::MlaQRope:
      hf_rope_interleave_rows(param, c.num_attention_heads, c.mla_qk_dim(), c.qk_head_dim, c.qk_pos_emb_head_dim, cols,
                              hf[0]);
      return;
    case HfLayout::MlaKvRope:
      hf_rope_interleave_rows(param, 1, m.shape[0], c.kv_lora_rank, c.qk_pos_emb_head_dim, cols, hf[0]);
      return;
  }
  throw_error(ErrorCode::Internal, str_cat(m.param, ": unknown layout ", static_cast<int>(m.layout)));
}

std::vector<int> hf_shard_plan(const std::vector<uint64_t>& bytes, uint64_t max_shard_size,
                               const std::vector<int>& shares_storage) {
  std::vector<int> plan(bytes.size(), 0);
  if (max_shard_size == 0) return plan;
  PTDP_CHECK_ARG(shares_storage.empty() || shares_storage.size() == bytes.size(),
                 str_cat("hf_shard_plan: ", shares_storage.size(), " storage links for ", bytes.size(), " tensors"));
  const auto shared = [&](std::size_t i) { return shares_storage.empty() ? -1 : shares_storage[i]; };
  // As huggingface_hub: a tensor above the limit is appended as a shard at once; the shard being
  // filled is appended when the next tensor would tip it over, or at the end.
  int shards = 0;
  std::vector<std::size_t> current;
  uint64_t current_size = 0;
  const auto close_current = [&] {
    for (std::size_t i : current) plan[i] = shards;
    ++shards;
    current.clear();
    current_size = 0;
  };
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (shared(i) >= 0) {
      PTDP_CHECK_ARG(static_cast<std::size_t>(shared(i)) < i && shared(static_cast<std::size_t>(shared(i))) < 0,
                     str_cat("hf_shard_plan: tensor ", i, " shares the storage of ", shared(i),
                             ", which is not an earlier tensor with its own"));
      continue;
    }
    if (bytes[i] > max_shard_size) {
      plan[i] = shards++;
      continue;
    }
    if (current_size + bytes[i] > max_shard_size) close_current();
    current.push_back(i);
    current_size += bytes[i];
  }
  if (!current.empty()) close_current();
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (shared(i) >= 0) plan[i] = plan[static_cast<std::size_t>(shared(i))];
  return plan;
}

std::string hf_shard_name(int index, int count) {
  if (count == 1) return kSingleFile;
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", index + 1, count);
  return name;
}

// -----------------------------------------------------------------------------------------------
// Files

HfCheckpointFiles::HfCheckpointFiles(const std::string& dir) {
  PTDP_CHECK_ARG(!dir.empty(), std::string("the Hugging Face directory is empty"));
  if (!fs::is_directory(dir)) throw_io_error(dir, fs::exists(dir) ? "is not a directory" : "missing");
  const fs::path root(dir);
  const std::string index_path = (root / kIndexFile).string(), single = (root / kSingleFile).string();
  std::map<std::string, std::string> weight_map;  // tensor -> file name
  if (fs::exists(index_path)) {
    const json index = parse_json_file(index_path, "index");
    if (!index.contains("weight_map") || !index.at("weight_map").is_object())
      throw_io_error(index_path, "has no \"weight_map\" object");
    for (const auto& [name, file] : index.at("weight_map").items()) {
      if (!file.is_string()) throw_io_error(index_path, str_cat("weight_map entry \"", name, "\" is not a file name"));
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
        throw_io_error(index_path, str_cat("weight_map entry \"", name, "\" names \"", f, "\", not a file beside it"));
      weight_map[name] = f;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const SafetensorsTensorInfo& t : files_.back()->tensors()) index_.emplace_back(t.name, 0);
    return;
  } else if (fs::exists(root / "pytorch_model.bin") || fs::exists(root / "pytorch_model.bin.index.json")) {
    throw_io_error(dir,
                   "holds pytorch_model.bin, which ptdp does not read (pickle); save the model with "
                   "safe_serialization=True to get model.safetensors");
  } else {
    throw_io_error(dir, str_cat("has neither ", kSingleFile, " nor ", kIndexFile));
  }
  std::map<std::string, std::size_t> opened;
  for (const auto& [name, f] : weight_map) {
    auto it = opened.find(f);
    if (it == opened.end()) {
      files_.push_back(std::make_unique<SafetensorsFile>((root / f).string()));
      it = opened.emplace(f, files_.size() - 1).first;
    }
    if (!files_[it->second]->has(name))
      throw_io_error(files_[it->second]->path(),
                     str_cat("has no tensor '", name, "', which ", kIndexFile, " places in it"));
    index_.emplace_back(name, it->second);
  }
  std::sort(index_.begin(), index_.end());
}

std::vector<std::string> HfCheckpointFiles::names() const {
  std::vector<std::string> out;
  for (const auto& e : index_) out.push_back(e.first);
  return out;
}

bool HfCheckpointFiles::has(const std::string& name) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(name, std::size_t{0}));
  return it != index_.end() && it->first == name;
}

const SafetensorsFile& HfCheckpointFiles::file(const std::string& name) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(name, std::size_t{0}));
  PTDP_CHECK_ARG(it != index_.end() && it->first == name,
                 str_cat("the Hugging Face checkpoint has no tensor '", name, "'"));
  return *files_[it->second];
}

const SafetensorsTensorInfo& HfCheckpointFiles::info(const std::string& name) const { return file(name).info(name); }

const std::string& HfCheckpointFiles::file_of(const std::string& name) const { return file(name).path(); }

std::vector<float> HfCheckpointFiles::read(const std::string& name) const {
  const SafetensorsFile& f = file(name);
  std::vector<float> out(static_cast<std::size_t>(f.info(name).numel()));
  f.read_f32(name, out.data());
  return out;
}

// -----------------------------------------------------------------------------------------------
// Load

void load_hf_checkpoint(const std::string& dir, GptPipeline& model) {
  PTDP_CHECK_ARG(!dir.empty(), std::string("the Hugging Face directory is empty"));
  ProcessGroups& g = model.groups();
  std::unique_ptr<HfCheckpointFiles> files;
  std::vector<HfMapping> maps;
  std::map<std::string, std::string> stored;  // a mapping's tensor name -> its name in the files
  std::string tied_head;                      // lm_head.weight stored beside a tied embedding
  HfConfig hf;

  // Everything that can be refused is checked before any parameter changes.
  agree_on_failure(g, [&] {
    hf = read_hf_config(dir);
    const std::string source = (fs::path(dir) / kConfigFile).string();
    check_hf_model_matches(hf.model, model.config(), source);
    files = std::make_unique<HfCheckpointFiles>(dir);
    maps = hf_mappings(hf.model, hf.architecture, hf.rope_interleave);
    // With or without the base model's prefix ("transformer." / "model."): GPT2Model and
    // LlamaModel save their weights without it.
    const std::string prefix = hf.architecture == HfArchitecture::Gpt2 ? "transformer." : "model.";
    const std::string probe = maps.front().tensors.front().name;
    const bool strip = !files->has(probe) && files->has(probe.substr(prefix.size()));
    std::set<std::string> used;
    for (const HfMapping& m : maps) {
      for (const HfTensor& t : m.tensors) {
        const bool prefixed = t.name.rfind(prefix, 0) == 0;
        const std::string name = strip && prefixed ? t.name.substr(prefix.size()) : t.name;
        if (!files->has(name)) {
          throw_io_error(dir, str_cat("the Hugging Face checkpoint has no tensor '", name, "' (", m.param, ", ",
                                      hf_class_name(hf.architecture), ")"));
        }
        const SafetensorsTensorInfo& info = files->info(name);
        if (info.shape != t.shape)
          throw_io_error(files->file_of(name), str_cat("tensor '", name, "' has shape ", shape_text(info.shape),
                                                       "; config.json calls for ", shape_text(t.shape)));
        if (!st_dtype_is_float(info.dtype))
          throw_io_error(files->file_of(name),
                         str_cat("tensor '", name, "' has dtype ", st_dtype_name(info.dtype), ", not a float type"));
        stored[t.name] = name;
        used.insert(name);
      }
    }
    std::vector<std::string> unknown;
    for (const std::string& n : files->names()) {
      if (used.count(n) || ignorable_buffer(n, hf.architecture)) continue;
      if (n == "lm_head.weight" && hf.model.tie_embeddings) {
        tied_head = n;
        continue;
      }
      unknown.push_back(n);
    }
    if (hf_is_deepseek(hf.architecture) && !unknown.empty()) {
      // DeepSeek's multi-token prediction layers follow the decoder's as model.layers.{L}.*.
      const std::string mtp = str_cat("model.layers.", hf.model.num_layers, ".");
      for (const std::string& n : unknown)
        if (n.rfind(mtp, 0) == 0)
          throw_io_error(dir, str_cat("'", n, "' belongs to a multi-token prediction layer after the ",
                                      hf.model.num_layers, " decoder layers, but config.json has num_nextn_predict_layers = ",
                                      hf.nextn_predict_layers, " (or the layer lacks model.layers.", hf.model.num_layers,
                                      ".eh_proj.weight)"));
    }
    if (!unknown.empty()) {
      std::string list;
      for (std::size_t i = 0; i < unknown.size() && i < 5; ++i) list += (i ? ", '" : "'") + unknown[i] + "'";
      if (unknown.size() > 5) list += str_cat(" and ", unknown.size() - 5, " more");
      throw_io_error(dir, str_cat("the Hugging Face checkpoint holds tensors a ", hf_class_name(hf.architecture),
                                  " of this config does not have: ", list));
    }
    if (!tied_head.empty()) {
      // A tied head saved anyway must be the embedding itself.
      const std::vector<float> head = files->read(tied_head);
      const std::vector<float> embedding = files->read(stored.at(maps.front().tensors.front().name));
      if (head.size() != embedding.size() ||
          std::memcmp(head.data(), embedding.data(), head.size() * sizeof(float)) != 0)
        throw_io_error(files->file_of(tied_head),
                       "holds an lm_head.weight that differs from the word embedding, but config.json ties them "
                       "(tie_word_embeddings)");
    }
    std::set<std::string> mapped;
    for (const HfMapping& m : maps) mapped.insert(m.param);
    for (const ParamInfo& p : model.all_params())
      if (!mapped.count(p.name))
        throw_error(ErrorCode::Internal, str_cat("load_hf_checkpoint: no Hugging Face tensor maps to ", p.name));
  });

  // Read and set; on any rank's failure every rank puts its parameters back.
  std::vector<std::vector<float>> before(model.chunks().size());
  for (std::size_t j = 0; j < before.size(); ++j) before[j] = model.chunks()[j]->params().masters_to_host();
  std::map<std::string, const ParamInfo*> infos;
  for (const ParamInfo& p : model.all_params()) infos[p.name] = &p;
  try {
    agree_on_failure(g, [&] {
      for (const HfMapping& m : maps) {
        bool held = false;
        for (const auto& c : model.chunks()) held |= c->params().find(m.param) >= 0;
        if (!held) continue;
        std::vector<std::vector<float>> values;
        std::vector<const float*> ptrs;
        for (const HfTensor& t : m.tensors) values.push_back(files->read(stored.at(t.name)));
        for (const auto& v : values) ptrs.push_back(v.data());
        const ParamInfo& info = *infos.at(m.param);
        std::vector<float> out(static_cast<std::size_t>(info.global_shape.numel()));
        hf_to_param(m, hf.model, ptrs, info.global_shape[0], out.data());
        model.set_global(m.param, out.data());
      }
    });
  } catch (...) {
    for (std::size_t j = 0; j < before.size(); ++j) {
      model.chunks()[j]->params().masters_from_host(before[j].data());
    }
    throw;
  }
}

// -----------------------------------------------------------------------------------------------
// Save

void save_hf_checkpoint(const std::string& dir, GptPipeline& model, const HfSaveOptions& o) {
  PTDP_CHECK_ARG(!dir.empty(), std::string("the Hugging Face directory is empty"));
  PTDP_CHECK_ARG(o.dtype == StDType::F32 || o.dtype == StDType::BF16 || o.dtype == StDType::F16,
                 str_cat("a Hugging Face checkpoint is written as F32, BF16 or F16, not ", st_dtype_name(o.dtype)));
  ProcessGroups& g = model.groups();
  const bool writer = g.rank(GroupKind::World) == 0;
  const GptConfig& c = model.config();
  json config;
  std::map<std::string, HfMapping> by_param;
  std::vector<HfTensor> order;
  std::vector<int> plan;
  int shards = 0;

  agree_on_failure(g, [&] {
    if (!writer) return;
    json base = json::object();
    HfArchitecture arch = o.architecture;
    if (!o.base_config.empty()) {
      base = parse_json_file(o.base_config, "base config");
      if (arch == HfArchitecture::Auto) {
        // The base config's class when the model can be written as it (Mistral, say).
        try {
          const HfArchitecture from_base = hf_architecture_of(base, o.base_config);
          check_hf_architecture(c, from_base);
          arch = from_base;
        } catch (const Error&) {
        }
      }
    }
    if (arch == HfArchitecture::Auto) arch = hf_default_architecture(c);
    config = hf_config_to_json(c, arch, o.dtype, base);
    for (const HfMapping& m : hf_mappings(c, arch, hf_rope_interleave(arch, config))) by_param.emplace(m.param, m);
    for (const ParamInfo& p : model.all_params())
      if (!by_param.count(p.name))
        throw_error(ErrorCode::Internal, str_cat("save_hf_checkpoint: ", p.name, " maps to no Hugging Face tensor"));
    order = hf_state_dict(c, arch);
    // A fused experts tensor counts its whole storage at its first view (huggingface_hub sizes a
    // storage once, by its first tensor).
    std::vector<uint64_t> bytes(order.size(), 0);
    std::vector<int> shares;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const uint64_t b = static_cast<uint64_t>(numel(order[i].shape)) * st_dtype_size(o.dtype);
      const int first = order[i].shares_storage_with;
      bytes[first >= 0 ? static_cast<std::size_t>(first) : i] += b;
      shares.push_back(first);
    }
    plan = hf_shard_plan(bytes, o.max_shard_size, shares);
    shards = plan.empty() ? 1 : *std::max_element(plan.begin(), plan.end()) + 1;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir)) throw_io_error(dir, str_cat("cannot create the directory: ", ec.message()));
  });

  // Every rank takes part in every gather; world rank 0 converts and writes each shard as soon as
  // all its tensors are there. A write failure is kept until the gathers are done.
  agree_on_failure(g, [&] {
    std::exception_ptr failure;
    std::map<std::string, std::vector<float>> pending;
    std::vector<bool> written(static_cast<std::size_t>(shards), false);
    std::vector<std::string> files(static_cast<std::size_t>(shards));
    for (int s = 0; s < shards; ++s) files[static_cast<std::size_t>(s)] = hf_shard_name(s, shards);
    const auto flush = [&](bool all) {
      for (int s = 0; s < shards; ++s) {
        if (written[static_cast<std::size_t>(s)]) continue;
        bool ready = true;
        for (std::size_t i = 0; i < order.size(); ++i)
          if (plan[i] == s && !pending.count(order[i].name)) ready = false;
        if (!ready) {
          if (all) throw_error(ErrorCode::Internal, str_cat("save_hf_checkpoint: shard ", s, " is incomplete"));
          continue;
        }
        SafetensorsWriter w;
        for (std::size_t i = 0; i < order.size(); ++i)
          if (plan[i] == s) w.add_from_f32(order[i].name, o.dtype, order[i].shape, pending.at(order[i].name).data());
        w.set_metadata("format", "pt");
        w.write((fs::path(dir) / files[static_cast<std::size_t>(s)]).string());
        for (std::size_t i = 0; i < order.size(); ++i)
          if (plan[i] == s) pending.erase(order[i].name);
        written[static_cast<std::size_t>(s)] = true;
      }
    };
    for (const ParamInfo& p : model.all_params()) {
      std::vector<float> value(static_cast<std::size_t>(p.global_shape.numel()));
      model.get_global(p.name, false, value.data());
      if (!writer || failure) continue;
      try {
        const HfMapping& m = by_param.at(p.name);
        std::vector<float*> ptrs;
        for (const HfTensor& t : m.tensors) {
          std::vector<float>& out = pending[t.name];
          out.assign(static_cast<std::size_t>(numel(t.shape)), 0.0f);
          ptrs.push_back(out.data());
        }
        param_to_hf(m, c, value.data(), ptrs);
        flush(false);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    if (!writer) return;
    if (failure) std::rethrow_exception(failure);
    flush(true);
    // Files of an earlier save that this one replaces: the other form (single or sharded) and
    // shards of another count.
    const std::set<std::string> kept(files.begin(), files.end());
    std::vector<fs::path> stale;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (kept.count(n)) continue;
      if (n == kSingleFile || n == kIndexFile || is_shard_file_name(n)) stale.push_back(e.path());
    }
    for (const fs::path& p : stale) fs::remove(p);
    if (shards > 1) {
      uint64_t total = 0;
      json weight_map = json::object();
      for (std::size_t i = 0; i < order.size(); ++i) {
        total += static_cast<uint64_t>(numel(order[i].shape)) * st_dtype_size(o.dtype);
        weight_map[order[i].name] = files[static_cast<std::size_t>(plan[i])];
      }
      const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      write_text((fs::path(dir) / kIndexFile).string(), json_text(index, 2) + "\n");
    }
    write_text((fs::path(dir) / kConfigFile).string(), json_text(config, 2) + "\n");
  });
}

}  // namespace ptdp
