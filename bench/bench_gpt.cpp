// bench_gpt: training throughput of the whole GPT model on one rank, CPU engine.
//
//   1. OpenBLAS's peak: short square cblas_sgemm calls sampled before, between and after the
//      timed phases (bench/sgemm_peak.h); the best sample is the ceiling the model's GFLOP/s is
//      compared with, and a run whose samples differ by more than 10% is flagged.
//   2. GptModel::forward_backward of one microbatch per iteration (GPT-2 small by default:
//      12 layers, h = 768, 12 heads, V = 50257, s = 64, b = 4; or a named model's shape and
//      architecture with --model-preset, e.g. llama-3.2-1b: RMSNorm, SwiGLU, RoPE, 32 heads in
//      8 query groups, V = 128256): ms per iteration (median of the timed iterations after
//      warm-up), tokens/s = b*s / time, GFLOP/s with the model FLOPs of GptConfig::paper_flops,
//      and % of (1). paper_flops is Megatron-LM's num_floating_point_operations: the paper's
//      count (Narayanan et al. 2021) with the grouped-query and SwiGLU terms,
//        12 B s l h^2 ((1 + g/a + s/h) a dh/h + (ffn/h) (3/2 with SwiGLU)) + 6 B s h V,
//      which for the GPT (g = a, a dh = h, a 4h GeLU MLP) is the paper's
//        72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
//      The count ignores recomputation, so a recomputing run is charged the same FLOPs (the
//      executed FLOPs are printed beside it). Then forward-only iterations
//      (GptModel::forward_loss, dropout on as in training) give a forward/backward split.
//
//   3. The whole training step as ptdp-train runs it (train_iteration on a world of one: read
//      the batch from mock data, zero the gradients, forward and backward through the 1F1B
//      schedule with m = 1, gradient norm and clipping, the AdamW step), timed whole and piece
//      by piece; the rest of the step beside forward and backward is reported as a share of
//      forward+backward (the loop's own cost, which should stay within 10%).
//
//   4. A per-op breakdown of that step: a few more steps with a profiling decorator of the CPU
//      backend installed (kernels/profiling_backend.h), which times every backend call and
//      files it under its op, the GEMM's label (qkv, proj, fc1, fc2, logits, attention scores
//      and context) and forward or backward (kernels/op_scope.h). Printed as ms and share of
//      the step, with the optimizer, the gradient zeroing and the rest beside them.
//
//   5. The sgemm samples of (1), their spread, and the model's rates against the best of them.
//
//   6. (MoE models) The MoE layer alone: its expert GEMMs against the peak, the share of routing
//      and permutation (bench_moe_layer).
//
//   7. (MLA models; --mla: DeepSeek-V3's layer scaled to h 2048) Multi-latent attention alone
//      on b*s tokens against the peak, with its projections' GEMMs and its core attention
//      profiled, beside grouped-query attention of the same parameter count, then the whole
//      decoder layer with each: tokens/s at equal active parameters (bench_mla_layer).
//
//   8. (--optimizer muon, which also makes (3)'s step Muon's) Muon's Newton-Schulz over the
//      model's matrices: each matrix timed alone, then the per-rank share at d = 1 and at d = 4
//      with the distributed optimizer (the matrices spread by cost as muon_assign spreads them),
//      and the optimizer's share of the step at both (bench_muon).
//
// Each iteration of (2) starts from zeroed gradients (untimed), as after an optimizer step,
// uses a new Step::iteration (new dropout masks) and random token ids. GFLOP is 1e9 FLOPs.
// Run with --help for the flags.

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "bench/bench_common.h"
#include "bench/sgemm_peak.h"
#include "core/comm/runtime.h"
#include "core/data/gpt_dataset.h"
#include "core/layers/attention.h"
#include "core/layers/layer_support.h"
#include "core/layers/mla_attention.h"
#include "core/layers/transformer_layer.h"
#include "core/layers/moe/moe_layer.h"
#include "core/model/gpt.h"
#include "core/model/gpt_config.h"
#include "core/optim/muon.h"
#include "core/model/model_presets.h"
#include "core/parallel/groups.h"
#include "core/tensor/tensor.h"
#include "core/train/trainer.h"
#include "kernels/op_scope.h"
#include "kernels/profiling_backend.h"

namespace {

using ptdp::bench::Clock;
using ptdp::bench::cpu_seconds;
using ptdp::bench::grouped;
using ptdp::bench::json_escape;
using ptdp::bench::json_number;
using ptdp::bench::machine_busy_seconds;
using ptdp::bench::max_rss_bytes;
using ptdp::bench::seconds_since;
using ptdp::bench::splitmix64;
using ptdp::bench::trim;

// ---- options ---------------------------------------------------------------------------------

/// The preset whose layer shape --moe runs (h 2048, 64 experts, top-8, expert ffn 1024).
constexpr const char* kMoePreset = "olmoe-1b-7b";
/// DeepSeek-V3's decoder layer (deepseek-ai/DeepSeek-V3 config.json: h 7168, 128 heads,
/// q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim
/// 128, 256 routed experts of moe_intermediate_size 2048, top-8 of sigmoid scores with the
/// expert bias in 8 groups of which 4 are kept (the group score the sum of its top 2),
/// routed_scaling_factor 2.5, one shared expert, RMSNorm 1e-6, no linear biases, an untied head)
/// scaled to fit one CPU node: h 2048 and 16 heads of V3's own shape (the ranks and head dims
/// unchanged, so the attention's GEMM shapes per head are V3's), 64 experts of width 512 (the
/// expert width scaled with h, k = 8 kept), the sequence-level aux loss of V3's 1e-4.
ptdp::GptConfig deepseek_v3_layer() {
  ptdp::GptConfig g;
  g.num_layers = 1;
  g.hidden_size = 2048;
  g.num_attention_heads = 16;
  g.multi_latent_attention = true;
  g.q_lora_rank = 1536;
  g.kv_lora_rank = 512;
  g.qk_head_dim = 128;
  g.qk_pos_emb_head_dim = 64;
  g.v_head_dim = 128;
  g.qk_layernorm = true;  // q_a_layernorm and kv_a_layernorm, the latents' RMSNorms
  g.normalization = ptdp::Normalization::RMSNorm;
  g.layernorm_epsilon = 1e-6f;
  g.swiglu = true;
  g.position_embedding = ptdp::PositionEmbedding::Rope;
  g.add_bias_linear = false;
  g.tie_embeddings = false;
  g.hidden_dropout = 0.0f;
  g.attention_dropout = 0.0f;
  g.vocab_size = 4096;
  g.seq_length = 1024;
  g.max_position_embeddings = 4096;
  g.ffn_hidden_size = 5120;  // V3's dense 18432 scaled with h (its first 3 layers; unused at l = 1)
  g.moe.num_experts = 64;
  g.moe.router_topk = 8;
  g.moe.ffn_hidden_size = 512;
  g.moe.shared_expert_intermediate_size = 512;
  g.moe.score_function = ptdp::MoeScoreFunction::Sigmoid;
  g.moe.enable_expert_bias = true;
  g.moe.num_groups = 8;
  g.moe.group_topk = 4;
  g.moe.group_score_topk = 2;
  g.moe.topk_scaling_factor = 2.5f;
  g.moe.load_balancing = ptdp::MoeLoadBalancing::SeqAuxLoss;
  g.moe.aux_loss_coeff = 1e-4f;
  return g;
}

/// The label the MoE layer's experts give their backend calls (core/layers/moe/experts.cpp).
constexpr const char* kExpertsLabel = "experts";

struct Options {
  bool quick = false;
  std::optional<int> layers, hidden, heads, vocab, seq, micro_batch, iters, warmup;
  std::string preset;                // --model-preset: a named model's shape and architecture
  std::optional<int> ffn, groups;    // --ffn-hidden-size, --num-query-groups
  bool moe = false;                  // --moe: the MoE-shaped run (olmoe-1b-7b's layer, 1 layer, s 256, b 1)
  bool moe_layer = true;             // section 6 for MoE models; --no-moe-layer skips it
  bool moe_layer_only = false;       // --moe-layer-only: sections 1 and 6 alone
  std::optional<int> moe_layer_tokens;  // --moe-layer-tokens: section 6's tokens (--moe: 4096, else b*s)
  std::optional<int> experts, topk, moe_ffn;  // --num-experts, --moe-router-topk, --moe-ffn-hidden-size
  bool mla = false;                  // --mla: the DeepSeek-V3-shaped run (deepseek_v3_layer(), 1 layer, s 1024, b 1)
  bool mla_layer = true;             // section 7 for MLA models; --no-mla-layer skips it
  bool mla_layer_only = false;       // --mla-layer-only: sections 1 and 7 alone
  bool swiglu = false, rmsnorm = false, rope = false, no_bias = false, untie = false;
  ptdp::Recompute recompute = ptdp::Recompute::None;
  bool dropout = true;
  int threads = 0;  // 0: leave OpenMP's default
  std::optional<int> profile_steps;  // --profile-steps: steps of the per-op breakdown (0: none)
  std::string json_path;
  bool cuda = false;         // --device cuda: the model on GPU 0
  double peak_tflops = 0.0;  // --peak-tflops: the ceiling on the GPU (default: H200 dense, 67 fp32 / 989 16-bit)
  ptdp::DType precision = ptdp::DType::F32;              // --precision
  ptdp::AttentionImpl attention = ptdp::AttentionImpl::Auto;  // --attention
  bool muon = false;  // --optimizer muon: section 3's step with Muon, and section 8
};

/// The preset names, comma-separated, broken into lines of at most `width` characters.
std::string wrapped_preset_names(std::size_t width) {
  const std::string names = ptdp::model_preset_names();
  std::string out, line;
  std::size_t at = 0;
  while (at < names.size()) {
    std::size_t end = names.find(", ", at);
    end = end == std::string::npos ? names.size() : end + 2;
    const std::string word = names.substr(at, end - at);
    if (!line.empty() && line.size() + word.size() > width) {
      out += trim(line) + "\n";
      line.clear();
    }
    line += word;
    at = end;
  }
  return out + line;
}

void print_help(const char* argv0) {
  const std::string preset_text =
      "a named model's shape, architecture, vocabulary and dropout, then\n"
      "overridden by the flags below; its sequence length is not used\n"
      "(s is --seq). NAME is one of:\n" + wrapped_preset_names(66);
  ptdp::bench::print_help(
      argv0,
      "Times GptModel::forward_backward of one microbatch per iteration on one rank (CPU\n"
      "engine) and reports ms/iteration, tokens/s, model GFLOP/s and the ratio to OpenBLAS's\n"
      "square sgemm peak measured in the same run; then the whole training step. Default:\n"
      "GPT-2 small; --model-preset NAME for a named model (Llama, Qwen2.5, ...), which the\n"
      "shape and architecture flags then override. Model FLOPs are GptConfig::paper_flops,\n"
      "Megatron's count 12*B*s*l*h^2*((1 + g/a + s/h)*a*dh/h + (ffn/h)*(3/2 with SwiGLU))\n"
      "+ 6*B*s*h*V, for the GPT the paper's 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)); without\n"
      "recomputation.\n"
      "\n"
      "Options (defaults: full run / --quick; with --model-preset the preset's shape, and\n"
      "--quick only shortens the timing):\n",
      {{"--model-preset NAME", preset_text.c_str()},
       {"--layers N", "transformer layers (12 / 4)"},
       {"--hidden N", "hidden size h (768 / 256)"},
       {"--heads N", "attention heads a (12 / 4)"},
       {"--num-query-groups N", "key/value heads g of grouped-query attention (a: multi-head)"},
       {"--ffn-hidden-size N", "MLP width (4h; with --swiglu int(8h/3/64)*64)"},
       {"--moe", "the MoE-shaped run: --model-preset olmoe-1b-7b (h 2048, 16 heads, 64 experts,\n"
                 "top-8, expert ffn 1024 SwiGLU) with --layers 1 --seq 256 --micro-batch 1\n"
                 "--vocab 4096 --iters 5 --warmup 1 --profile-steps 2 (explicit flags win),\n"
                 "and section 6: the MoE layer alone, its expert GEMMs against the peak and\n"
                 "the share of routing, permutation and exchange"},
       {"--no-moe-layer", "skip section 6 (the MoE layer alone) of an MoE model"},
       {"--moe-layer-only", "only the sgemm peak (section 1) and the MoE layer alone (section 6), in\n"
                            "well under a minute"},
       {"--moe-layer-tokens N", "the tokens section 6 routes through the MoE layer (--moe: 4096, OLMoE's\n"
                                "training length, 512 per expert; otherwise b*s)"},
       {"--mla", "the DeepSeek-V3-shaped run: V3's layer scaled to h 2048 (16 heads of V3's\n"
                 "shape: multi-latent attention with q_lora_rank 1536, kv_lora_rank 512, qk\n"
                 "128 + 64 RoPE, v 128; 64 experts, top-8 of sigmoid scores in 8 groups (top\n"
                 "4), expert ffn 512, one shared expert, the expert bias) with --layers 1\n"
                 "--seq 1024 --micro-batch 1 --vocab 4096 --iters 5 --warmup 1\n"
                 "--profile-steps 2 --no-moe-layer (explicit flags win), and section 7: the\n"
                 "MLA attention alone against the peak, beside grouped-query attention of\n"
                 "the same parameter count, and the whole layer's tokens/s with each"},
       {"--no-mla-layer", "skip section 7 (MLA against GQA) of an MLA model"},
       {"--mla-layer-only", "only the sgemm peak (section 1) and section 7"},
       {"--num-experts N", "routed experts E of every MoE layer (Megatron's flag; the preset's)"},
       {"--moe-router-topk N", "experts k per token (the preset's)"},
       {"--moe-ffn-hidden-size N", "each expert's MLP width (the preset's)"},
       {"--swiglu", "SwiGLU MLP instead of GeLU (Megatron's --swiglu)"},
       {"--rmsnorm", "RMSNorm instead of LayerNorm (Megatron's --normalization RMSNorm)"},
       {"--rope", "rotary positions instead of a learned table (--position-embedding-type rope)"},
       {"--no-bias", "no linear layer has a bias (Megatron's --disable-bias-linear)"},
       {"--untie-embeddings", "a separate LM head (--untie-embeddings-and-output-weights)"},
       {"--vocab N", "vocabulary size V, padded to a multiple of 128 (50257 / 8192)"},
       {"--seq N", "sequence length s (64 / 64)"},
       {"--micro-batch N", "microbatch size b (4 / 4)"},
       {"--iters N", "timed iterations (20 / 10); as many forward-only ones follow"},
       {"--warmup N", "untimed warm-up iterations first (2 / 2; forward-only: 1)"},
       {"--recompute MODE", "none | full | selective (Megatron's --recompute-granularity; none)"},
       {"--no-dropout", "hidden and attention dropout 0 (default 0.1, Megatron's; a preset's own)"},
       {"--quick", "a much smaller model and shorter timing (whole run < 20 s)"},
       {"--threads N", "omp_set_num_threads(N) and openblas_set_num_threads(N) first"},
       {"--profile-steps N", "training steps timed op by op for the breakdown (5 / 3; 0: none)"},
       {"--device cpu|cuda", "where the model runs (cpu); cuda: GPU 0, no sgemm peak run"},
       {"--precision f32|bf16|f16", "weights and activations (f32); 16-bit keeps fp32 masters and gradients"},
       {"--attention auto|fused|unfused", "attention implementation (auto: fused where the device has it)"},
       {"--optimizer adam|muon", "section 3's optimizer (adam: AdamW); muon adds section 8, Muon's Newton-Schulz\n"
                                 "at d = 1 and d = 4"},
       {"--peak-tflops X", "with --device cuda: the ceiling for MFU (H200 dense: 67 fp32, 989 bf16/f16)"}});
}

bool parse_args(int argc, char** argv, Options& o, int& exit_code) {
  return ptdp::bench::read_flags(argc, argv, print_help, exit_code, [&](ptdp::bench::Args& args) {
    const std::string& arg = args.flag();
    if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--no-dropout") {
      o.dropout = false;
    } else if (arg == "--model-preset") {
      if (!args.require_value(o.preset, exit_code)) return false;
      if (!ptdp::find_model_preset(o.preset))
        return args.fail(exit_code, "--model-preset '" + o.preset + "' is not a preset; the presets are " +
                                        ptdp::model_preset_names());
    } else if (arg == "--moe") {
      o.moe = true;
    } else if (arg == "--no-moe-layer") {
      o.moe_layer = false;
    } else if (arg == "--moe-layer-only") {
      o.moe_layer_only = true;
    } else if (arg == "--mla") {
      o.mla = true;
    } else if (arg == "--no-mla-layer") {
      o.mla_layer = false;
    } else if (arg == "--mla-layer-only") {
      o.mla_layer_only = true;
    } else if (arg == "--moe-layer-tokens") {
      return args.int_value(o.moe_layer_tokens, 1, exit_code);
    } else if (arg == "--num-experts") {
      return args.int_value(o.experts, 1, exit_code);
    } else if (arg == "--moe-router-topk") {
      return args.int_value(o.topk, 1, exit_code);
    } else if (arg == "--moe-ffn-hidden-size") {
      return args.int_value(o.moe_ffn, 1, exit_code);
    } else if (arg == "--swiglu") {
      o.swiglu = true;
    } else if (arg == "--rmsnorm") {
      o.rmsnorm = true;
    } else if (arg == "--rope") {
      o.rope = true;
    } else if (arg == "--no-bias") {
      o.no_bias = true;
    } else if (arg == "--untie-embeddings") {
      o.untie = true;
    } else if (arg == "--num-query-groups") {
      return args.int_value(o.groups, 1, exit_code);
    } else if (arg == "--ffn-hidden-size") {
      return args.int_value(o.ffn, 1, exit_code);
    } else if (arg == "--layers") {
      return args.int_value(o.layers, 1, exit_code);
    } else if (arg == "--hidden") {
      return args.int_value(o.hidden, 1, exit_code);
    } else if (arg == "--heads") {
      return args.int_value(o.heads, 1, exit_code);
    } else if (arg == "--vocab") {
      return args.int_value(o.vocab, 2, exit_code);
    } else if (arg == "--seq") {
      return args.int_value(o.seq, 1, exit_code);
    } else if (arg == "--micro-batch") {
      return args.int_value(o.micro_batch, 1, exit_code);
    } else if (arg == "--iters") {
      return args.int_value(o.iters, 1, exit_code);
    } else if (arg == "--warmup") {
      return args.int_value(o.warmup, 0, exit_code);
    } else if (arg == "--threads") {
      return args.int_value(o.threads, 1, exit_code);
    } else if (arg == "--profile-steps") {
      return args.int_value(o.profile_steps, 0, exit_code);
    } else if (arg == "--json") {
      return args.require_value(o.json_path, exit_code);
    } else if (arg == "--device") {
      std::string value;
      if (!args.require_value(value, exit_code)) return false;
      if (value != "cpu" && value != "cuda") return args.fail(exit_code, "--device must be cpu or cuda, got '" + value + "'");
      o.cuda = value == "cuda";
    } else if (arg == "--peak-tflops") {
      std::string value;
      if (!args.require_value(value, exit_code)) return false;
      char* end = nullptr;
      o.peak_tflops = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(o.peak_tflops > 0.0))
        return args.fail(exit_code, "--peak-tflops needs a number > 0, got '" + value + "'");
    } else if (arg == "--precision") {
      std::string value;
      if (!args.require_value(value, exit_code)) return false;
      if (value == "f32") o.precision = ptdp::DType::F32;
      else if (value == "bf16") o.precision = ptdp::DType::BF16;
      else if (value == "f16") o.precision = ptdp::DType::F16;
      else return args.fail(exit_code, "--precision must be f32, bf16 or f16, got '" + value + "'");
    } else if (arg == "--optimizer") {
      std::string value;
      if (!args.require_value(value, exit_code)) return false;
      if (value == "adam") o.muon = false;
      else if (value == "muon") o.muon = true;
      else return args.fail(exit_code, "--optimizer must be adam or muon, got '" + value + "'");
    } else if (arg == "--attention") {
      std::string value;
      if (!args.require_value(value, exit_code)) return false;
      if (value == "auto") o.attention = ptdp::AttentionImpl::Auto;
      else if (value == "fused") o.attention = ptdp::AttentionImpl::Fused;
      else if (value == "unfused") o.attention = ptdp::AttentionImpl::Unfused;
      else return args.fail(exit_code, "--attention must be auto, fused or unfused, got '" + value + "'");
    } else if (arg == "--recompute") {
      std::string value;
      if (!args.require_value(value, exit_code)) return false;
      if (value == "none") {
        o.recompute = ptdp::Recompute::None;
      } else if (value == "full") {
        o.recompute = ptdp::Recompute::Full;
      } else if (value == "selective") {
        o.recompute = ptdp::Recompute::Selective;
      } else {
        return args.fail(exit_code, "--recompute must be none, full or selective, got '" + value + "'");
      }
    } else {
      return args.unknown(exit_code);
    }
    return true;
  });
}

