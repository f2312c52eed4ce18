#include "core/model/gpt_config.h"

#include <cmath>

#include "kernels/error.h"

namespace ptdp {

int64_t GptConfig::padded_vocab(int t) const {
  const int64_t multiple = static_cast<int64_t>(make_vocab_size_divisible_by) * t;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

void GptConfig::validate(int t) const {
  const auto positive = [](const char* name, int64_t v) {
    PTDP_CHECK_ARG(v > 0, std::string(name) + " must be > 0, got " + std::to_string(v));
  };
  positive("num_layers", num_layers);
  positive("hidden_size", hidden_size);
  positive("num_attention_heads", num_attention_heads);
  positive("vocab_size", vocab_size);
  positive("make_vocab_size_divisible_by", make_vocab_size_divisible_by);
  positive("seq_length", seq_length);
  positive("tensor parallel size", t);
  PTDP_CHECK_ARG(ffn_hidden_size >= 0, "ffn_hidden_size must be >= 0 (0: 4 x hidden), got " +
                                           std::to_string(ffn_hidden_size));
  PTDP_CHECK_ARG(max_position_embeddings >= 0,
                 "max_position_embeddings must be >= 0 (0: seq_length), got " +
                     std::to_string(max_position_embeddings));
  PTDP_CHECK_ARG(hidden_size % num_attention_heads == 0,
                 "hidden_size " + std::to_string(hidden_size) + " is not divisible by num_attention_heads " +
                     std::to_string(num_attention_heads));
  PTDP_CHECK_ARG(num_attention_heads % t == 0,
                 "num_attention_heads " + std::to_string(num_attention_heads) +
                     " is not divisible by the tensor parallel size " + std::to_string(t));
  PTDP_CHECK_ARG(ffn() % t == 0, "ffn_hidden_size " + std::to_string(ffn()) +
                                     " is not divisible by the tensor parallel size " + std::to_string(t));
  PTDP_CHECK_ARG(seq_length <= max_positions(),
                 "seq_length " + std::to_string(seq_length) + " is longer than max_position_embeddings " +
                     std::to_string(max_positions()));
  const auto rate = [](const char* name, float p) {
    PTDP_CHECK_ARG(p >= 0.0f && p < 1.0f, std::string(name) + " must be in [0, 1), got " + std::to_string(p));
  };
  rate("hidden_dropout", hidden_dropout);
  rate("attention_dropout", attention_dropout);
  PTDP_CHECK_ARG(init_method_std > 0.0f && std::isfinite(init_method_std),
                 "init_method_std must be > 0, got " + std::to_string(init_method_std));
  PTDP_CHECK_ARG(layernorm_epsilon > 0.0f, "layernorm_epsilon must be > 0, got " + std::to_string(layernorm_epsilon));
  PTDP_CHECK_ARG(static_cast<int>(recompute) >= 0 && static_cast<int>(recompute) <= 2,
                 "recompute granularity " + std::to_string(static_cast<int>(recompute)) + " is not none, full or selective");
  PTDP_CHECK_ARG(precision == DType::F32 || precision == DType::BF16 || precision == DType::F16,
                 "precision " + std::to_string(static_cast<int>(precision)) + " is not f32, bf16 or f16");
  PTDP_CHECK_ARG(static_cast<int>(attention) >= 0 && static_cast<int>(attention) <= 2,
                 "attention implementation " + std::to_string(static_cast<int>(attention)) +
                     " is not auto, fused or unfused");
}

double GptConfig::paper_flops(int64_t samples, bool full_recompute) const {
  const double B = static_cast<double>(samples), l = num_layers, h = hidden_size, s = seq_length, V = vocab_size;
  return full_recompute ? 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))
                        : 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

int64_t GptConfig::parameter_count(int t) const {
  const int64_t h = hidden_size, f = ffn(), v = padded_vocab(t);
  const int64_t per_layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (f * h + f) + (h * f + h);
  int64_t total = v * h + static_cast<int64_t>(max_positions()) * h + num_layers * per_layer + 2 * h;
  if (!tie_embeddings) total += v * h;
  return total;
}

}  // namespace ptdp
