// Hugging Face checkpoints in and out: `config.json` plus `model.safetensors` (or shards named by
// `model.safetensors.index.json`) of GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM, read into a GptPipeline at any (t, p, d, v) and written from one.
//
// The layouts differ from ptdp's (Megatron-Core's, docs/architecture.md) in four places, each converted
// here both ways and tested on its own:
//   - GPT-2's Conv1D stores weights [in, out]; ptdp's linears are [out, in]: a transpose.
//   - The attention input projection: GPT-2's c_attn is q | k | v (each [h] columns, heads in
//     order), Llama's q_proj [a dh, h], k_proj and v_proj [g dh, h]; ptdp's linear_qkv has rows
//     grouped per query group (its a/g query heads, then its key head, then its value head).
//   - SwiGLU: Hugging Face's gate_proj and up_proj are one tensor in ptdp, [gate rows; up rows].
//   - The vocabulary: ptdp pads the embedding (and an untied head) to a multiple of
//     make_vocab_size_divisible_by * t; padded rows are zero on import and cut on export.
// RoPE needs no permutation: Hugging Face's Llama applies rotate-half to each head (dims i and
// i + dh/2 form a pair) to the q_proj/k_proj rows as stored, which is ptdp's (and Megatron-Core's
// default, non-interleaved) convention.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/hf_config.h"
#include "core/checkpoint/safetensors.h"
#include "core/model/gpt_pipeline.h"

namespace ptdp {

/// One tensor of a Hugging Face state dict: its name (as *ForCausalLM saves it, with the
/// "transformer." or "model." prefix) and shape.
struct HfTensor {
  std::string name;            ///< e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  ///< as stored ([in, out] for GPT-2's Conv1D weights)
  /// In hf_state_dict: the index of the first tensor whose storage this one shares in
  /// transformers 5's memory (the per-expert views of a fused experts tensor), which decides the
  /// shard of them all; -1: its own storage.
  int shares_storage_with = -1;
};

/// How a ptdp parameter's global value is made of Hugging Face tensors.
enum class HfLayout : int {
  Copy = 0,       ///< one tensor, the same values
  Transpose = 1,  ///< GPT-2's Conv1D weight [in, out] is ptdp's [out, in]
  VocabRows = 2,  ///< [V, h] is the first V rows of ptdp's [V_padded, h]; the rest is zero
  Qkv = 3,        ///< q, k, v (weights [rows, h] or biases [rows]) into rows grouped per query group
  QkvConv1D = 4,  ///< GPT-2's c_attn.weight [h, 3h] (columns q | k | v), transposed, then grouped
  QkvFused = 5,   ///< GPT-2's c_attn.bias [3h] (q | k | v), grouped
  GateUp = 6,     ///< gate_proj and up_proj stacked: [gate rows; up rows]
  /// DeepSeek's q_b_proj / q_proj [a (dn + dr), in] with interleaved RoPE: in each head's rows
  /// [nope, rope] the dr RoPE rows go from pairs (0, 1), (2, 3), ... to rotate-half's halves
  /// (0, 2, 4, ..., then 1, 3, 5, ...); the other rows are copied.
  MlaQRope = 7,
  /// DeepSeek's kv_a_proj_with_mqa [r + dr, h] with interleaved RoPE: the dr rows of the shared
  /// RoPE key after the r latent rows, the same permutation.
  MlaKvRope = 8,
};

/// One ptdp parameter and the Hugging Face tensors it is made of.
struct HfMapping {
  std::string param;                 ///< ptdp's (Megatron-Core's) name
  std::vector<int64_t> shape;        ///< its global shape with the true vocabulary (VocabRows: [V, h])
  HfLayout layout = HfLayout::Copy;  ///< how the tensors make the parameter
  std::vector<HfTensor> tensors;     ///< in the order the layout takes them (q, k, v; gate, up)
};

/// Every parameter of a `config` model exported as `architecture` (not Auto), in ptdp's model
/// order; each Hugging Face tensor appears in exactly one mapping.
/// `rope_interleave` (DeepSeek only, hf_rope_interleave): DeepSeek's RoPE rows are stored as
/// interleaved pairs (MlaQRope, MlaKvRope), else they are copied.
std::vector<HfMapping> hf_mappings(const GptConfig& config, HfArchitecture architecture, bool rope_interleave = true);
/// The Hugging Face state dict of the same model in the order Hugging Face saves it (module
/// registration order), without the tied lm_head.
std::vector<HfTensor> hf_state_dict(const GptConfig& config, HfArchitecture architecture);

/// Builds the ptdp value (`rows` rows: the padded vocabulary for VocabRows, else shape[0]) of
/// `m` from its Hugging Face tensors (`hf[i]` holds m.tensors[i], row-major).
void hf_to_param(const HfMapping& m, const GptConfig& config, const std::vector<const float*>& hf, int64_t rows,
                 float* out);
/// The inverse: the Hugging Face tensors of `m` from the ptdp value (whose first shape[0] rows
/// are read for VocabRows).
void param_to_hf(const HfMapping& m, const GptConfig& config, const float* param, const std::vector<float*>& hf);

/// The layout conversions on their own (row-major; `cols` is 1 for biases).
/// out [cols, rows] = in [rows, cols] transposed.
void hf_transpose(const float* in, int64_t rows, int64_t cols, float* out);
/// q [a dh, cols], k and v [g dh, cols] into out [(a + 2g) dh, cols], grouped per query group.
void hf_qkv_to_grouped(const float* q, const float* k, const float* v, int heads, int groups, int head_dim,
                       int64_t cols, float* out);
/// The inverse of hf_qkv_to_grouped.
void hf_qkv_from_grouped(const float* qkv, int heads, int groups, int head_dim, int64_t cols, float* q, float* k,
                         float* v);

/// `blocks` blocks of `block_rows` rows of `cols` each; in every block the `rope` rows from
/// `offset` on are moved from interleaved pairs to halves: out row offset + i = in row
/// offset + 2 i, out row offset + rope/2 + i = in row offset + 2 i + 1; the other rows are copied.
void hf_rope_deinterleave(const float* in, int64_t blocks, int64_t block_rows, int64_t offset, int64_t rope,
                          int64_t cols, float* out);
/// The inverse of hf_rope_deinterleave.
void hf_rope_interleave_rows(const float* in, int64_t blocks, int64_t block_rows, int64_t offset, int64_t rope,
                             int64_t cols, float* out);

/// Hugging Face's shard assignment (huggingface_hub's split_state_dict_into_shards): tensors in
/// order fill a shard until the next would take it past `max_shard_size` bytes; a tensor larger
/// than the limit gets a shard of its own. Returns each tensor's shard index; 0 means no limit.
/// A tensor i with shares_storage[i] = j >= 0 (j < i) goes where tensor j goes and counts nothing:
/// j's bytes are the whole storage's.
std::vector<int> hf_shard_plan(const std::vector<uint64_t>& bytes, uint64_t max_shard_size,
                               const std::vector<int>& shares_storage = {});
/// "model-00002-of-00005.safetensors" (index 1 of 5), or "model.safetensors" when count is 1.
std::string hf_shard_name(int index, int count);

/// The safetensors files of a Hugging Face directory: model.safetensors.index.json's weight map
/// when it exists, else model.safetensors. Every file is opened and validated at construction
/// (Io naming the file: missing, truncated, a bad header, an index naming a tensor its file
/// lacks; a directory with only pytorch_model.bin is refused with the reason).
class HfCheckpointFiles {
 public:
  /// Opens the files of `dir` (see the class comment for the errors).
  explicit HfCheckpointFiles(const std::string& dir);
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// Whether some file holds `name`.
  bool has(const std::string& name) const;
  /// Dtype, shape and offsets of `name`; InvalidArgument when no file holds it.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  /// Path of the file holding `name`.
  const std::string& file_of(const std::string& name) const;
  /// The tensor as floats (F32, BF16, F16 or F64 stored).
  std::vector<float> read(const std::string& name) const;