// ---- machine ---------------------------------------------------------------------------------

/// Other processes kept more than this many cores busy: the numbers are flagged as skewed.
constexpr double kContendedCores = 0.25;

/// Measures how many cores other processes kept busy between construction and stop().
class ContentionMeter {
 public:
  ContentionMeter() : t0_(Clock::now()), cpu0_(cpu_seconds()), machine0_(machine_busy_seconds()) {}
  /// Average cores other processes kept busy; < 0 where /proc/stat is unreadable.
  double stop() const {
    const double wall = seconds_since(t0_);
    const double machine1 = machine_busy_seconds();
    if (machine0_ < 0.0 || machine1 < 0.0 || wall <= 0.0) return -1.0;
    return std::max(0.0, (machine1 - machine0_) - (cpu_seconds() - cpu0_)) / wall;
  }

 private:
  Clock::time_point t0_;
  double cpu0_, machine0_;
};

// ---- timing ----------------------------------------------------------------------------------

struct Stats {
  std::vector<double> times_s;  // per timed call, in order
  double median_s = 0.0, best_s = 0.0, worst_s = 0.0;
  double other_cores = -1.0;  // cores other processes kept busy while timing; < 0: unknown

  void finish() {
    std::vector<double> t = times_s;
    std::sort(t.begin(), t.end());
    const std::size_t n = t.size();
    if (n == 0) return;
    median_s = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    best_s = t.front();
    worst_s = t.back();
  }
};

/// `warmup` untimed calls of op(i), then `iters` timed ones; `before(i)` runs untimed ahead of
/// every call (i counts all calls, warm-up included).
Stats time_calls(int warmup, int iters, const std::function<void(int)>& op,
                 const std::function<void(int)>& before = {}) {
  Stats st;
  int i = 0;
  for (int w = 0; w < warmup; ++w, ++i) {
    if (before) before(i);
    op(i);
  }
  ContentionMeter meter;
  for (int t = 0; t < iters; ++t, ++i) {
    if (before) before(i);
    const auto t0 = Clock::now();
    op(i);
    st.times_s.push_back(seconds_since(t0));
  }
  st.other_cores = meter.stop();
  st.finish();
  return st;
}

// ---- the per-op breakdown ------------------------------------------------------------------

/// The breakdown's rows, in print order: the GEMMs by their label (kernels/op_scope.h, set by
/// the layers), the other ops by what they compute.
const char* const kBreakdownRows[] = {
    "GEMM qkv", "GEMM proj", "GEMM fc1", "GEMM fc2", "GEMM experts (MoE)", "GEMM logits",
    "GEMM attention scores (QK^T)", "GEMM attention context (PV)", "GEMM (other)", "MoE router and routing",
    "MoE permutation (dispatch, combine)", "attention softmax + causal mask", "attention (fused kernel)",
    "LayerNorm", "RMSNorm", "GeLU (unfused calls)", "SwiGLU", "RoPE", "dropout", "bias-dropout-add (fused)",
    "bias add, bias grad", "residual add", "cross-entropy", "embedding", "copies, fills, casts",
    "optimizer update (AdamW / SGD)", "Newton-Schulz (Muon)", "momentum and update (Muon)",
    "gradient norm (sum of squares)"};

/// The row a backend call belongs to.
std::string breakdown_row(ptdp::BackendOp op, const std::string& label) {
  using ptdp::BackendOp;
  switch (op) {
    case BackendOp::GroupedGemm: return "GEMM experts (MoE)";
    case BackendOp::MoeRouterForward:
    case BackendOp::MoeRouterBackward:
    case BackendOp::MoeAuxScoresForward:
    case BackendOp::MoeAuxScoresBackward:
    case BackendOp::MoeRouterLse:
    case BackendOp::MoeRouterZLossBackward:
    case BackendOp::MoeRoute: return "MoE router and routing";
    case BackendOp::MoePermute:
    case BackendOp::MoeUnpermute:
    case BackendOp::MoeUnpermuteBackward: return "MoE permutation (dispatch, combine)";
    case BackendOp::Gemm:
      if (label == kExpertsLabel) return "GEMM experts (MoE)";
      if (label == "qkv" || label == "proj" || label == "fc1" || label == "fc2" || label == "logits")
        return "GEMM " + label;
      if (label == "attn_scores") return "GEMM attention scores (QK^T)";
      if (label == "attn_context") return "GEMM attention context (PV)";
      return "GEMM (other)";
    case BackendOp::SoftmaxForward:
    case BackendOp::SoftmaxForwardDocuments:
    case BackendOp::SoftmaxBackward: return "attention softmax + causal mask";
    case BackendOp::AttentionForward:
    case BackendOp::AttentionBackward:
    case BackendOp::AttentionBlockForward:
    case BackendOp::AttentionBlockBackward: return "attention (fused kernel)";
    case BackendOp::LayernormForward:
    case BackendOp::LayernormBackward: return "LayerNorm";
    case BackendOp::RmsnormForward:
    case BackendOp::RmsnormBackward: return "RMSNorm";
    case BackendOp::GeluForward:
    case BackendOp::GeluBackward: return "GeLU (unfused calls)";
    case BackendOp::SwigluForward:
    case BackendOp::SwigluBackward: return "SwiGLU";
    case BackendOp::RopeForward:
    case BackendOp::RopeBackward: return "RoPE";
    case BackendOp::DropoutForward:
    case BackendOp::DropoutBackward: return "dropout";
    case BackendOp::BiasDropoutAdd: return "bias-dropout-add (fused)";
    case BackendOp::BiasAdd:
    case BackendOp::BiasGrad: return "bias add, bias grad";
    case BackendOp::Add: return "residual add";
    case BackendOp::CeForwardLocal:
    case BackendOp::CeRescale:
    case BackendOp::CeLoss:
    case BackendOp::CeBackward: return "cross-entropy";
    case BackendOp::EmbeddingForward:
    case BackendOp::EmbeddingBackward: return "embedding";
    case BackendOp::AdamwStep:
    case BackendOp::SgdStep: return "optimizer update (AdamW / SGD)";
    case BackendOp::NewtonSchulz: return "Newton-Schulz (Muon)";
    case BackendOp::SumSquares: return "gradient norm (sum of squares)";
    default: return "copies, fills, casts";
  }
}

/// One row of the breakdown: mean seconds per step in the forward and in the backward (with any
/// recomputation), in the optimizer and elsewhere, and the GEMM FLOPs.
struct BreakdownRow {
  std::string name;
  double forward_s = 0.0, backward_s = 0.0, optimizer_s = 0.0, other_s = 0.0, flops = 0.0;
  int64_t calls = 0;
  double total_s() const { return forward_s + backward_s + optimizer_s + other_s; }
};

/// The pieces of one training step, in seconds (bench_step's order).
struct StepPieces {
  double data = 0.0, zero = 0.0, fb = 0.0, opt = 0.0, total = 0.0;
};

/// Installs a backend decorator for its lifetime (removed on every way out).
class DecoratorGuard {
 public:
  explicit DecoratorGuard(ptdp::Backend& decorator) { ptdp::set_cpu_backend_decorator(&decorator); }
  ~DecoratorGuard() { ptdp::set_cpu_backend_decorator(nullptr); }
  DecoratorGuard(const DecoratorGuard&) = delete;
  DecoratorGuard& operator=(const DecoratorGuard&) = delete;
};

// ---- the benchmark ---------------------------------------------------------------------------

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {
    const bool q = o_.quick;
    if (o_.moe) {
      // OLMoE-1B-7B's layer, few layers and a short sequence: a minute on 2 cores. The flags win.
      if (o_.preset.empty()) o_.preset = kMoePreset;
      o_.layers = o_.layers.value_or(1);
      o_.seq = o_.seq.value_or(256);
      o_.micro_batch = o_.micro_batch.value_or(1);
      o_.vocab = o_.vocab.value_or(4096);
      o_.iters = o_.iters.value_or(5);
      o_.warmup = o_.warmup.value_or(1);
      o_.profile_steps = o_.profile_steps.value_or(2);
      // Section 6 at a realistic token count: OLMoE's 4096-token sequences, 512 (token, expert)
      // pairs per expert; at the whole-model run's 256 tokens each expert gets 32 and its GEMMs
      // are bound by packing the weights.
      o_.moe_layer_tokens = o_.moe_layer_tokens.value_or(4096);
    }
    if (o_.mla) {
      // DeepSeek-V3's layer scaled to h 2048, one layer, V3's 4k sequence quartered: a minute on
      // 2 cores. The flags win; section 6 (the MoE layer alone) only when asked for.
      o_.layers = o_.layers.value_or(1);
      o_.seq = o_.seq.value_or(1024);
      o_.micro_batch = o_.micro_batch.value_or(1);
      o_.vocab = o_.vocab.value_or(4096);
      o_.iters = o_.iters.value_or(5);
      o_.warmup = o_.warmup.value_or(1);
      o_.profile_steps = o_.profile_steps.value_or(2);
      if (!o_.moe_layer_tokens && !o_.moe_layer_only) o_.moe_layer = false;
    }
    if (o_.mla && o_.preset.empty()) {
      cfg_ = deepseek_v3_layer();
      cfg_.num_layers = *o_.layers;
      cfg_.hidden_size = o_.hidden.value_or(cfg_.hidden_size);
      cfg_.num_attention_heads = o_.heads.value_or(cfg_.num_attention_heads);
      cfg_.vocab_size = *o_.vocab;
      cfg_.max_position_embeddings = std::max(cfg_.max_position_embeddings, *o_.seq);
    } else if (!o_.preset.empty()) {
      // The preset's shape, architecture, vocabulary and dropout; the flags override them. Its
      // training length (8192 for Llama 3) is not used: s is --seq, as for the default model.
      const std::optional<ptdp::ModelPreset> preset = ptdp::find_model_preset(o_.preset);
      if (!preset) ptdp::throw_error(ptdp::ErrorCode::InvalidArgument, "no model preset named '" + o_.preset + "'");
      preset_ = *preset;
      cfg_ = preset->config;
      cfg_.num_layers = o_.layers.value_or(cfg_.num_layers);
      cfg_.hidden_size = o_.hidden.value_or(cfg_.hidden_size);
      // A multi-head preset stays multi-head with --heads (else its query groups would not divide).
      if (o_.heads && cfg_.query_groups() == cfg_.num_attention_heads) cfg_.num_query_groups = *o_.heads;
      cfg_.num_attention_heads = o_.heads.value_or(cfg_.num_attention_heads);
      cfg_.vocab_size = o_.vocab.value_or(cfg_.vocab_size);
    } else {
      cfg_.num_layers = o_.layers.value_or(q ? 4 : 12);
      cfg_.hidden_size = o_.hidden.value_or(q ? 256 : 768);
      cfg_.num_attention_heads = o_.heads.value_or(q ? 4 : 12);
      cfg_.vocab_size = o_.vocab.value_or(q ? 8192 : 50257);
      cfg_.hidden_dropout = 0.1f;
      cfg_.attention_dropout = 0.1f;
    }
    cfg_.seq_length = o_.seq.value_or(64);
    if (!o_.dropout) {
      cfg_.hidden_dropout = 0.0f;
      cfg_.attention_dropout = 0.0f;
    }
    if (o_.groups) cfg_.num_query_groups = *o_.groups;
    if (o_.ffn) cfg_.ffn_hidden_size = *o_.ffn;
    if (o_.swiglu) cfg_.swiglu = true;
    if (o_.rmsnorm) cfg_.normalization = ptdp::Normalization::RMSNorm;
    if (o_.rope) cfg_.position_embedding = ptdp::PositionEmbedding::Rope;
    if (o_.no_bias) cfg_.add_bias_linear = false;
    if (o_.untie) cfg_.tie_embeddings = false;
    if (o_.experts) cfg_.moe.num_experts = *o_.experts;
    if (o_.topk) cfg_.moe.router_topk = *o_.topk;
    if (o_.moe_ffn) cfg_.moe.ffn_hidden_size = *o_.moe_ffn;
    // A preset's --moe-layer-freq pattern has one entry per layer of its depth: --layers keeps
    // the first layers' entries (added layers are MoE).
    if (o_.layers && !cfg_.moe.layer_pattern.empty())
      cfg_.moe.layer_pattern.resize(static_cast<std::size_t>(*o_.layers), 1);
    cfg_.recompute = o_.recompute;
    cfg_.precision = o_.precision;
    cfg_.attention = o_.attention;
    b_ = o_.micro_batch.value_or(4);
    iters_ = o_.iters.value_or(q ? 10 : 20);
    warmup_ = o_.warmup.value_or(2);
    profile_steps_ = o_.profile_steps.value_or(q ? 3 : 5);
  }

  int run() {
    print_machine();
    cfg_.validate(1);  // before the peak, so a bad shape fails at once
    if (o_.cuda) {
      // The GPU's ceiling is not measured here (bench_gpu measures cuBLASLt): the datasheet's.
      const bool half = cfg_.precision != ptdp::DType::F32;
      peak_gflops_ = (o_.peak_tflops > 0.0 ? o_.peak_tflops : half ? 989.0 : 67.0) * 1e3;
      std::printf("1. peak: %.1f TFLOP/s (%s), not measured; the model runs on cuda:0 in %s\n\n",
                  peak_gflops_ * 1e-3,
                  o_.peak_tflops > 0.0 ? "--peak-tflops"
                  : half               ? "H200 bf16/f16 dense, datasheet"
                                       : "H200 fp32 dense, datasheet",
                  ptdp::dtype_name(cfg_.precision));
    } else {
      bench_peak();
    }
    if (o_.mla_layer_only) {
      if (o_.cuda || !cfg_.multi_latent_attention || !o_.mla_layer) {
        std::fprintf(stderr, "bench_gpt: --mla-layer-only needs an MLA model (--mla or an MLA preset) on "
                             "--device cpu, without --no-mla-layer\n");
        return 2;
      }
      bench_mla_layer();
      print_footer();
      if (!o_.json_path.empty() && !write_json()) return 1;
      return ok_ ? 0 : 1;
    }
    if (o_.moe_layer_only) {
      if (o_.cuda || !cfg_.moe.enabled() || !o_.moe_layer) {
        std::fprintf(stderr, "bench_gpt: --moe-layer-only needs an MoE model (--moe, a MoE preset or "
                             "--num-experts) on --device cpu, without --no-moe-layer\n");
        return 2;
      }
      bench_moe_layer();
      print_footer();
      if (!o_.json_path.empty() && !write_json()) return 1;
      return ok_ ? 0 : 1;
    }
    bench_model();
    if (!o_.cuda) {
      bench_step();
      sample_peak("at the end");
      print_peak_summary();
      if (cfg_.moe.enabled() && o_.moe_layer) bench_moe_layer();
      if (cfg_.multi_latent_attention && o_.mla_layer) bench_mla_layer();
      if (o_.muon) bench_muon();
    }
    print_footer();
    if (!o_.json_path.empty() && !write_json()) return 1;
    return ok_ ? 0 : 1;
  }

 private:
  const char* optimizer_name() const { return o_.muon ? "Muon with AdamW for the rest" : "AdamW"; }

  // -- 8. Muon's Newton-Schulz at d = 1 and d = 4 ------------------------------------------------

  /// Every matrix shape of the model (MuonConfig's defaults: q, k, v and gate/up apart, 5
  /// quintic steps in fp32) orthogonalised on synthetic values, timed alone; then the matrices spread over d data-parallel ranks as the distributed
  /// optimizer spreads them (muon_assign), and each rank's share timed as the sum of its
  /// matrices' times: the per-rank work at d = 4 against d = 1.
  void bench_muon() {
    const ptdp::MuonConfig mc;
    std::printf("8. Muon's Newton-Schulz over the model's matrices (q, k, v and gate/up apart, %d quintic steps, fp32),\n"
                "   once per optimizer step; at d = 4 with the distributed optimizer each data-parallel rank\n"
                "   orthogonalises its share (matrices spread by cost), timed here rank by rank\n",
                mc.ns_steps);
    std::fflush(stdout);
    auto rt = ptdp::Runtime::create_self({});
    ptdp::ProcessGroups groups(rt, ptdp::ParallelConfig{0, 1, 1, 1});
    ptdp::GptPipeline model(cfg_, groups);
    std::vector<ptdp::ParamTable*> tables;
    for (auto& c : model.chunks()) tables.push_back(&c->params());
    std::vector<ptdp::MuonMatrix> ms = ptdp::muon_matrices(tables, mc);
    const std::vector<std::array<float, 3>> coef = ptdp::muon_coefficients(mc.coefficients);
    ptdp::NewtonSchulzDesc desc;
    desc.steps = mc.ns_steps;
    desc.num_sets = static_cast<int>(coef.size());
    for (std::size_t j = 0; j < coef.size(); ++j)
      for (int c = 0; c < 3; ++c) desc.coefficients[j][c] = coef[j][static_cast<std::size_t>(c)];
    ptdp::Backend& be = ptdp::cpu_backend();
    // Matrices of one shape cost the same: each shape is timed once (median of 3 after a
    // warm-up; of 1 after it for shapes above 100 GFLOP).
    std::map<std::pair<int64_t, int64_t>, double> by_shape;
    std::vector<float> x;
    for (const ptdp::MuonMatrix& m : ms) {
      const std::pair<int64_t, int64_t> shape{m.rows, m.cols};
      if (by_shape.count(shape)) continue;
      desc.rows = m.rows;
      desc.cols = m.cols;
      x.resize(static_cast<std::size_t>(m.rows * m.cols));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      const Stats st = time_calls(1, m.flops > 1e11 ? 1 : 3, [&](int) { be.newton_schulz(x.data(), desc); });
      by_shape[shape] = st.median_s;
      std::printf("   %6" PRId64 " x %-6" PRId64 " %8.2f ms %8.1f GFLOP/s\n", m.rows, m.cols, st.median_s * 1e3,
                  m.flops / st.median_s * 1e-9);
    }
    std::vector<double> seconds(ms.size());
    for (std::size_t k = 0; k < ms.size(); ++k) seconds[k] = by_shape[{ms[k].rows, ms[k].cols}];
    double total_flops = 0, total_s = 0;
    for (std::size_t k = 0; k < ms.size(); ++k) {
      total_flops += ms[k].flops;
      total_s += seconds[k];
    }
    std::printf("   %zu matrices, %.2f GFLOP per step\n", ms.size(), total_flops * 1e-9);
    std::printf("   %-4s %12s %12s %12s %14s %10s\n", "d", "GFLOP/rank", "ms/rank max", "ms/rank min", "GFLOP/s", "vs d = 1");
    double ms_d1 = 0;
    for (const int d : {1, 4}) {
      std::vector<ptdp::MuonMatrix> a = ms;
      std::vector<double> slot_flops(static_cast<std::size_t>(d), 0.0), slot_s(static_cast<std::size_t>(d), 0.0);
      for (const bool expert : {false, true}) ptdp::muon_assign(a, expert, 1, d, true);
      for (std::size_t k = 0; k < a.size(); ++k) {
        slot_flops[static_cast<std::size_t>(a[k].owner_data)] += a[k].flops;
        slot_s[static_cast<std::size_t>(a[k].owner_data)] += seconds[k];
      }
      const double worst = *std::max_element(slot_s.begin(), slot_s.end());
      const double best = *std::min_element(slot_s.begin(), slot_s.end());
      const double worst_flops = *std::max_element(slot_flops.begin(), slot_flops.end());
      if (d == 1) ms_d1 = worst;
      std::printf("   %-4d %12.2f %12.2f %12.2f %14.1f %9.2fx\n", d, worst_flops * 1e-9, worst * 1e3, best * 1e3,
                  total_flops / total_s * 1e-9, ms_d1 / worst);
      muon_d_.push_back({d, worst_flops, worst, best});
    }
    if (step_opt_.median_s > 0) {
      // Section 3's optimizer step at d = 1, split by section 4's profile where it ran: the
      // Newton-Schulz calls against the rest (norm, momentum, AdamW of the others, the update,
      // the exchanges' copies), which the distributed optimizer shards 1/d.
      double ns_s = total_s, rest = std::max(0.0, step_opt_.median_s - total_s);
      const auto ns_row = std::find_if(rows_.begin(), rows_.end(),
                                       [](const BreakdownRow& r) { return r.name == "Newton-Schulz (Muon)"; });
      if (profile_steps_ > 0 && ns_row != rows_.end() && ns_row->optimizer_s > 0) {
        ns_s = ns_row->optimizer_s;
        rest = std::max(0.0, prof_.opt - ns_s);
      }
      const double opt_s = ns_s + rest;
      std::printf("   the optimizer step at d = 1: %.1f ms = Newton-Schulz %.1f ms + the rest %.1f ms (%s), %.1f%% of\n"
                  "   the step (forward+backward %.1f ms)\n",
                  opt_s * 1e3, ns_s * 1e3, rest * 1e3, profile_steps_ > 0 ? "section 4's profile" : "section 3 less the above",
                  100.0 * opt_s / (step_fb_.median_s + opt_s), step_fb_.median_s * 1e3);
      // The most loaded rank's share of the step's Newton-Schulz time (its share of the matrices'
      // times above applied to the time the step itself measured).
      const MuonD& d4 = muon_d_.back();
      const double d4_s = d4.worst_s * ns_s / total_s + rest / 4.0;
      std::printf("   at d = 4 per rank: Newton-Schulz %.1f ms + the rest / 4 %.1f ms = %.1f ms, %.1f%% of the step;\n"
                  "   plus the all-gather of the momentum and the reduce-scatter of the results (%.0f MB each\n"
                  "   over the data-parallel group), not timed on one process\n",
                  d4.worst_s * ns_s / total_s * 1e3, rest / 4.0 * 1e3, d4_s * 1e3,
                  100.0 * d4_s / (step_fb_.median_s + d4_s), static_cast<double>(muon_elements(ms)) * 4.0 * 1e-6);
    }
    std::printf("\n");
  }
  static int64_t muon_elements(const std::vector<ptdp::MuonMatrix>& ms) {
    int64_t n = 0;
    for (const auto& m : ms) n += m.rows * m.cols;
    return n;
  }
  struct MuonD {
    int d;
    double worst_flops, worst_s, best_s;
  };
  std::vector<MuonD> muon_d_;

  Options o_;
  std::optional<ptdp::ModelPreset> preset_;  // --model-preset
  ptdp::GptConfig cfg_;
  int b_ = 4, iters_ = 20, warmup_ = 2, profile_steps_ = 5;

  Clock::time_point start_ = Clock::now();
  double start_cpu_ = cpu_seconds();
  double start_machine_busy_ = machine_busy_seconds();
  std::string blas_config_, blas_core_, blas_parallel_;
  int blas_threads_ = 0;
  double load1_ = -1.0;

  std::optional<ptdp::bench::SgemmPeak> peak_;  // the CPU's sampled sgemm peak
  double peak_gflops_ = 0.0;  // the best sample so far (CPU) or the datasheet's (CUDA)
  double setup_s_ = 0.0;
  Stats fb_, fwd_;
  // The peak samples taken right before and right after each timed phase (indices into
  // SgemmPeak::samples()): the ceiling "around" the phase in section 5.
  struct Bracket {
    std::size_t before = 0, after = 0;
  };
  Bracket fb_around_, fwd_around_, step_around_;
  // The whole training step and its pieces (bench_step).
  Stats step_, step_data_, step_zero_, step_fb_, step_opt_;
  double loss_first_ = 0.0, loss_last_ = 0.0, fwd_loss_ = 0.0;
  double wall_s_ = 0.0, cores_busy_ = 0.0, other_cores_busy_ = -1.0, max_rss_ = 0.0;
  // The per-op breakdown (bench_breakdown): mean seconds per profiled step.
  StepPieces prof_;
  std::vector<ptdp::ProfilingBackend::Entry> prof_entries_;
  std::vector<BreakdownRow> rows_;
  double prof_kernels_fb_s_ = 0.0, prof_kernels_opt_s_ = 0.0, prof_kernels_other_s_ = 0.0;
  bool any_contended_ = false;
  bool above_peak_ = false;  // a rate was above the peak: flagged as an anomaly
  bool ok_ = true;

  int64_t tokens() const { return static_cast<int64_t>(b_) * cfg_.seq_length; }
  /// The model FLOPs of one iteration: GptConfig::paper_flops, the one place ptdp counts them.
  double model_flops() const { return cfg_.paper_flops(b_); }
  /// The logits layer's term of the model FLOPs, 6 B s h V (for the GPT the paper's
  /// 72 B s l h^2 * V/(12 l h)).
  double logit_flops() const {
    return 6.0 * static_cast<double>(tokens()) * cfg_.hidden_size * cfg_.vocab_size;
  }
  /// FLOPs the recomputation adds on top of the model FLOPs: full re-runs every layer's
  /// forward (paper_flops' own executed count, 16 instead of 12 for the layer terms);
  /// selective re-runs the Q K^T GEMM (2 B s^2 a dh per layer).
  double recompute_flops() const {
    const double t = static_cast<double>(tokens()), s = cfg_.seq_length, l = cfg_.num_layers,
                 width = static_cast<double>(cfg_.attention_width());
    switch (cfg_.recompute) {
      case ptdp::Recompute::Full: return cfg_.paper_flops(b_, true) - cfg_.paper_flops(b_);
      case ptdp::Recompute::Selective: return l * 2.0 * t * s * width;
      case ptdp::Recompute::None: break;
    }
    return 0.0;
  }
  /// Whether the model has the paper's GPT shape (multi-head, a dh = h, a 4h GeLU MLP), for
  /// which paper_flops is the paper's 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
  bool paper_shape() const {
    return !cfg_.moe.enabled() && cfg_.query_groups() == cfg_.num_attention_heads &&
           cfg_.attention_width() == cfg_.hidden_size && !cfg_.swiglu && cfg_.ffn() == 4 * cfg_.hidden_size;
  }
  /// The formula paper_flops evaluates for this model, as printed and written to the JSON.
  std::string flops_formula() const {
    if (paper_shape()) return "72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h))";
    if (cfg_.moe.enabled()) {
      // Megatron's MoE terms: an MoE layer's MLP counts the k experts a token visits and the
      // shared experts in place of ffn.
      const std::string glu = cfg_.swiglu ? "(3/2)*" : "";
      return "12*B*s*h^2*(l*(1 + g/a + s/h)*a*dh/h + l_dense*" + glu + "ffn/h + l_moe*" + glu +
             "(k*moe_ffn + shared)/h) + 6*B*s*h*V";
    }
    return std::string("12*B*s*l*h^2*((1 + g/a + s/h)*a*dh/h + ") + (cfg_.swiglu ? "(3/2)*ffn/h" : "ffn/h") +
           ") + 6*B*s*h*V";
  }
  /// The MoE numbers of the FLOPs formula (",\n l_moe = 1, k = 8, ..." on a line of their own), or "".
  std::string moe_terms() const {
    if (!cfg_.moe.enabled()) return "";
    return ",\n     l_moe = " + std::to_string(cfg_.num_moe_layers()) +
           ", k = " + std::to_string(cfg_.moe.router_topk) +
           ", moe_ffn = " + std::to_string(cfg_.moe_ffn()) +
           ", shared = " + std::to_string(cfg_.moe.shared_expert_intermediate_size);
  }

  /// The model's architecture in words: norm, MLP, positions, attention, biases.
  std::string architecture() const {
    std::string s = ptdp::normalization_name(cfg_.normalization);
    s += cfg_.swiglu ? ", SwiGLU MLP" : ", GeLU MLP";
    if (cfg_.rope()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ", RoPE (base %g", static_cast<double>(cfg_.rotary_base));
      s += buf;
      if (cfg_.rotary_percent < 1.0f) s += ", " + std::to_string(cfg_.rotary_dim()) + " of each head's dims";
      if (cfg_.rope_scaling.enabled) {
        std::snprintf(buf, sizeof buf, ", Llama 3.1 scaling x%g", static_cast<double>(cfg_.rope_scaling.factor));
        s += buf;
      }
      s += ")";
    } else {
      s += cfg_.learned_positions() ? ", learned positions" : ", no positions";
    }
    if (cfg_.multi_latent_attention) {
      s += ", multi-latent attention (q_lora_rank " + std::to_string(cfg_.q_lora_rank) + ", kv_lora_rank " +
           std::to_string(cfg_.kv_lora_rank) + ")";
    } else if (cfg_.query_groups() == cfg_.num_attention_heads) {
      s += ", multi-head attention";
    } else {
      s += ", grouped-query attention (" + std::to_string(cfg_.num_attention_heads) + " heads in " +
           std::to_string(cfg_.query_groups()) + " groups of " + std::to_string(cfg_.queries_per_group()) + ")";
    }
    if (cfg_.qk_layernorm) s += cfg_.multi_latent_attention ? ", latent norms" : ", q/k norms";
    s += cfg_.add_bias_linear ? ", biases" : cfg_.add_qkv_bias ? ", a qkv bias only" : ", no biases";
    return s;
  }

  /// The shape and architecture flags given on top of --model-preset, as typed.
  std::string overrides() const {
    std::string s;
    const auto add = [&s](const std::string& flag) { s += (s.empty() ? "" : " ") + flag; };
    const auto number = [&](const char* flag, const std::optional<int>& v) {
      if (v) add(std::string(flag) + " " + std::to_string(*v));
    };
    number("--layers", o_.layers);
    number("--hidden", o_.hidden);
    number("--heads", o_.heads);
    number("--num-query-groups", o_.groups);
    number("--ffn-hidden-size", o_.ffn);
    number("--num-experts", o_.experts);
    number("--moe-router-topk", o_.topk);
    number("--moe-ffn-hidden-size", o_.moe_ffn);
    number("--vocab", o_.vocab);
    if (o_.swiglu) add("--swiglu");
    if (o_.rmsnorm) add("--rmsnorm");
    if (o_.rope) add("--rope");
    if (o_.no_bias) add("--no-bias");
    if (o_.untie) add("--untie-embeddings");
    if (!o_.dropout) add("--no-dropout");
    return s;
  }

  const char* contended_mark(const Stats& st) {
    if (st.other_cores > kContendedCores) {
      any_contended_ = true;
      return "  *";
    }
    return "";
  }

  // -- header ----------------------------------------------------------------------------------

  void print_machine() {
    if (o_.threads > 0) {
      omp_set_num_threads(o_.threads);
#ifdef OPENBLAS_VERSION
      openblas_set_num_threads(o_.threads);
#endif
    }
    std::printf("ptdp GPT benchmark (%s mode, one rank, CPU engine)\n", o_.quick ? "quick" : "full");
    std::printf("  OpenMP threads  : %d (hardware threads: %u)\n", omp_get_max_threads(),
                std::thread::hardware_concurrency());
#ifdef OPENBLAS_VERSION
    blas_config_ = trim(openblas_get_config());
    blas_core_ = trim(openblas_get_corename());
    blas_threads_ = openblas_get_num_threads();
    const int par = openblas_get_parallel();
    blas_parallel_ = par == 0 ? "sequential" : par == 1 ? "pthreads" : "OpenMP";
    std::printf("  OpenBLAS        : %s\n", blas_config_.c_str());
    std::printf("  OpenBLAS core   : %s, %d threads, %s\n", blas_core_.c_str(), blas_threads_,
                blas_parallel_.c_str());
#else
    std::printf("  BLAS            : not OpenBLAS (no config available)\n");
#endif
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      double l5 = 0.0;
      if (std::fscanf(f, "%lf %lf", &load1_, &l5) == 2)
        std::printf("  load average    : %.2f (1 min), %.2f (5 min)\n", load1_, l5);
      std::fclose(f);
    }
    std::printf("\n");
  }

  // -- 1. OpenBLAS peak ------------------------------------------------------------------------

  void bench_peak() {
    peak_.emplace();
    std::printf("1. OpenBLAS peak: cblas_sgemm, row-major C = A*B, square n = %d, sampled before, between "
                "and\n   after the timed phases (each sample the best of %d calls; the peak is the best "
                "sample, see 5.)\n",
                peak_->n(), peak_->calls_per_sample());
    sample_peak("before the model");
    std::printf("\n");
  }

  /// Takes a sample of the sgemm peak (CPU runs) and prints it on one line.
  void sample_peak(const char* where) {
    if (peak_) peak_gflops_ = peak_->sample_and_print(where);
  }

  /// "% of the peak" for a rate: against the best sample so far (CPU) or the datasheet (CUDA),
  /// marked "!" above 100%.
  std::string percent_of_peak(double gflop_per_s) {
    if (peak_) {
      const std::string p = peak_->percent(gflop_per_s);
      if (p.back() == '!') above_peak_ = true;
      return p;
    }
    if (peak_gflops_ <= 0.0) return "-";
    char buf[32];
    const double pct = 100.0 * gflop_per_s / peak_gflops_;
    if (pct > 100.0) above_peak_ = true;
    std::snprintf(buf, sizeof buf, "%.1f%%%s", pct, pct > 100.0 ? "!" : "");
    return buf;
  }

  /// 5. The sampled peak, its spread and the model's rates against it: against the run's best
  /// sample, and against the best of the samples taken right before and after the phase (the
  /// machine as it was while the phase ran; on a machine whose clock drifts between samples the
  /// run's best can be a moment no phase saw).
  void print_peak_summary() {
    std::printf("5. The model against the sampled sgemm peak\n");
    peak_->print("   ");
    const double f = model_flops();
    std::printf("   %-34s %9s %17s %16s\n", "", "GFLOP/s", "of the run's peak", "of the peak around");
    const auto line = [&](const char* name, double seconds, double flops, const Bracket& around) {
      if (seconds <= 0.0) return;
      const double g = flops / seconds * 1e-9;
      const double near = peak_->best_between(around.before, around.after);
      char pct[32] = "-";
      if (near > 0.0) {
        std::snprintf(pct, sizeof pct, "%.1f%%%s", 100.0 * g / near, g > near ? "!" : "");
        if (g > near) above_peak_ = true;
      }
      std::printf("   %-34s %9.1f %17s %16s  (%.1f GFLOP/s, samples %zu-%zu)\n", name, g, percent_of_peak(g).c_str(),
                  pct, near, around.before + 1, around.after + 1);
    };
    above_peak_ = false;  // from here against the whole run's peak
    line("forward+backward (2)", fb_.median_s, f, fb_around_);
    line("forward only (2)", fwd_.median_s, f / 3.0, fwd_around_);
    line("backward (difference, 2)", fb_.median_s - fwd_.median_s, 2.0 * f / 3.0,
         Bracket{fb_around_.before, fwd_around_.after});
    line("whole training step (3)", step_.median_s, f, step_around_);
    std::printf("   (samples numbered in the order above; the peak around a phase is the best of the samples\n"
                "   taken right before and right after it)\n");
    if (above_peak_)
      std::printf("   ANOMALY: a rate marked ! is above the measured sgemm peak; the peak samples or the "
                  "timed phases\n   caught an unusual moment of the machine; do not read it as a result, "
                  "rerun on an idle machine\n");
    std::printf("\n");
  }

  // -- 2. the model ----------------------------------------------------------------------------

  void print_model() {
    const int64_t params = cfg_.parameter_count(1);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("2. GptModel forward+backward, one microbatch per iteration\n");
    if (preset_) {
      std::printf("   preset     : %s, %s%s\n", preset_->name.c_str(), preset_->description.c_str(),
                  overrides().empty() ? "" : ("; overridden: " + overrides()).c_str());
    }
    std::string groups;
    if (cfg_.query_groups() != cfg_.num_attention_heads)
      groups = " in " + std::to_string(cfg_.query_groups()) + " query groups";
    std::printf("   model      : %d layers, hidden %d, %d heads (head dim %d)%s, ffn %d, vocab %d "
                "(padded %" PRId64 "), seq %d, %s embeddings\n",
                cfg_.num_layers, cfg_.hidden_size, cfg_.num_attention_heads, cfg_.head_dim(), groups.c_str(),
                cfg_.ffn(), cfg_.vocab_size, cfg_.padded_vocab(1), cfg_.seq_length,
                cfg_.tie_embeddings ? "tied" : "untied");
    std::printf("   layer      : %s\n", architecture().c_str());
    if (cfg_.moe.enabled()) {
      const ptdp::MoeConfig& m = cfg_.moe;
      std::printf("   MoE        : %d of %d layers, %d experts, top-%d (%s scores%s), expert ffn %d",
                  cfg_.num_moe_layers(), cfg_.num_layers, m.num_experts, m.router_topk,
                  m.score_function == ptdp::MoeScoreFunction::Sigmoid ? "sigmoid" : "softmax",
                  m.pre_softmax ? ", softmax before the top-k" : "", cfg_.moe_ffn());
      if (m.shared_expert_intermediate_size > 0)
        std::printf(", shared experts %d%s", m.shared_expert_intermediate_size, m.shared_expert_gate ? " gated" : "");
      std::printf(", aux-loss coefficient %g; %s active parameters\n", static_cast<double>(m.aux_loss_coeff),
                  grouped(cfg_.active_parameter_count(1)).c_str());
    }
    const std::string positions =
        cfg_.learned_positions() ? std::to_string(cfg_.max_positions()) + " position rows" : "no position table";
    std::printf("   parameters : %s (GptConfig::parameter_count: padded vocabulary, %s; fp32 params "
                "+ grads %.2f GiB)\n",
                grouped(params).c_str(), positions.c_str(), 8.0 * static_cast<double>(params) / gib);
    std::printf("   microbatch : b = %d, %" PRId64 " tokens per iteration\n", b_, tokens());
    std::printf("   dropout    : hidden %.2g, attention %.2g%s\n", cfg_.hidden_dropout,
                cfg_.attention_dropout,
                !o_.dropout ? " (--no-dropout)" : preset_ ? " (the preset's)" : " (Megatron's default)");
    std::printf("   recompute  : %s\n", ptdp::recompute_name(cfg_.recompute));
    std::printf("   timing     : %d warm-up + %d timed iterations of forward_backward (gradients "
                "zeroed, untimed,\n"
                "                before each), then %d + %d of forward_loss; median (best, worst)\n",
                warmup_, iters_, warmup_ > 0 ? 1 : 0, iters_);
  }

  void bench_model() {
    print_model();
    std::fflush(stdout);

    const auto t_setup = Clock::now();
    const ptdp::Device device = o_.cuda ? ptdp::Device{ptdp::DeviceType::CUDA, 0} : ptdp::Device{};
    ptdp::GptModel model(cfg_, ptdp::TensorParallel{}, device);
    setup_s_ = seconds_since(t_setup);
    std::printf("   setup      : %.2f s (building the model, initialising the parameters)\n",
                setup_s_);
    std::fflush(stdout);

    // One batch of random ids per call (data varies as in training; generated untimed).
    const int64_t s = cfg_.seq_length;
    const std::size_t n_ids = static_cast<std::size_t>(b_ * s);
    std::vector<int32_t> tokens(n_ids), labels(n_ids);
    auto make_batch = [&](int i) {
      uint64_t state = 0x5eedull + static_cast<uint64_t>(i);
      // Next-token labels: the stream shifted by one, as a data loader produces them.
      std::vector<int32_t> stream(static_cast<std::size_t>(s + 1));
      for (int bi = 0; bi < b_; ++bi) {
        for (auto& v : stream)
          v = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(cfg_.vocab_size));
        for (int64_t si = 0; si < s; ++si) {
          tokens[static_cast<std::size_t>(bi * s + si)] = stream[static_cast<std::size_t>(si)];
          labels[static_cast<std::size_t>(bi * s + si)] = stream[static_cast<std::size_t>(si + 1)];
        }
      }
    };
    auto step_of = [](int i) {
      ptdp::Step st;
      st.iteration = i;
      st.microbatch = 0;
      st.training = true;
      return st;
    };

    std::vector<float> losses;
    const std::size_t sample_before = peak_ ? peak_->next_index() - 1 : 0;  // "before the model"
    fb_ = time_calls(
        warmup_, iters_,
        [&](int i) {
          losses.push_back(model.forward_backward(tokens.data(), labels.data(), b_, step_of(i)));
        },
        [&](int i) {
          make_batch(i);
          model.params().zero_grads();
        });
    loss_first_ = losses.front();
    loss_last_ = losses.back();
    sample_peak("between forward+backward and forward only");
    if (peak_) fb_around_ = {sample_before, peak_->next_index() - 1};

    const int offset = warmup_ + iters_;  // new iterations: new masks and batches
    float fwd_loss = 0.0f;
    fwd_ = time_calls(
        warmup_ > 0 ? 1 : 0, iters_,
        [&](int i) { fwd_loss = model.forward_loss(tokens.data(), labels.data(), b_, step_of(offset + i)); },
        [&](int i) { make_batch(offset + i); });
    fwd_loss_ = fwd_loss;
    max_rss_ = max_rss_bytes();
    sample_peak("after forward only");
    if (peak_) fwd_around_ = {fb_around_.after, peak_->next_index() - 1};

    for (const float l : losses) {
      if (!std::isfinite(l)) ok_ = false;
    }
    if (!std::isfinite(fwd_loss)) ok_ = false;
    print_model_results();
  }

  // -- 3. the whole training step -------------------------------------------------------------

  void bench_step() {
    std::printf("3. The whole training step (train_iteration: data, zero grads, forward+backward through\n"
                "   1F1B with m = 1, norm and clipping, %s), one rank, %d + %d steps\n",
                optimizer_name(), warmup_, iters_);
    std::fflush(stdout);
    auto rt = ptdp::Runtime::create_self({});
    ptdp::ProcessGroups groups(rt, ptdp::ParallelConfig{0, 1, 1, 1});
    ptdp::GptPipeline model(cfg_, groups);
    ptdp::OptimizerConfig oc;
    oc.lr.lr = 1e-4;
    oc.clip_grad = 1.0;
    if (o_.muon) oc.kind = ptdp::OptimizerKind::Muon;  // Megatron's defaults (MuonConfig)
    auto optimizer = ptdp::make_optimizer(model, groups, oc);
    const ptdp::Schedule schedule = ptdp::make_schedule(ptdp::ScheduleKind::OneFOneB, 1, 1, 1);
    ptdp::GptDatasetOptions dopt;
    dopt.seq_length = cfg_.seq_length;
    dopt.split = "1,0,0";
    dopt.num_samples = {static_cast<int64_t>(b_) * (2 * (warmup_ + iters_) + profile_steps_ + 3), 0, 0};
    ptdp::GptDataset data(ptdp::open_token_source(ptdp::DataSource::Mock, "", cfg_.seq_length, cfg_.vocab_size, 1),
                          dopt);
    const std::size_t n_ids = static_cast<std::size_t>(b_) * static_cast<std::size_t>(cfg_.seq_length);
    std::vector<int32_t> ids(n_ids), labels(n_ids);
    int64_t consumed = 0;
    const auto read = [&] {
      data.get_batch(ptdp::DataSplit::Train, consumed, b_, ids.data(), labels.data());
      consumed += b_;
    };
    bool finite = true;
    // The loop's step, as one call.
    step_ = time_calls(warmup_, iters_, [&](int i) {
      read();
      const ptdp::IterationOutcome r =
          ptdp::train_iteration(model, *optimizer, groups, schedule, ids.data(), labels.data(), b_, i);
      finite = finite && std::isfinite(r.loss);
    });
    sample_peak("between the step and its pieces");
    if (peak_) step_around_ = {fwd_around_.after, peak_->next_index() - 1};
    // The same step piece by piece (what train_iteration does, in its order). The scopes name
    // the pieces for the breakdown's profiler (4.); without it they cost a store each. Calls
    // outside the model's own forward and backward scopes (the loss brought to the host) count
    // with the forward.
    const auto piece_step = [&](int iteration) {
      StepPieces t;
      const auto t0 = Clock::now();
      read();
      const auto t1 = Clock::now();
      {
        const ptdp::OpScope zeroing("zero_grads");
        model.zero_grads();
      }
      const auto t2 = Clock::now();
      ptdp::ReplicaSettings replica;
      replica.grad_scale = optimizer->loss_scale();
      const ptdp::GradsReady grads_ready = [&](int j, int first, int end) { optimizer->params_ready(j, first, end); };
      float loss = 0.0f;
      {
        const ptdp::PhaseScope phase(ptdp::Phase::Forward);
        loss = ptdp::forward_backward(model, schedule, ids.data(), labels.data(), b_, iteration, {}, replica, {},
                                      grads_ready);
      }
      const auto t3 = Clock::now();
      {
        const ptdp::PhaseScope phase(ptdp::Phase::Optimizer);
        optimizer->step(iteration);
      }
      const auto t4 = Clock::now();
      finite = finite && std::isfinite(loss);
      const auto d = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
      t.data = d(t0, t1);
      t.zero = d(t1, t2);
      t.fb = d(t2, t3);
      t.opt = d(t3, t4);
      t.total = d(t0, t4);
      return t;
    };
    const int offset = warmup_ + iters_;
    std::vector<double> t_data, t_zero, t_fb, t_opt;
    for (int i = 0; i < warmup_ + iters_; ++i) {
      const StepPieces t = piece_step(offset + i);
      if (i < warmup_) continue;
      t_data.push_back(t.data);
      t_zero.push_back(t.zero);
      t_fb.push_back(t.fb);
      t_opt.push_back(t.opt);
    }
    const auto stats = [](std::vector<double> v) {
      Stats st;
      st.times_s = v;
      std::sort(v.begin(), v.end());
      st.median_s = v[v.size() / 2];
      st.best_s = v.front();
      st.worst_s = v.back();
      return st;
    };
    step_data_ = stats(t_data);
    step_zero_ = stats(t_zero);
    step_fb_ = stats(t_fb);
    step_opt_ = stats(t_opt);
    if (!finite) ok_ = false;
    const double fb = step_fb_.median_s;
    std::printf("\n   %-34s %10s %12s\n", "piece", "ms (median)", "% of fwd+bwd");
    std::printf("   %s\n", std::string(60, '-').c_str());
    const auto row = [&](const char* name, const Stats& st) {
      std::printf("   %-34s %10.2f %11.1f%%\n", name, st.median_s * 1e3, 100.0 * st.median_s / fb);
    };
    row("data (mock GPT samples)", step_data_);
    row("zero gradients", step_zero_);
    row("forward+backward (1F1B, m = 1)", step_fb_);
    row(o_.muon ? "optimizer (norm, clipping, Muon)" : "optimizer (norm, clipping, AdamW)", step_opt_);
    std::printf("   %s\n", std::string(60, '-').c_str());
    row("the whole step (train_iteration)", step_);
    std::printf("   the rest of the step beside forward+backward: %.1f%% (%.2f ms); forward+backward of (2): "
                "%.1f ms\n\n",
                100.0 * (step_.median_s - fb) / fb, (step_.median_s - fb) * 1e3, fb_.median_s * 1e3);
    std::printf("   whole step: %.1f ms, %.0f tokens/s, %.1f GFLOP/s (%s of the peak so far)\n\n", step_.median_s * 1e3,
                static_cast<double>(tokens()) / step_.median_s, model_flops() / step_.median_s * 1e-9,
                percent_of_peak(model_flops() / step_.median_s * 1e-9).c_str());
    if (profile_steps_ > 0) {
      sample_peak("before the breakdown");
      bench_breakdown(piece_step, 2 * offset);
      if (!finite) ok_ = false;
    }
  }

  // -- 4. the per-op breakdown of the step ----------------------------------------------------

  /// One profiled warm-up step, then profile_steps_ steps piece by piece with the profiling
  /// decorator installed; the backend calls' times, per step, by row and phase.
  template <class PieceStep>
  void bench_breakdown(const PieceStep& piece_step, int first_iteration) {
    std::printf("4. Per-op breakdown of the training step (3), CPU backend calls timed by a profiling\n"
                "   decorator (kernels/profiling_backend.h), 1 + %d steps; ms per step (mean)\n",
                profile_steps_);
    std::fflush(stdout);
    ptdp::ProfilingBackend profiler(ptdp::cpu_backend());
    StepPieces sum;
    {
      const DecoratorGuard installed(profiler);
      piece_step(first_iteration);  // warm-up: the decorator's first calls, untimed
      profiler.reset();
      for (int i = 0; i < profile_steps_; ++i) {
        const StepPieces t = piece_step(first_iteration + 1 + i);
        sum.data += t.data;
        sum.zero += t.zero;
        sum.fb += t.fb;
        sum.opt += t.opt;
        sum.total += t.total;
      }
    }
    const double per = 1.0 / profile_steps_;
    prof_ = StepPieces{sum.data * per, sum.zero * per, sum.fb * per, sum.opt * per, sum.total * per};
    prof_entries_ = profiler.entries();
    rows_.clear();
    for (const char* name : kBreakdownRows) rows_.push_back(BreakdownRow{name});
    prof_kernels_fb_s_ = prof_kernels_opt_s_ = prof_kernels_other_s_ = 0.0;
    for (const auto& e : prof_entries_) {
      // Muon's momentum and update are axpy/scale calls of the optimizer phase.
      const bool muon_elementwise = e.phase == ptdp::Phase::Optimizer &&
                                    (e.op == ptdp::BackendOp::Axpy || e.op == ptdp::BackendOp::Scale);
      const std::string name = muon_elementwise ? "momentum and update (Muon)" : breakdown_row(e.op, e.label);
      auto row = std::find_if(rows_.begin(), rows_.end(), [&](const BreakdownRow& r) { return r.name == name; });
      const double t = e.seconds * per;
      row->calls += e.calls;
      row->flops += e.flops * per;
      switch (e.phase) {
        case ptdp::Phase::Forward: row->forward_s += t; prof_kernels_fb_s_ += t; break;
        case ptdp::Phase::Backward:
        case ptdp::Phase::Recompute: row->backward_s += t; prof_kernels_fb_s_ += t; break;
        case ptdp::Phase::Optimizer: row->optimizer_s += t; prof_kernels_opt_s_ += t; break;
        case ptdp::Phase::Other: row->other_s += t; prof_kernels_other_s_ += t; break;
      }
    }
    print_breakdown();
  }

  void print_breakdown() {
    const double step = prof_.total;
    const auto pct = [&](double t) { return 100.0 * t / step; };
    std::printf("\n   %-34s %9s %9s %9s %7s %9s\n", "forward + backward, by op", "fwd ms", "bwd ms", "ms",
                "% step", "GFLOP/s");
    std::printf("   %s\n", std::string(84, '-').c_str());
    double fwd = 0.0, bwd = 0.0;
    for (const BreakdownRow& r : rows_) {
      const double t = r.forward_s + r.backward_s;
      if (r.calls == 0 && r.name == "GeLU (unfused calls)" && !cfg_.swiglu && cfg_.add_bias_linear) {
        std::printf("   %-34s %29s\n", "GeLU", "in fc1 / fc2 (fused, see below)");
        continue;
      }
      if (r.calls == 0 || t <= 0.0) continue;
      fwd += r.forward_s;
      bwd += r.backward_s;
      std::printf("   %-34s %9.2f %9.2f %9.2f %6.1f%%", r.name.c_str(), r.forward_s * 1e3, r.backward_s * 1e3,
                  t * 1e3, pct(t));
      if (r.flops > 0.0) std::printf(" %9.1f", r.flops / t * 1e-9);
      std::printf("\n");
    }
    std::printf("   %s\n", std::string(84, '-').c_str());
    std::printf("   %-34s %9.2f %9.2f %9.2f %6.1f%%\n", "backend calls in forward+backward", fwd * 1e3, bwd * 1e3,
                (fwd + bwd) * 1e3, pct(fwd + bwd));
    const double outside = prof_.fb - prof_kernels_fb_s_;
    std::printf("   %-34s %29.2f %6.1f%%\n", o_.muon ? "optimizer (norm, clipping, Muon)" : "optimizer (norm, clipping, AdamW)",
                prof_.opt * 1e3, pct(prof_.opt));
    for (const BreakdownRow& r : rows_) {
      if (r.optimizer_s > 0.0)
        std::printf("     %-32s %29.2f %6.1f%%\n", r.name.c_str(), r.optimizer_s * 1e3, pct(r.optimizer_s));
    }
    std::printf("   %-34s %29.2f %6.1f%%\n", "gradient zeroing", prof_.zero * 1e3, pct(prof_.zero));
    std::printf("   %-34s %29.2f %6.1f%%\n", "data (mock GPT samples)", prof_.data * 1e3, pct(prof_.data));
    const double rest = step - (fwd + bwd) - prof_.opt - prof_.zero - prof_.data;
    std::printf("   %-34s %29.2f %6.1f%%\n", "rest (step - the rows above)", rest * 1e3, pct(rest));
    std::printf("     %-32s %29.2f %6.1f%%\n", "in forward+backward, outside calls", outside * 1e3, pct(outside));
    std::printf("   %s\n", std::string(84, '-').c_str());
    std::printf("   %-34s %29.2f %6.1f%%\n", "the step (profiled, mean)", step * 1e3, 100.0);
    std::printf("   the unprofiled step of (3): %.2f ms (median); the profiled one is %+.1f%% of it\n",
                step_.median_s * 1e3, 100.0 * (step - step_.median_s) / step_.median_s);
    std::printf("   (The rest is the layers' own work between backend calls, above, and the loop between the\n"
                "   pieces. The CPU engine fuses each linear bias into its GEMM (epilogue), and with biases\n"
                "   also fc1's GeLU (forward) and its derivative (fc2's dgrad): their time is in those GEMM\n"
                "   rows; the GeLU row holds only unfused calls. bwd includes any recomputed forward.)\n\n");
  }

  // -- 6. the MoE layer alone -------------------------------------------------------------------

  /// The MoE layer's time by what it does, in print order (moe_row files each backend call).
  enum MoeRow { kExpertGemm, kExpertAct, kSharedGemm, kRouting, kPermute, kCopies, kAdds, kOtherCalls, kMoeRows };
  static constexpr const char* kMoeRowNames[kMoeRows] = {
      "expert GEMMs",
      "expert activation, biases",
      "shared experts' GEMMs",
      "routing (router GEMMs, scores, top-k, losses)",
      "permutation (permute, unpermute, backwards)",
      "copies, fills, casts, host transfers",
      "adds (outputs and gradients summed)",
      "other backend calls"};
  /// Rows that compute the experts; every other row, the layer's own C++ between calls and the
  /// exchange are the routing, permutation and exchange overhead the issue's goal bounds.
  static bool expert_compute(int row) { return row == kExpertGemm || row == kExpertAct || row == kSharedGemm; }

  /// Section 6's figures.
  struct MoeLayerResult {
    bool ran = false;
    int64_t tokens = 0;  // routed through the layer per pass
    Stats fwd, bwd_input, bwd_weight, layer;  // unprofiled, per pass
    double load_min = 0.0, load_max = 0.0;    // (token, expert) pairs per expert, last pass
    double profiled_s = 0.0;                  // the profiled layer, mean per pass
    std::array<double, kMoeRows> row_s{};     // seconds per pass by row (profiled)
    double expert_flops = 0.0;                // the expert GEMMs' FLOPs per pass, as the profiler counts them
    double expert_gflops = 0.0, overhead_share = 0.0;
  };
  MoeLayerResult moe_;
  Bracket moe_around_;  // the peak samples right before and after section 6

  /// The row of one backend call of the MoE layer. GEMMs are the experts' (their label, or the
  /// grouped op), the shared experts' (their MLP labels fc1 / fc2) or, unlabelled, the router's.
  static int moe_row(ptdp::BackendOp op, const std::string& label) {
    using ptdp::BackendOp;
    switch (op) {
      case BackendOp::GroupedGemm: return kExpertGemm;
      case BackendOp::Gemm:
        if (label == kExpertsLabel) return kExpertGemm;
        return label == "fc1" || label == "fc2" ? kSharedGemm : kRouting;
      case BackendOp::SwigluForward:
      case BackendOp::SwigluBackward:
      case BackendOp::GeluForward:
      case BackendOp::GeluBackward:
      case BackendOp::BiasAdd:
      case BackendOp::BiasGrad: return kExpertAct;
      case BackendOp::MoeRouterForward:
      case BackendOp::MoeRouterBackward:
      case BackendOp::MoeAuxScoresForward:
      case BackendOp::MoeAuxScoresBackward:
      case BackendOp::MoeRouterLse:
      case BackendOp::MoeRouterZLossBackward:
      case BackendOp::MoeRoute: return kRouting;
      case BackendOp::MoePermute:
      case BackendOp::MoeUnpermute:
      case BackendOp::MoeUnpermuteBackward: return kPermute;
      case BackendOp::Copy:
      case BackendOp::CopyToHost:
      case BackendOp::CopyFromHost:
      case BackendOp::Copy2d:
      case BackendOp::Fill:
      case BackendOp::Fill2d:
      case BackendOp::Cast: return kCopies;
      case BackendOp::Add:
      case BackendOp::Axpy:
      case BackendOp::Scale: return kAdds;
      default: return kOtherCalls;
    }
  }

  /// One MoE layer (the model's first MoE layer's shape and settings) on b*s tokens, timed by the
  /// wall clock: forward, backward_input and backward_weight, then the same passes with the
  /// profiling decorator installed to split the layer's time by op.
  void bench_moe_layer() {
    const int64_t n = o_.moe_layer_tokens.value_or(static_cast<int>(tokens())), h = cfg_.hidden_size,
                  k = cfg_.moe.router_topk, E = cfg_.moe.num_experts;
    const int64_t ffn = cfg_.moe_ffn();
    const int steps = std::max(1, profile_steps_);
    std::printf("6. The MoE layer alone (core/layers/moe: router, token dispatcher, experts) on one rank (e = 1):\n"
                "   %" PRId64 " tokens (--moe-layer-tokens), E = %" PRId64 ", top-%" PRId64 ", expert ffn %" PRId64
                "%s%s; %d + %d passes of forward,\n"
                "   backward_input, backward_weight (gradients zeroed untimed), then %d profiled ones\n",
                n, E, k, ffn, cfg_.swiglu ? " SwiGLU" : " GeLU",
                cfg_.moe.shared_expert_intermediate_size > 0 ? ", shared experts" : "", warmup_, iters_, steps);
    std::fflush(stdout);
    sample_peak("before the MoE layer");
    const std::size_t sample_before = peak_ ? peak_->next_index() - 1 : 0;

    ptdp::ParamTable params(0, 1);
    ptdp::MoeLayer layer(params, "decoder.layers.0.mlp", cfg_, ptdp::TensorParallel{});
    params.allocate(ptdp::Device{}, cfg_.precision);
    params.initialize(cfg_.seed);
    // The layer's input is a normalised hidden state: unit-variance values (uniform in
    // [-sqrt 3, sqrt 3]); the output gradient is small, as the loss's is.
    uint64_t state = 0x6d6f65ull;
    const auto uniform = [&state](float scale) {
      return scale * (static_cast<float>(splitmix64(state) >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
    };
    std::vector<float> xh(static_cast<std::size_t>(n * h)), dyh(xh.size());
    for (float& v : xh) v = uniform(1.7320508f);
    for (float& v : dyh) v = uniform(1e-3f);
    const auto device_tensor = [&](const std::vector<float>& v) {
      const ptdp::Tensor t = ptdp::Tensor::from_host(v.data(), {n, h}, ptdp::DType::F32, ptdp::Device{});
      return cfg_.precision == ptdp::DType::F32 ? t : t.to(cfg_.precision);
    };
    const ptdp::Tensor x = device_tensor(xh), dy = device_tensor(dyh);  // [N, h] each

    // One pass of the layer; the wall-clock seconds of forward, backward_input, backward_weight.
    // The caller zeroes the gradients first, outside the profiler (a fill of every expert's).
    const auto pass = [&](int i) {
      ptdp::Step st;
      st.iteration = i;
      st.microbatch = 0;
      st.training = true;
      std::array<double, 3> t{};
      const ptdp::PhaseScope forward(ptdp::Phase::Forward);
      auto t0 = Clock::now();
      const ptdp::Tensor y = layer.forward(x, st);  // [N, h]
      t[0] = seconds_since(t0);
      const ptdp::PhaseScope backward(ptdp::Phase::Backward);
      t0 = Clock::now();
      const ptdp::Tensor dx = layer.backward_input(dy, st);  // [N, h]
      t[1] = seconds_since(t0);
      t0 = Clock::now();
      layer.backward_weight(st);
      t[2] = seconds_since(t0);
      return t;
    };
    std::vector<double> fwd, bwd_in, bwd_w, total;
    ContentionMeter meter;
    for (int i = 0; i < warmup_ + iters_; ++i) {
      params.zero_grads();
      const std::array<double, 3> t = pass(i);
      if (i < warmup_) continue;
      fwd.push_back(t[0]);
      bwd_in.push_back(t[1]);
      bwd_w.push_back(t[2]);
      total.push_back(t[0] + t[1] + t[2]);
    }
    moe_.fwd = stats_of(fwd);
    moe_.bwd_input = stats_of(bwd_in);
    moe_.bwd_weight = stats_of(bwd_w);
    moe_.layer = stats_of(total);
    moe_.layer.other_cores = meter.stop();
    const auto& loads = layer.router().stats();
    if (!loads.empty()) {
      const std::vector<double>& per = loads.begin()->second.tokens_per_expert;
      const auto [lo, hi] = std::minmax_element(per.begin(), per.end());
      moe_.load_min = *lo;
      moe_.load_max = *hi;
    }
    layer.router().clear_stats();

    // The same passes with the decorator: every backend call's time by row; the rest of the
    // layer's wall time is its own C++ between calls (host routing tables, index building).
    ptdp::ProfilingBackend profiler(ptdp::cpu_backend());
    double profiled_s = 0.0;
    for (int i = -1; i < steps; ++i) {  // i = -1: the decorator's first calls, untimed
      params.zero_grads();
      const DecoratorGuard installed(profiler);
      const std::array<double, 3> t = pass(warmup_ + iters_ + 1 + i);
      if (i < 0) {
        profiler.reset();
      } else {
        profiled_s += t[0] + t[1] + t[2];
      }
    }
    moe_.profiled_s = profiled_s / steps;
    moe_.row_s.fill(0.0);
    moe_.expert_flops = 0.0;
    for (const auto& e : profiler.entries()) {
      const int row = moe_row(e.op, e.label);
      moe_.row_s[static_cast<std::size_t>(row)] += e.seconds / steps;
      if (row == kExpertGemm) moe_.expert_flops += e.flops / steps;
    }
    sample_peak("after the MoE layer");
    if (peak_) moe_around_ = {sample_before, peak_->next_index() - 1};
    moe_.ran = true;
    moe_.tokens = n;
    print_moe_layer(n, h, k, ffn);
  }

  // ---- 7. multi-latent attention beside grouped-query attention --------------------------

  /// What section 7 measured of one module: an attention layer alone or a whole decoder layer.
  struct ModuleRun {
    std::string name;
    int64_t params = 0, active = 0;  // parameters, and those one token uses (the k routed experts)
    double model_flops = 0.0;        // Megatron's count of one forward and backward of the tokens
    Stats pass;                      // forward + backward_input + backward_weight, unprofiled
    // Profiled (attention alone): the projections' GEMMs, the core attention (QK^T, softmax, PV
    // or the fused kernel), everything else (RoPE, the latents' norms, assembling q/k/v, copies).
    double profiled_s = 0.0, proj_s = 0.0, proj_flops = 0.0, core_s = 0.0, core_flops = 0.0;
  };
  struct MlaSection {
    bool ran = false;
    int64_t tokens = 0;
    int gqa_heads = 0, gqa_groups = 0;
    std::vector<ModuleRun> runs;  // MLA alone, GQA alone, the MLA layer, the GQA layer
  };
  MlaSection mla_;
  Bracket mla_around_;  // the peak samples right before and after section 7

  /// Parameters of grouped-query attention with a heads of dh in g groups, no biases, over h.
  static int64_t gqa_parameters(int64_t h, int64_t a, int64_t g, int64_t dh) { return 2 * h * dh * (a + g); }

  /// The grouped-query twin of the MLA model: heads of v_head_dim (DeepSeek's 128, the head
  /// width GQA models use), a' heads in g' groups chosen so that the attention has the parameter
  /// count nearest to MLA's (a' from a to 4a, g' dividing a' with at most 8 queries per group;
  /// ties go to more groups); everything else (norms, RoPE, the MoE MLP) unchanged.
  ptdp::GptConfig gqa_twin(int64_t mla_params) const {
    ptdp::GptConfig g = cfg_;
    g.multi_latent_attention = false;
    g.qk_layernorm = false;
    g.kv_channels = cfg_.v_head_dim;
    const int64_t h = cfg_.hidden_size, dh = g.kv_channels, a = cfg_.num_attention_heads;
    int64_t best_a = a, best_g = a, best_diff = -1;
    for (int64_t heads = a; heads <= 4 * a; ++heads) {
      for (int64_t groups = heads; groups >= 1; --groups) {
        if (heads % groups != 0 || heads / groups > 8) continue;
        const int64_t diff = std::llabs(gqa_parameters(h, heads, groups, dh) - mla_params);
        if (best_diff < 0 || diff < best_diff) {
          best_diff = diff;
          best_a = heads;
          best_g = groups;
        }
      }
    }
    g.num_attention_heads = static_cast<int>(best_a);
    g.num_query_groups = static_cast<int>(best_g);
    return g;
  }

  /// The row of one backend call of an attention layer: 0 the projections' GEMMs, 1 the core
  /// attention, 2 the rest.
  static int attention_row(ptdp::BackendOp op, const std::string& label) {
    using ptdp::BackendOp;
    switch (op) {
      case BackendOp::Gemm: return label == "attn_scores" || label == "attn_context" ? 1 : 0;
      case BackendOp::SoftmaxForward:
      case BackendOp::SoftmaxForwardDocuments:
      case BackendOp::SoftmaxBackward:
      case BackendOp::AttentionForward:
      case BackendOp::AttentionBackward:
      case BackendOp::AttentionBlockForward:
      case BackendOp::AttentionBlockBackward: return 1;
      default: return 2;
    }
  }

  /// Times `module` (an AttentionLayer or a TransformerLayer over its own ParamTable) on the
  /// tokens x with output gradient dy: warm-up and timed passes of forward, backward_input,
  /// backward_weight and release (gradients zeroed untimed), then, with `profile`, as many
  /// passes under the profiling decorator split into the rows of attention_row().
  template <typename Module>
  void time_module(ModuleRun& run, Module& module, ptdp::ParamTable& params, const ptdp::Tensor& x,
                   const ptdp::Tensor& dy, bool profile) {
    const auto pass = [&](int i) {
      ptdp::Step st;
      st.iteration = i;
      st.microbatch = 0;
      st.training = true;
      const auto t0 = Clock::now();
      {
        const ptdp::PhaseScope forward(ptdp::Phase::Forward);
        const ptdp::Tensor y = module.forward(x, st);
      }
      {
        const ptdp::PhaseScope backward(ptdp::Phase::Backward);
        const ptdp::Tensor dx = module.backward_input(dy, st);
        module.backward_weight(st);
      }
      module.release(st);
      return seconds_since(t0);
    };
    std::vector<double> times;
    ContentionMeter meter;
    for (int i = 0; i < warmup_ + iters_; ++i) {
      params.zero_grads();
      const double t = pass(i);
      if (i >= warmup_) times.push_back(t);
    }
    run.pass = stats_of(times);
    run.pass.other_cores = meter.stop();
    if (!profile) return;
    const int steps = std::max(1, profile_steps_);
    ptdp::ProfilingBackend profiler(ptdp::cpu_backend());
    double profiled = 0.0;
    for (int i = -1; i < steps; ++i) {  // i = -1: the decorator's first calls, untimed
      params.zero_grads();
      const DecoratorGuard installed(profiler);
      const double t = pass(warmup_ + iters_ + 1 + i);
      if (i < 0) profiler.reset();
      else profiled += t;
    }
    run.profiled_s = profiled / steps;
    for (const auto& e : profiler.entries()) {
      const int row = attention_row(e.op, e.label);
      if (row == 0) {
        run.proj_s += e.seconds / steps;
        run.proj_flops += e.flops / steps;
      } else if (row == 1) {
        run.core_s += e.seconds / steps;
        run.core_flops += e.flops / steps;
      }
    }
  }

  /// Megatron's FLOPs of one layer's attention for the tokens, forward and backward:
  /// 12 B s h^2 times mla_attention_factor(), or (1 + g/a + s/h) a dh / h for GQA.
  double attention_model_flops(const ptdp::GptConfig& c) const {
    const double n = static_cast<double>(tokens()), h = c.hidden_size, s = c.seq_length;
    if (c.multi_latent_attention) return 12.0 * n * h * h * c.mla_attention_factor();
    const double a = c.num_attention_heads, g = c.query_groups(), aw = static_cast<double>(c.attention_width());
    return 12.0 * n * h * h * (1.0 + g / a + s / h) * aw / h;
  }

  /// 7. The model's first layer's attention alone (MlaAttention, core/layers/mla_attention.h) on
  /// b*s tokens against the sgemm peak, beside grouped-query attention of the same parameter
  /// count, then the whole decoder layer (norms, attention, the MoE or dense MLP) with each.
  void bench_mla_layer() {
    const int64_t n = tokens(), h = cfg_.hidden_size;
    std::printf("7. Multi-latent attention alone and in its layer, beside grouped-query attention of the same\n"
                "   parameter count, on one rank: %" PRId64 " tokens (b %d x s %d), %d + %d passes of forward,\n"
                "   backward_input, backward_weight (gradients zeroed untimed), then %d profiled ones\n",
                n, b_, cfg_.seq_length, warmup_, iters_, std::max(1, profile_steps_));
    std::fflush(stdout);
    sample_peak("before section 7");
    const std::size_t sample_before = peak_ ? peak_->next_index() - 1 : 0;

    uint64_t state = 0x6d6c61ull;
    const auto uniform = [&state](float scale) {
      return scale * (static_cast<float>(splitmix64(state) >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f);
    };
    std::vector<float> xh(static_cast<std::size_t>(n * h)), dyh(xh.size());
    for (float& v : xh) v = uniform(1.7320508f);  // a normalised hidden state: unit variance
    for (float& v : dyh) v = uniform(1e-3f);
    const auto device_tensor = [&](const std::vector<float>& v) {
      const ptdp::Tensor t = ptdp::Tensor::from_host(v.data(), {n, h}, ptdp::DType::F32, ptdp::Device{});
      return cfg_.precision == ptdp::DType::F32 ? t : t.to(cfg_.precision);
    };
    const ptdp::Tensor x = device_tensor(xh), dy = device_tensor(dyh);  // [b*s, h] each

    mla_ = MlaSection{};
    mla_.tokens = n;
    // Each attention alone, profiled: MLA, then its GQA twin of the same parameter count.
    const auto attention_alone = [&](auto* kind, const ptdp::GptConfig& c, const char* name) {
      using Attention = std::remove_pointer_t<decltype(kind)>;
      ptdp::ParamTable params(0, 1);
      Attention attn(params, "decoder.layers.0.self_attention", c, 0, ptdp::TensorParallel{}, ptdp::Device{});
      params.allocate(ptdp::Device{}, cfg_.precision);
      params.initialize(cfg_.seed);
      ModuleRun run;
      run.name = name;
      run.params = run.active = params.numel();
      run.model_flops = attention_model_flops(c);
      time_module(run, attn, params, x, dy, true);
      mla_.runs.push_back(run);
    };
    attention_alone(static_cast<ptdp::MlaAttention*>(nullptr), cfg_, "MLA attention");
    const ptdp::GptConfig gqa = gqa_twin(mla_.runs[0].params);
    mla_.gqa_heads = gqa.num_attention_heads;
    mla_.gqa_groups = gqa.query_groups();
    attention_alone(static_cast<ptdp::SelfAttention*>(nullptr), gqa, "GQA attention");
    // The whole first layer with each attention: the FLOPs are Megatron's count of one layer
    // (paper_flops of the one-layer model without its logits).
    for (const ptdp::GptConfig* c : std::array<const ptdp::GptConfig*, 2>{&cfg_, &gqa}) {
      ptdp::GptConfig one = *c;
      one.num_layers = 1;
      if (!one.moe.layer_pattern.empty()) one.moe.layer_pattern.resize(1);
      ptdp::ParamTable params(0, 1);
      ptdp::TransformerLayer layer(params, one, 0, ptdp::TensorParallel{}, ptdp::Device{});
      params.allocate(ptdp::Device{}, cfg_.precision);
      params.initialize(cfg_.seed);
      ModuleRun run;
      run.name = c == &cfg_ ? "the layer with MLA" : "the layer with GQA";
      run.params = params.numel();
      // The routed experts a token does not visit, as GptConfig counts them (biases included).
      run.active = run.params - (one.parameter_count(1) - one.active_parameter_count(1));
      run.model_flops = one.paper_flops(b_) - 6.0 * static_cast<double>(n) * h * one.vocab_size;
      time_module(run, layer, params, x, dy, false);
      mla_.runs.push_back(run);
    }
    sample_peak("after section 7");
    if (peak_) mla_around_ = {sample_before, peak_->next_index() - 1};
    mla_.ran = true;
    print_mla_layer();
  }

  void print_mla_layer() {
    const ModuleRun& mla = mla_.runs[0];
    const ModuleRun& gqa = mla_.runs[1];
    std::printf("\n   MLA: %d heads, q_lora_rank %d, kv_lora_rank %d, qk %d + %d RoPE, v %d%s; GQA of the same\n"
                "   parameter count: %d heads of %d in %d groups (%.2f M against MLA's %.2f M)\n\n",
                cfg_.num_attention_heads, cfg_.q_lora_rank, cfg_.kv_lora_rank, cfg_.qk_head_dim,
                cfg_.qk_pos_emb_head_dim, cfg_.v_head_dim, cfg_.qk_layernorm ? ", latent norms" : "",
                mla_.gqa_heads, cfg_.v_head_dim, mla_.gqa_groups, gqa.params * 1e-6, mla.params * 1e-6);
    std::printf("   %-22s %9s %9s %9s %10s %9s %9s %7s\n", "module", "params M", "active M", "ms", "tokens/s",
                "GFLOP", "GFLOP/s", "% peak");
    std::printf("   %s\n", std::string(92, '-').c_str());
    for (const ModuleRun& r : mla_.runs) {
      const double g = r.model_flops / r.pass.median_s * 1e-9;
      std::printf("   %-22s %9.2f %9.2f %9.1f %10.0f %9.2f %9.1f %7s%s\n", r.name.c_str(), r.params * 1e-6,
                  r.active * 1e-6, r.pass.median_s * 1e3, static_cast<double>(mla_.tokens) / r.pass.median_s,
                  r.model_flops * 1e-9, g, percent_of_peak(g).c_str(), contended_mark(r.pass));
    }
    std::printf("   (GFLOP: Megatron's count, the attention's term 12*B*s*h^2*(MLA factor, or (1 + g/a + s/h)*a*dh/h);\n"
                "   the layers' the one-layer model's paper_flops without its logits)\n\n");
    std::printf("   %-22s %12s %12s %12s %12s\n", "attention, profiled", "projections", "GFLOP/s", "core attn",
                "rest");
    std::printf("   %s\n", std::string(76, '-').c_str());
    for (int i = 0; i < 2; ++i) {
      const ModuleRun& r = mla_.runs[static_cast<std::size_t>(i)];
      const double rest = r.profiled_s - r.proj_s - r.core_s;
      std::printf("   %-22s %10.1f%% %12.1f %11.1f%% %11.1f%%\n", r.name.c_str(), 100.0 * r.proj_s / r.profiled_s,
                  r.proj_s > 0.0 ? r.proj_flops / r.proj_s * 1e-9 : 0.0, 100.0 * r.core_s / r.profiled_s,
                  100.0 * rest / r.profiled_s);
    }
    const double near = peak_ ? peak_->best_between(mla_around_.before, mla_around_.after) : peak_gflops_;
    const double g = mla.model_flops / mla.pass.median_s * 1e-9;
    std::printf("\n   MLA attention: %.1f GFLOP/s = %s of the run's sgemm peak, %.1f%% of the peak around this\n"
                "   section (%.1f GFLOP/s); its projections' GEMMs %.1f GFLOP/s\n",
                g, percent_of_peak(g).c_str(), near > 0.0 ? 100.0 * g / near : 0.0, near,
                mla.proj_s > 0.0 ? mla.proj_flops / mla.proj_s * 1e-9 : 0.0);
    const ModuleRun& lm = mla_.runs[2];
    const ModuleRun& lg = mla_.runs[3];
    std::printf("   tokens/s: MLA attention %.0f against GQA's %.0f (x%.2f); the whole layer with MLA %.0f against\n"
                "   %.0f with GQA (x%.2f), %.2f M against %.2f M active parameters\n\n",
                mla_.tokens / mla.pass.median_s, mla_.tokens / gqa.pass.median_s,
                gqa.pass.median_s / mla.pass.median_s, mla_.tokens / lm.pass.median_s,
                mla_.tokens / lg.pass.median_s, lg.pass.median_s / lm.pass.median_s, lm.active * 1e-6,
                lg.active * 1e-6);
  }

  std::string mla_layer_json() const {
    const double near = peak_ ? peak_->best_between(mla_around_.before, mla_around_.after) : peak_gflops_;
    std::string s = "{\"tokens\": " + std::to_string(mla_.tokens) + ", \"gqa_heads\": " +
                    std::to_string(mla_.gqa_heads) + ", \"gqa_groups\": " + std::to_string(mla_.gqa_groups) +
                    ", \"peak_around\": " + json_number(near) + ", \"modules\": [";
    for (std::size_t i = 0; i < mla_.runs.size(); ++i) {
      const ModuleRun& r = mla_.runs[i];
      s += std::string(i ? ", " : "") + "{\"name\": \"" + json_escape(r.name) + "\", \"params\": " +
           std::to_string(r.params) + ", \"active_params\": " + std::to_string(r.active) +
           ", \"model_gflop\": " + json_number(r.model_flops * 1e-9) + ", \"pass\": " + stats_json(r.pass) +
           "}, \"tokens_per_s\": " + json_number(mla_.tokens / r.pass.median_s) +
           ", \"gflop_per_s\": " + json_number(r.model_flops / r.pass.median_s * 1e-9) +
           ", \"profiled_ms\": " + json_number(r.profiled_s * 1e3) +
           ", \"projections_ms\": " + json_number(r.proj_s * 1e3) +
           ", \"projections_gflop\": " + json_number(r.proj_flops * 1e-9) +
           ", \"core_attention_ms\": " + json_number(r.core_s * 1e3) + "}";
    }
    return s + "]}";
  }

  static Stats stats_of(const std::vector<double>& v) {
    Stats st;
    st.times_s = v;
    st.finish();
    return st;
  }

  /// The expert FLOPs of one forward and backward (the layer's term of Megatron's count):
  /// 3 passes x 2 N k h ffn x (3 matrices with SwiGLU, else 2).
  double moe_expert_model_flops(int64_t n, int64_t h, int64_t k, int64_t ffn) const {
    return 6.0 * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(h) * static_cast<double>(ffn) *
           (cfg_.swiglu ? 3.0 : 2.0);
  }

  void print_moe_layer(int64_t n, int64_t h, int64_t k, int64_t ffn) {
    const double layer = moe_.profiled_s;
    std::printf("\n   %-34s %10s %10s %10s\n", "pass (unprofiled)", "ms", "best ms", "worst ms");
    std::printf("   %s\n", std::string(68, '-').c_str());
    const auto pass_row = [&](const char* name, const Stats& st) {
      std::printf("   %-34s %10.2f %10.2f %10.2f%s\n", name, st.median_s * 1e3, st.best_s * 1e3, st.worst_s * 1e3,
                  contended_mark(moe_.layer));
    };
    pass_row("forward", moe_.fwd);
    pass_row("backward_input", moe_.bwd_input);
    pass_row("backward_weight", moe_.bwd_weight);
    pass_row("the layer (sum of the three)", moe_.layer);
    std::printf("   expert load: %.0f .. %.0f (token, expert) pairs per expert, mean %.1f\n\n", moe_.load_min,
                moe_.load_max, static_cast<double>(n * k) / cfg_.moe.num_experts);

    std::printf("   %-46s %9s %8s %9s\n", "the layer's time, by what it does (profiled)", "ms", "% layer", "GFLOP/s");
    std::printf("   %s\n", std::string(76, '-').c_str());
    double calls = 0.0, overhead = 0.0;
    for (int r = 0; r < kMoeRows; ++r) {
      const double t = moe_.row_s[static_cast<std::size_t>(r)];
      calls += t;
      if (!expert_compute(r)) overhead += t;
      if (t <= 0.0) continue;
      std::printf("   %-46s %9.2f %7.1f%%", kMoeRowNames[r], t * 1e3, 100.0 * t / layer);
      if (r == kExpertGemm) std::printf(" %9.1f", moe_.expert_flops / t * 1e-9);
      std::printf("\n");
    }
    const double host = layer - calls;
    overhead += host;
    std::printf("   %-46s %9.2f %7.1f%%\n", "the layer's own C++ between calls", host * 1e3, 100.0 * host / layer);
    std::printf("   %-46s %9s %8s\n", "exchange (all-to-all over e)", "-", "-");
    std::printf("   %s\n", std::string(76, '-').c_str());
    std::printf("   %-46s %9.2f %7.1f%%  (unprofiled %.2f ms)\n", "the layer (profiled, mean)", layer * 1e3, 100.0,
                moe_.layer.median_s * 1e3);
    moe_.overhead_share = overhead / layer;
    std::printf("   (one rank: no exchange; the dispatcher's local copies are in the rows above. For the\n"
                "   exchange on e ranks run bench_train under mpirun with --num-experts and layouts t,p,d,e: its\n"
                "   \"moe\" columns are the token exchange's share of the iteration,\n"
                "   IterationOutcome::moe_exchange_seconds)\n\n");

    const double gemm_s = moe_.row_s[kExpertGemm];
    const double model = moe_expert_model_flops(n, h, k, ffn);
    moe_.expert_gflops = gemm_s > 0.0 ? moe_.expert_flops / gemm_s * 1e-9 : 0.0;
    const double near = peak_ ? peak_->best_between(moe_around_.before, moe_around_.after) : peak_gflops_;
    std::printf("   expert GEMMs: %.1f GFLOP/s (%.2f GFLOP per pass counted by the profiler; the experts' model\n"
                "   FLOPs 6*N*k*h*ffn*%d = %.2f GFLOP) = %s of the run's sgemm peak, %.1f%% of the peak around\n"
                "   this section (%.1f GFLOP/s); goal >= 80%%\n",
                moe_.expert_gflops, moe_.expert_flops * 1e-9, cfg_.swiglu ? 3 : 2, model * 1e-9,
                percent_of_peak(moe_.expert_gflops).c_str(), near > 0.0 ? 100.0 * moe_.expert_gflops / near : 0.0,
                near);
    std::printf("   routing, permutation, exchange and the layer's own C++: %.1f%% of the MoE layer (goal <= 10%%)\n",
                100.0 * moe_.overhead_share);
    if (step_.median_s > 0.0) {
      const double f = model_flops();
      std::printf("   the MoE run's whole step (3): %.1f ms, %.0f tokens/s, %.1f GFLOP/s with Megatron's MoE FLOPs,\n"
                  "   MFU %s of the run's sgemm peak\n",
                  step_.median_s * 1e3, static_cast<double>(tokens()) / step_.median_s, f / step_.median_s * 1e-9,
                  percent_of_peak(f / step_.median_s * 1e-9).c_str());
    }
    std::printf("\n");
  }

  void print_row(const char* name, double median_s, double best_s, double worst_s, double flops,
                 const char* mark) {
    const double gflops = flops / median_s * 1e-9;
    std::printf("   %-26s %10.1f %10.1f %10.1f %10.0f %9.1f", name, median_s * 1e3, best_s * 1e3,
                worst_s * 1e3, static_cast<double>(tokens()) / median_s, gflops);
    std::printf(" %7s%s\n", percent_of_peak(gflops).c_str(), mark);
  }

  void print_model_results() {
    const double f = model_flops();
    std::printf("\n   %-26s %10s %10s %10s %10s %9s %7s\n", "pass", "ms/iter", "best ms",
                "worst ms", "tokens/s", "GFLOP/s", "% peak");
    if (peak_)
      std::printf("   (%% peak: of the best sgemm sample so far, ! above it; section 5 has the whole run's)\n");
    std::printf("   %s\n", std::string(90, '-').c_str());
    print_row("forward+backward", fb_.median_s, fb_.best_s, fb_.worst_s, f, contended_mark(fb_));
    // The paper's count splits as forward 1/3, backward 2/3 of the model FLOPs.
    print_row("forward only (forward_loss)", fwd_.median_s, fwd_.best_s, fwd_.worst_s, f / 3.0,
              contended_mark(fwd_));
    const double bwd = fb_.median_s - fwd_.median_s;
    if (bwd > 0.0) {
      std::printf("   %-26s %10.1f %10s %10s %10s %9.1f", "backward (difference)", bwd * 1e3, "",
                  "", "", 2.0 * f / 3.0 / bwd * 1e-9);
      std::printf(" %7s\n", percent_of_peak(2.0 * f / 3.0 / bwd * 1e-9).c_str());
    }
    std::printf("   %s\n", std::string(90, '-').c_str());
    const double logits = logit_flops();
    if (cfg_.moe.enabled()) {  // the MoE formula is too long for one line with the rest
      std::printf("   model FLOPs per iteration: %.2f GFLOP with B*s = %" PRId64 ",\n     %s\n", f * 1e-9, tokens(),
                  flops_formula().c_str());
    } else {
      std::printf("   model FLOPs per iteration: %.2f GFLOP = %s with B*s = %" PRId64 "\n", f * 1e-9,
                  flops_formula().c_str(), tokens());
    }
    if (paper_shape()) {
      std::printf("     (the paper's count, the same with or without recomputation; forward = 1/3, "
                  "backward = 2/3 of it)\n");
    } else {
      std::printf("     (GptConfig::paper_flops: Megatron's num_floating_point_operations, the paper's count "
                  "with its\n"
                  "     grouped-query, SwiGLU and MoE terms; here a = %d, g = %d, dh = %d, ffn = %d%s%s;\n"
                  "     the same with or without recomputation; forward = 1/3, backward = 2/3 of it)\n",
                  cfg_.num_attention_heads, cfg_.query_groups(), cfg_.head_dim(), cfg_.ffn(),
                  cfg_.swiglu ? ", SwiGLU" : ", GeLU", moe_terms().c_str());
    }
    std::printf("     transformer layers %.1f%%, logits layer (6*B*s*h*V) %.1f%%\n",
                100.0 * (f - logits) / f, 100.0 * logits / f);
    if (cfg_.recompute != ptdp::Recompute::None) {
      const double exec = f + recompute_flops();
      std::printf("   executed FLOPs with %s recomputation: %.2f GFLOP (+%.1f%%), i.e. %.1f GFLOP/s "
                  "(%s peak) of hardware FLOPs\n",
                  ptdp::recompute_name(cfg_.recompute), exec * 1e-9,
                  100.0 * recompute_flops() / f, exec / fb_.median_s * 1e-9,
                  percent_of_peak(exec / fb_.median_s * 1e-9).c_str());
    }
    std::printf("   loss: %.4f (first iteration, warm-up included), %.4f (last); forward_loss %.4f; "
                "ln(V) = %.4f\n",
                loss_first_, loss_last_, fwd_loss_, std::log(static_cast<double>(cfg_.vocab_size)));
    if (!ok_) std::printf("   ERROR: a loss is not finite\n");
    const double peak_n = peak_ ? peak_->n() : 0.0;
    std::printf("   peak resident memory: %.2f GiB (includes the sgemm probe's %.2f GiB)\n\n",
                max_rss_ / (1024.0 * 1024.0 * 1024.0), 3.0 * 4.0 * peak_n * peak_n / (1024.0 * 1024.0 * 1024.0));
  }

  void print_footer() {
    const double wall = seconds_since(start_);
    const double cpu = cpu_seconds() - start_cpu_;
    wall_s_ = wall;
    cores_busy_ = wall > 0.0 ? cpu / wall : 0.0;
    std::printf("Total time: %.1f s wall, %.1f s CPU (%.2f cores busy on average, %d threads)\n",
                wall, cpu, cores_busy_, omp_get_max_threads());
    const double machine = machine_busy_seconds();
    if (machine >= 0.0 && start_machine_busy_ >= 0.0 && wall > 0.0) {
      other_cores_busy_ = std::max(0.0, machine - start_machine_busy_ - cpu) / wall;
      std::printf("Other processes kept %.2f cores busy on average during the run.\n",
                  other_cores_busy_);
    }
    if (any_contended_)
      std::printf("* marks rows timed while other processes kept more than %.2f cores busy: "
                  "their numbers are skewed, rerun on an idle machine.\n",
                  kContendedCores);
  }

  // -- JSON ------------------------------------------------------------------------------------

  static std::string stats_json(const Stats& st) {
    std::string s = "{\"ms_median\": " + json_number(st.median_s * 1e3) +
                    ", \"ms_best\": " + json_number(st.best_s * 1e3) +
                    ", \"ms_worst\": " + json_number(st.worst_s * 1e3) + ", \"ms_all\": [";
    for (std::size_t i = 0; i < st.times_s.size(); ++i)
      s += (i ? ", " : "") + json_number(st.times_s[i] * 1e3);
    s += "], \"other_cores_busy\": " +
         (st.other_cores >= 0.0 ? json_number(st.other_cores) : std::string("null"));
    return s;
  }

  /// around: the phase's bracketing samples (CPU runs), for frac_peak_around.
  std::string rates_json(const Stats& st, double flops, const Bracket* around = nullptr) const {
    const double gflops = flops / st.median_s * 1e-9;
    const double near = peak_ && around ? peak_->best_between(around->before, around->after) : 0.0;
    return ", \"tokens_per_s\": " + json_number(static_cast<double>(tokens()) / st.median_s) +
           ", \"model_gflops\": " + json_number(flops * 1e-9) + ", \"gflop_per_s\": " +
           json_number(gflops) + ", \"frac_peak\": " +
           (peak_gflops_ > 0.0 ? json_number(gflops / peak_gflops_) : std::string("null")) +
           (near > 0.0 ? ", \"peak_around\": " + json_number(near) + ", \"frac_peak_around\": " +
                             json_number(gflops / near)
                       : std::string()) +
           "}";
  }

  /// The per-op breakdown: the rows (ms per step), the pieces, the rest and every raw
  /// (phase, op, label) the profiler saw.
  std::string breakdown_json() const {
    const double step = prof_.total;
    std::string s = "{\"profiled_steps\": " + std::to_string(profile_steps_) +
                    ", \"step_ms\": " + json_number(step * 1e3) +
                    ", \"unprofiled_step_ms\": " + json_number(step_.median_s * 1e3) + ", \"rows\": [";
    bool first = true;
    double kernels = 0.0;
    for (const BreakdownRow& r : rows_) {
      if (r.calls == 0) continue;
      const double t = r.forward_s + r.backward_s;
      kernels += t;
      s += std::string(first ? "" : ", ") + "{\"name\": \"" + json_escape(r.name) +
           "\", \"forward_ms\": " + json_number(r.forward_s * 1e3) + ", \"backward_ms\": " +
           json_number(r.backward_s * 1e3) + ", \"ms\": " + json_number(t * 1e3) + ", \"share\": " +
           json_number(t / step) + ", \"optimizer_ms\": " + json_number(r.optimizer_s * 1e3) +
           ", \"other_ms\": " + json_number(r.other_s * 1e3) + ", \"calls_per_step\": " +
           json_number(static_cast<double>(r.calls) / profile_steps_) +
           ", \"gflop_per_s\": " + (r.flops > 0.0 && t > 0.0 ? json_number(r.flops / t * 1e-9) : "null") + "}";
      first = false;
    }
    const double rest = step - kernels - prof_.opt - prof_.zero - prof_.data;
    s += "], \"forward_backward_ms\": " + json_number(prof_.fb * 1e3) +
         ", \"outside_backend_calls_ms\": " + json_number((prof_.fb - prof_kernels_fb_s_) * 1e3) +
         ", \"optimizer_ms\": " + json_number(prof_.opt * 1e3) +
         ", \"optimizer_backend_calls_ms\": " + json_number(prof_kernels_opt_s_ * 1e3) +
         ", \"zero_grads_ms\": " + json_number(prof_.zero * 1e3) +
         ", \"data_ms\": " + json_number(prof_.data * 1e3) + ", \"rest_ms\": " + json_number(rest * 1e3) +
         ", \"rest_share\": " + json_number(rest / step) + ", \"ops\": [";
    for (std::size_t i = 0; i < prof_entries_.size(); ++i) {
      const auto& e = prof_entries_[i];
      s += std::string(i ? ", " : "") + "{\"phase\": \"" + ptdp::phase_name(e.phase) + "\", \"op\": \"" +
           ptdp::backend_op_name(e.op) + "\", \"label\": \"" + json_escape(e.label) +
           "\", \"calls_per_step\": " + json_number(static_cast<double>(e.calls) / profile_steps_) +
           ", \"ms_per_step\": " + json_number(e.seconds * 1e3 / profile_steps_) + "}";
    }
    return s + "]}";
  }

  /// The config's MoE fields (", \"moe\": {...}"), or "" for a dense model.
  std::string moe_config_json() const {
    if (!cfg_.moe.enabled()) return "";
    const ptdp::MoeConfig& m = cfg_.moe;
    return ", \"moe\": {\"num_experts\": " + std::to_string(m.num_experts) +
           ", \"router_topk\": " + std::to_string(m.router_topk) + ", \"ffn_hidden_size\": " +
           std::to_string(cfg_.moe_ffn()) + ", \"moe_layers\": " + std::to_string(cfg_.num_moe_layers()) +
           ", \"shared_expert_intermediate_size\": " + std::to_string(m.shared_expert_intermediate_size) +
           ", \"pre_softmax\": " + (m.pre_softmax ? "true" : "false") +
           ", \"aux_loss_coeff\": " + json_number(m.aux_loss_coeff) + "}";
  }

  /// Section 6: the MoE layer's passes, its time by row and the two goals' figures.
  std::string moe_layer_json() const {
    const double near = peak_ ? peak_->best_between(moe_around_.before, moe_around_.after) : peak_gflops_;
    std::string s = "{\"tokens\": " + std::to_string(moe_.tokens) + ", \"forward\": " + stats_json(moe_.fwd) + "}, \"backward_input\": " +
                    stats_json(moe_.bwd_input) + "}, \"backward_weight\": " + stats_json(moe_.bwd_weight) +
                    "}, \"layer\": " + stats_json(moe_.layer) + "}, \"load_min\": " + json_number(moe_.load_min) +
                    ", \"load_max\": " + json_number(moe_.load_max) +
                    ", \"profiled_ms\": " + json_number(moe_.profiled_s * 1e3) + ", \"rows_ms\": {";
    double calls = 0.0;
    for (int r = 0; r < kMoeRows; ++r) {
      calls += moe_.row_s[static_cast<std::size_t>(r)];
      s += std::string(r ? ", " : "") + "\"" + json_escape(kMoeRowNames[r]) +
           "\": " + json_number(moe_.row_s[static_cast<std::size_t>(r)] * 1e3);
    }
    s += "}, \"outside_backend_calls_ms\": " + json_number((moe_.profiled_s - calls) * 1e3) +
         ", \"exchange_ms\": 0, \"expert_gemm_gflop\": " + json_number(moe_.expert_flops * 1e-9) +
         ", \"expert_gemm_gflop_per_s\": " + json_number(moe_.expert_gflops) +
         ", \"expert_gemm_frac_peak\": " +
         (peak_gflops_ > 0.0 ? json_number(moe_.expert_gflops / peak_gflops_) : std::string("null")) +
         ", \"peak_around\": " + json_number(near) + ", \"expert_gemm_frac_peak_around\": " +
         (near > 0.0 ? json_number(moe_.expert_gflops / near) : std::string("null")) +
         ", \"overhead_share\": " + json_number(moe_.overhead_share) + "}";
    return s;
  }

  bool write_json() {
    const double flops = model_flops();
    std::string s = "{\n";
    s += "  \"benchmark\": \"bench_gpt\",\n";
    s += "  \"mode\": \"" + std::string(o_.quick ? "quick" : "full") + "\",\n";
    s += "  \"omp_threads\": " + std::to_string(omp_get_max_threads()) + ",\n";
    s += "  \"hardware_threads\": " + std::to_string(std::thread::hardware_concurrency()) + ",\n";
    s += "  \"openblas_threads\": " + std::to_string(blas_threads_) + ",\n";
    s += "  \"openblas_config\": \"" + json_escape(blas_config_) + "\",\n";
    s += "  \"openblas_core\": \"" + json_escape(blas_core_) + "\",\n";
    s += "  \"openblas_parallel\": \"" + json_escape(blas_parallel_) + "\",\n";
    s += "  \"load_average_1min\": " + (load1_ >= 0.0 ? json_number(load1_) : "null") + ",\n";
    s += "  \"optimizer\": \"" + std::string(o_.muon ? "muon" : "adam") + "\",\n";
    if (!muon_d_.empty()) {
      s += "  \"muon_newton_schulz\": [";
      for (std::size_t i = 0; i < muon_d_.size(); ++i) {
        const MuonD& m = muon_d_[i];
        s += std::string(i ? ", " : "") + "{\"d\": " + std::to_string(m.d) +
             ", \"gflop_per_rank\": " + json_number(m.worst_flops * 1e-9) +
             ", \"ms_per_rank_max\": " + json_number(m.worst_s * 1e3) +
             ", \"ms_per_rank_min\": " + json_number(m.best_s * 1e3) + "}";
      }
      s += "],\n";
    }
    s += "  \"model_preset\": " + (preset_ ? "\"" + json_escape(preset_->name) + "\"" : std::string("null")) + ",\n";
    s += "  \"config\": {\"num_layers\": " + std::to_string(cfg_.num_layers) +
         ", \"hidden_size\": " + std::to_string(cfg_.hidden_size) +
         ", \"num_attention_heads\": " + std::to_string(cfg_.num_attention_heads) +
         ", \"num_query_groups\": " + std::to_string(cfg_.query_groups()) +
         ", \"head_dim\": " + std::to_string(cfg_.head_dim()) +
         ", \"ffn_hidden_size\": " + std::to_string(cfg_.ffn()) +
         ", \"normalization\": \"" + ptdp::normalization_name(cfg_.normalization) +
         "\", \"swiglu\": " + (cfg_.swiglu ? "true" : "false") +
         ", \"position_embedding\": \"" + ptdp::position_embedding_name(cfg_.position_embedding) +
         "\", \"add_bias_linear\": " + (cfg_.add_bias_linear ? "true" : "false") +
         ", \"tie_embeddings\": " + (cfg_.tie_embeddings ? "true" : "false") +
         ", \"vocab_size\": " + std::to_string(cfg_.vocab_size) +
         ", \"padded_vocab\": " + std::to_string(cfg_.padded_vocab(1)) +
         ", \"seq_length\": " + std::to_string(cfg_.seq_length) +
         ", \"micro_batch\": " + std::to_string(b_) +
         ", \"hidden_dropout\": " + json_number(cfg_.hidden_dropout) +
         ", \"attention_dropout\": " + json_number(cfg_.attention_dropout) + ", \"recompute\": \"" +
         ptdp::recompute_name(cfg_.recompute) + "\"" + moe_config_json() + "},\n";
    s += "  \"parameters\": " + std::to_string(cfg_.parameter_count(1)) + ",\n";
    s += "  \"active_parameters\": " + std::to_string(cfg_.active_parameter_count(1)) + ",\n";
    s += "  \"tokens_per_iteration\": " + std::to_string(tokens()) + ",\n";
    s += "  \"warmup\": " + std::to_string(warmup_) + ",\n";
    s += "  \"iters\": " + std::to_string(iters_) + ",\n";
    s += "  \"flops_formula\": \"" + flops_formula() + ", without recomputation (GptConfig::paper_flops)\",\n";
    s += "  \"model_flops_per_iteration\": " + json_number(flops) + ",\n";
    s += "  \"executed_flops_per_iteration\": " + json_number(flops + recompute_flops()) + ",\n";
    if (peak_) {
      s += "  \"sgemm_peak\": " + peak_->json() + ",\n";
      s += "  \"peak_moved\": " + std::string(peak_->moved() ? "true" : "false") + ",\n";
    } else {
      s += "  \"sgemm_peak\": {\"gflop_per_s\": " + json_number(peak_gflops_) + ", \"datasheet\": true},\n";
    }
    s += "  \"above_peak\": " + std::string(above_peak_ ? "true" : "false") + ",\n";
    s += "  \"setup_s\": " + json_number(setup_s_) + ",\n";
    if (!fb_.times_s.empty()) {  // empty with --moe-layer-only
      s += "  \"forward_backward\": " + stats_json(fb_) + rates_json(fb_, flops, &fb_around_) + ",\n";
      s += "  \"forward_only\": " + stats_json(fwd_) + rates_json(fwd_, flops / 3.0, &fwd_around_) + ",\n";
    }
    if (!step_.times_s.empty()) {
      s += "  \"train_step\": " + stats_json(step_) + rates_json(step_, flops, &step_around_) + ",\n";
      s += "  \"train_step_pieces_ms\": {\"data\": " + json_number(step_data_.median_s * 1e3) +
           ", \"zero_grads\": " + json_number(step_zero_.median_s * 1e3) +
           ", \"forward_backward\": " + json_number(step_fb_.median_s * 1e3) +
           ", \"optimizer\": " + json_number(step_opt_.median_s * 1e3) + "},\n";
    }
    if (!prof_entries_.empty()) s += "  \"breakdown\": " + breakdown_json() + ",\n";
    if (moe_.ran) s += "  \"moe_layer\": " + moe_layer_json() + ",\n";
    if (mla_.ran) s += "  \"mla_layer\": " + mla_layer_json() + ",\n";
    s += "  \"loss_first\": " + json_number(loss_first_) + ",\n";
    s += "  \"loss_last\": " + json_number(loss_last_) + ",\n";
    s += "  \"max_rss_bytes\": " + json_number(max_rss_) + ",\n";
    s += "  \"wall_s\": " + json_number(wall_s_) + ",\n";
    s += "  \"cores_busy\": " + json_number(cores_busy_) + ",\n";
    s += "  \"other_cores_busy\": " +
         (other_cores_busy_ >= 0.0 ? json_number(other_cores_busy_) : "null") + "\n";
    s += "}\n";
    return ptdp::bench::write_text_file(o_.json_path, s);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return ptdp::bench::bench_main<Options>(argc, argv, "bench_gpt", parse_args,
                                          [](Options& o) { return Bench(std::move(o)).run(); });
}