 private:
  const SafetensorsFile& file(const std::string& name) const;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<std::pair<std::string, std::size_t>> index_;  // sorted by name: tensor -> file
};

/// Sets every parameter of `model` from the Hugging Face checkpoint in `dir`; each rank reads
/// the tensors of the parameters it holds. The model must match the config (layers, widths,
/// heads, groups, vocabulary, norms, biases, RoPE settings: InvalidArgument naming the field);
/// every expected tensor must be there with its shape and a float dtype, and nothing else but
/// the buffers old exports carry (GPT-2's attn.bias / attn.masked_bias, rotary_emb.inv_freq).
/// Failures are agreed over the world and leave the model unchanged. Collective over the world
/// of the model's groups.
void load_hf_checkpoint(const std::string& dir, GptPipeline& model);

/// How save_hf_checkpoint writes.
struct HfSaveOptions {
  StDType dtype = StDType::F32;                        ///< F32, BF16 or F16 (rounded to nearest even)
  uint64_t max_shard_size = 0;                         ///< bytes; 0: one model.safetensors
  HfArchitecture architecture = HfArchitecture::Auto;  ///< Auto: the base config's class or the default
  std::string base_config;                             ///< a config.json whose other fields are kept; empty: none
};

/// Writes `model` as a Hugging Face checkpoint into `dir` (created if missing): config.json and
/// model.safetensors, or Hugging Face's shards and model.safetensors.index.json when the tensors
/// exceed max_shard_size. Tensors are gathered to world rank 0, which writes; files hold the
/// safetensors metadata {"format": "pt"}. Failures (a model the architecture cannot express, an
/// unwritable directory) are agreed over the world. Collective over the world.
void save_hf_checkpoint(const std::string& dir, GptPipeline& model, const HfSaveOptions& options);

}  // namespace ptdp
