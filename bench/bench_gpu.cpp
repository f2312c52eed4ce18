// bench_gpu: GPU throughput of GPT training on one GPU, from its GEMMs to whole iterations.
//
// 1. cuBLASLt GEMMs. For GPT 124M (h=768, 12 heads), 350M (h=1024, 16 heads) and 1.3B (h=2048,
//    16 heads) at s=1024 and micro-batch b=4 and 8 (T = s*b tokens), every GEMM of one
//    transformer layer:
//      qkv   [T, h] x [3h, h]^T    proj [T, h] x [h, h]^T
//      fc1   [T, h] x [4h, h]^T    fc2  [T, 4h] x [h, 4h]^T
//    each as forward (fwd), input gradient (dgrad: dY W) and weight gradient (wgrad: dY^T X),
//    plus the attention GEMMs as strided batches over b*a (batch, head) pairs: scores Q K^T
//    ([s, dh] x [s, dh]^T) and context P V ([s, s] x [s, dh]).
//    Each shape runs in three precisions through cuBLASLt, row-major mapped onto cuBLASLt's
//    column-major as the CUDA backend does (C^T = B^T A^T):
//      fp32  CUBLAS_COMPUTE_32F, fp32 A/B/C        (exact fp32; no tensor cores; the backend's mode)
//      tf32  CUBLAS_COMPUTE_32F_FAST_TF32, fp32 A/B/C
//      bf16  CUBLAS_COMPUTE_32F, bf16 A/B/C        (fp32 accumulate)
//    and reports TFLOP/s (2 m n k batch flops per GEMM, 1e12) with the fraction of the H200's
//    dense peaks: 67 TFLOP/s fp32 (non-tensor), 494 tf32, 989 bf16.
//
// 2. The fused causal attention kernels (kernels/cuda/flash_attention.cuh) in bf16 at s=1024,
//    b=8 for the attention shapes of the same models: 124M (12 heads, dh 64), 350M (16 heads,
//    dh 64) and 1.3B (16 heads, dh 128), and at s=2048, b=4 for Llama-3.2-1B's grouped-query
//    attention (32 query heads sharing 8 key/value heads, dh 64; AttentionDesc::groups),
//    forward and backward, in TFLOP/s of the causal work: forward 2 * 2 * b * heads * s^2 *
//    dh / 2 (QK^T and PV below the diagonal, heads = query heads), backward 2.5x.
//
// 3. Training: whole iterations of the three GPTs (V=50257, s=1024, b=8 or --train-batch) and
//    of Llama-3.2-1B (ptdp_gpt_options_from_preset("llama-3.2-1b"): 16 layers, h 2048, 32
//    heads in 8 query groups, SwiGLU ffn 8192, RMSNorm, RoPE with Llama 3.2's scaling, no
//    biases, V=128256, tied; at s=2048, b=4 or --train-batch) and of OLMoE-1B-7B's first 2 layers
//    (its preset: h 2048, 16 heads, 64 experts, top-8, expert ffn 1024 with SwiGLU, q/k norms,
//    V=50304; at s=2048, b=4: bench_gpt --moe's run on the GPU), bf16 unless --train-precision
//    says f16 or f32, through the public C API (libptdp), as a user program would run them: a
//    runtime of one process without MPI, default groups, the model on the GPU (attention AUTO:
//    the flash kernel), AdamW (lr 1e-4; f16 with a constant loss scale of 1024) and a 1F1B
//    schedule with p = m = v = 1, then ptdp_train_iteration on random token ids with next-token
//    labels, 2 warm-up and --train-iters timed iterations. ptdp_train_iteration returns the
//    loss on the host, so each call is timed with the wall clock (the optimizer's last update
//    kernels may still run when it returns; they delay the next call, so in the steady state
//    every timed call holds one iteration's work). Reports ms/iteration (median and best),
//    tokens/s, model TFLOP/s with the library's one count of the model FLOPs per iteration
//    (ptdp_gpt_flops on the options the model was built from: Megatron-LM's
//    num_floating_point_operations, i.e. the paper's 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//    (Narayanan et al. 2021) for the GPTs, with the grouped-query and SwiGLU terms for Llama:
//    12 B s l h^2 ((1 + g/a + s/h) a dh/h + (3/2) ffn/h) + 6 B s h V), MFU against 989
//    TFLOP/s (bf16/f16) or 67 (f32), the first and last loss, and the device memory the case
//    took (cudaMemGetInfo before and after: ptdp_memory_stats counts host memory only). Every
//    handle is destroyed before the next model is built. A failing call or a non-finite loss
//    makes the exit status 1.
//
// 4. MoE experts (--filter moe) at OLMoE-1B-7B's shape (h 2048, expert ffn 1024 with SwiGLU, 64
//    experts, top-8) for 8192 tokens (65536 expert rows) in bf16 through the CUDA backend
//    (kernels/cuda/): the six grouped GEMMs of the two expert linears (forward, dgrad, wgrad
//    into fp32 gradients) via Backend::grouped_gemm, each beside one Backend::gemm of the same
//    FLOPs (every row on one expert) in TFLOP/s; then the router (fp32), the routing sort (it
//    returns the counts to the host: its time includes that wait), dispatch and combine with
//    their backwards, and their share of the layer's time (those, the GEMMs and SwiGLU).
//
// GEMMs and attention are timed with CUDA events around a loop of calls on one stream, after
// one warm-up call; the loop length is calibrated so one run lasts at least min_time; the
// median of `runs` runs is reported. Without a CUDA device the program says so and exits 0
// (benchmarks are not tests).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/half.h"
#include "bench/bench_common.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_probe.h"
#include "kernels/cuda/flash_attention.cuh"
#include "ptdp/ptdp.h"

namespace {

using ptdp::bench::Clock;
using ptdp::bench::grouped;
using ptdp::bench::json_escape;
using ptdp::bench::json_number;
using ptdp::bench::seconds_since;
using ptdp::bench::splitmix64;

constexpr double kPeakFp32 = 67.0, kPeakTf32 = 494.0, kPeakBf16 = 989.0;  // H200 TFLOP/s, dense
constexpr std::size_t kWorkspaceBytes = 32u << 20;

struct Options : ptdp::bench::CaseOptions {
  int train_batch = 0;                           // --train-batch; 0: 8, quick 4 (Llama: 4)
  bool train_batch_given = false;                // --train-batch also sets the Llama case's b
  int train_iters = 0;                           // --train-iters; 0: 10, quick 3
  ptdp_dtype train_precision = PTDP_DTYPE_BF16;  // --train-precision
  std::string exclude;                           // --exclude: cases whose name contains it are skipped
};

/// Whether a case of this name runs: --filter's substring in it, --exclude's not.
bool selected(const Options& o, const std::string& name) {
  return (o.filter.empty() || name.find(o.filter) != std::string::npos) &&
         (o.exclude.empty() || name.find(o.exclude) == std::string::npos);
}

constexpr int kTrainWarmup = 2;  // untimed iterations before the timed ones
// The Llama case: Llama-3.2-1B's preset at s = 2048, b = 4 (the GPT cases' 8192 tokens per
// iteration at b = 8), unless --train-batch says otherwise.
constexpr const char* kLlamaPreset = "llama-3.2-1b";
constexpr int32_t kLlamaSeq = 2048, kLlamaBatch = 4;
// The MoE case, bench_gpt --moe's run on the GPU: OLMoE-1B-7B's preset (h 2048, 64 experts, top-8,
// expert ffn 1024) with 2 of its 16 layers, at the Llama case's s and b.
constexpr const char* kMoePreset = "olmoe-1b-7b";
constexpr int32_t kMoeLayers = 2;

void print_help(const char* argv0) {
  ptdp::bench::print_help(
      argv0,
      "cuBLASLt GEMM throughput (TFLOP/s and fraction of the H200's peak) in fp32, tf32 and\n"
      "bf16 at the GEMM shapes of GPT 124M, 350M and 1.3B (s=1024, b=4 and 8): every GEMM of a\n"
      "transformer layer forward and backward, and the attention score/context batches; then the\n"
      "fused causal attention kernels forward and backward in bf16 (s=1024, b=8; and Llama-3.2-1B's\n"
      "grouped-query attention at s=2048, b=4); then whole training iterations of the three GPTs\n"
      "(s=1024, V=50257) and of Llama-3.2-1B (its preset, s=2048) through the C API\n"
      "(ptdp_train_iteration): ms/iteration, tokens/s, model TFLOP/s (ptdp_gpt_flops), MFU,\n"
      "losses and device memory.\n"
      "\n"
      "Options:\n",
      {{"--quick",
        "GPT 124M only (GEMMs at b=4, training at b=4 for 3 iterations),\n"
        "short timing"},
       {"--filter SUBSTR",
        "run only cases whose name contains SUBSTR (names look like\n"
        "124M/b4/fc1.wgrad, 1.3B/b8/attn.score, 350M/b8/attn.flash.bwd,\n"
        "llama-3.2-1b/b4/attn.flash.fwd, 1.3B/b8/train, llama-3.2-1b/b4/train,\n"
        "moe/grouped.fc1.fwd, olmoe-1b-7b.l2/b4/train; 'train' selects the\n"
        "training cases only, 'llama' the Llama ones, 'moe' the MoE experts\n"
        "and the MoE training case)"},
       {"--exclude SUBSTR", "skip the cases whose name contains SUBSTR (e.g. moe)"},
       {"--runs N",
        "timed runs per GEMM/attention case (default 5, quick 3); the median\n"
        "is reported"},
       {"--min-time S",
        "seconds each GEMM/attention run lasts at least (default 0.1,\n"
        "quick 0.02)"},
       {"--train-batch N",
        "micro-batch size b of the training cases (default 8, quick 4;\n"
        "the Llama case at s=2048: 4)"},
       {"--train-iters N",
        "timed training iterations after 2 warm-up ones (default 10,\n"
        "quick 3)"},
       {"--train-precision P",
        "bf16 (default), f16 (constant loss scale 1024) or f32 (MFU\n"
        "against 67 TFLOP/s fp32 instead of 989)"}});
}

/// "bf16", "f16", "f32" (also "fp16", "fp32") -> the model precision; false for anything else.
bool parse_precision(const std::string& v, ptdp_dtype& out) {
  if (v == "bf16") {
    out = PTDP_DTYPE_BF16;
  } else if (v == "f16" || v == "fp16") {
    out = PTDP_DTYPE_F16;
  } else if (v == "f32" || v == "fp32") {
    out = PTDP_DTYPE_F32;
  } else {
    return false;
  }
  return true;
}

const char* dtype_name(ptdp_dtype d) {
  return d == PTDP_DTYPE_BF16 ? "bf16" : (d == PTDP_DTYPE_F16 ? "f16" : "f32");
}

bool parse_args(int argc, char** argv, Options& o, int& exit_code) {
  if (!ptdp::bench::read_flags(argc, argv, print_help, exit_code, [&](ptdp::bench::Args& args) {
        bool ok = true;
        if (ptdp::bench::read_case_flag(args, o, ok, exit_code)) return ok;
        const std::string& f = args.flag();
        if (f == "--exclude") return args.require_value(o.exclude, exit_code);
        if (f == "--train-batch") return args.int_value(o.train_batch, 1, exit_code);
        if (f == "--train-iters") return args.int_value(o.train_iters, 1, exit_code);
        if (f == "--train-precision") {
          std::string v;
          if (!args.require_value(v, exit_code)) return false;
          return parse_precision(v, o.train_precision) ||
                 args.fail(exit_code,
                           "--train-precision must be bf16, f16 or f32, got '" + v + "'");
        }
        return args.unknown(exit_code);
      })) {
    return false;
  }
  if (o.runs == 0) o.runs = o.quick ? 3 : 5;
  if (o.min_time < 0.0) o.min_time = o.quick ? 0.02 : 0.1;
  o.train_batch_given = o.train_batch != 0;
  if (o.train_batch == 0) o.train_batch = o.quick ? 4 : 8;
  if (o.train_iters == 0) o.train_iters = o.quick ? 3 : 10;
  return true;
}

// ---- cases ------------------------------------------------------------------------------------

/// One row-major GEMM, as GemmDesc states it: C[m, n] = op(A) op(B) per batch entry.
struct Case {
  std::string name;  // 124M/b4/qkv.fwd
  std::string model;
  int b = 0;
  std::string gemm;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) *
           static_cast<double>(batch);
  }
  int64_t a_elems() const { return batch * m * k; }
  int64_t b_elems() const { return batch * k * n; }
  int64_t c_elems() const { return batch * m * n; }
};

struct Model {
  const char* name;
  int64_t h, heads;
};

std::vector<Case> make_cases(const Options& o) {
  // 1.3B has 16 heads of dh 128 (GPT-3 1.3B), as in the attention and training cases.
  const Model models[] = {{"124M", 768, 12}, {"350M", 1024, 16}, {"1.3B", 2048, 16}};
  const int64_t s = 1024;
  std::vector<Case> out;
  for (const Model& md : models) {
    if (o.quick && std::string(md.name) != "124M") continue;
    for (const int b : {4, 8}) {
      if (o.quick && b != 4) continue;
      const int64_t t = s * b, h = md.h, dh = h / md.heads, ba = b * md.heads;
      const auto add = [&](const char* gemm, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                           int64_t batch = 1, int64_t sa = 0, int64_t sb = 0, int64_t sc = 0) {
        Case c;
        c.model = md.name;
        c.b = b;
        c.gemm = gemm;
        c.name = std::string(md.name) + "/b" + std::to_string(b) + "/" + gemm;
        c.trans_a = ta;
        c.trans_b = tb;
        c.m = m;
        c.n = n;
        c.k = k;
        c.batch = batch;
        c.stride_a = sa;
        c.stride_b = sb;
        c.stride_c = sc;
        if (selected(o, c.name)) out.push_back(c);
      };
      // Linear layer Y[T, out] = X[T, in] W[out, in]^T; dX = dY W; dW = dY^T X.
      const auto linear = [&](const char* name, int64_t in, int64_t outf) {
        const std::string n(name);
        add((n + ".fwd").c_str(), false, true, t, outf, in);
        add((n + ".dgrad").c_str(), false, false, t, in, outf);
        add((n + ".wgrad").c_str(), true, false, outf, in, t);
      };
      linear("qkv", h, 3 * h);
      linear("proj", h, h);
      linear("fc1", h, 4 * h);
      linear("fc2", 4 * h, h);
      add("attn.score", false, true, s, s, dh, ba, s * dh, s * dh, s * s);
      add("attn.context", false, false, s, dh, s, ba, s * s, s * dh, s * dh);
    }
  }
  return out;
}

// ---- fused attention cases ---------------------------------------------------------------------

/// One pass of the fused causal attention over [s, b, groups, heads/groups + 2, dh] bf16
/// activations ([s, b, heads, 3, dh] for multi-head attention, groups = heads).
struct AttnCase {
  std::string name;  // 1.3B/b8/attn.flash.fwd
  std::string model;
  int b = 0;
  int64_t s = 0, heads = 0, groups = 0, dh = 0;  // heads: query heads; groups: key/value heads
  bool backward = false;
  /// The causal work: two [s, s, dh] products per (batch, head) pair, half of them masked;
  /// the backward's five products (two of them recomputing the forward's) count 2.5x.
  double flops() const {
    const double fwd = 2.0 * 2.0 * b * static_cast<double>(heads) * static_cast<double>(s) *
                       static_cast<double>(s) * static_cast<double>(dh) / 2.0;
    return backward ? 2.5 * fwd : fwd;
  }
};

std::vector<AttnCase> make_attention_cases(const Options& o) {
  struct Shape {
    const char* name;
    int64_t heads, groups, dh, s;
    int b;
  };
  const Shape shapes[] = {{"124M", 12, 12, 64, 1024, 8},
                          {"350M", 16, 16, 64, 1024, 8},
                          {"1.3B", 16, 16, 128, 1024, 8},
                          {kLlamaPreset, 32, 8, 64, kLlamaSeq, kLlamaBatch}};
  std::vector<AttnCase> out;
  for (const Shape& sh : shapes) {
    if (o.quick && std::string(sh.name) != "124M") continue;
    for (const bool backward : {false, true}) {
      AttnCase c;
      c.model = sh.name;
      c.b = sh.b;
      c.s = sh.s;
      c.heads = sh.heads;
      c.groups = sh.groups;
      c.dh = sh.dh;
      c.backward = backward;
      c.name = std::string(sh.name) + "/b" + std::to_string(sh.b) + "/attn.flash." + (backward ? "bwd" : "fwd");
      if (selected(o, c.name)) out.push_back(c);
    }
  }
  return out;
}

// ---- training cases ----------------------------------------------------------------------------

/// Whole training iterations of one model through the C API.
struct TrainCase {
  std::string name;    // 1.3B/b8/train, llama-3.2-1b/b4/train
  std::string model;   // 1.3B, llama-3.2-1b
  std::string preset;  // the ptdp_gpt_options_from_preset name; empty for the GPTs
  /// The model exactly as ptdp_model_create gets it (device and precision included), so the
  /// FLOPs below are counted for the model that runs.
  ptdp_gpt_options options{};
  std::string error;  // set when the options could not be made: the case fails with it
  int32_t b = 0;
  int64_t tokens() const { return static_cast<int64_t>(b) * options.seq_length; }
  /// The model FLOPs of one iteration (one microbatch of b sequences), from the library's one
  /// count (ptdp_gpt_flops, i.e. GptConfig::paper_flops: the paper's 72 B s l h^2 (1 + s/(6h) +
  /// V/(12 l h)) for a GPT, with Megatron's grouped-query and SwiGLU terms for Llama); 0 when
  /// the library refuses the options.
  double flops() const {
    double model = 0.0;
    return ptdp_gpt_flops(&options, b, &model, nullptr) == PTDP_SUCCESS ? model : 0.0;
  }
  ptdp_dtype precision() const { return options.precision; }
  /// The dense peak MFU is measured against: 989 TFLOP/s for bf16/f16 tensor cores, 67 for the
  /// exact fp32 the f32 engine computes in.
  double peak_tflops() const { return precision() == PTDP_DTYPE_F32 ? kPeakFp32 : kPeakBf16; }
};

std::vector<TrainCase> make_train_cases(const Options& o) {
  struct Shape {
    const char* name;
    const char* preset;  // nullptr: a GPT of the shape below (V = 50257, s = 1024)
    int32_t layers, hidden, heads;  // a preset's: layers > 0 keeps its first layers, the rest unused
  };
  const Shape shapes[] = {{"124M", nullptr, 12, 768, 12},
                          {"350M", nullptr, 24, 1024, 16},
                          {"1.3B", nullptr, 24, 2048, 16},
                          {kLlamaPreset, kLlamaPreset, 0, 0, 0},
                          {"olmoe-1b-7b.l2", kMoePreset, kMoeLayers, 0, 0}};
  std::vector<TrainCase> out;
  for (const Shape& sh : shapes) {
    if (o.quick && std::string(sh.name) != "124M") continue;
    TrainCase c;
    c.model = sh.name;
    ptdp_gpt_options_init(&c.options);
    if (sh.preset != nullptr) {
      // The preset's shape and architecture at s = 2048 (not its 8192 or 4096), without dropout
      // as Llama and the MoE models train.
      c.preset = sh.preset;
      if (ptdp_gpt_options_from_preset(sh.preset, &c.options) != PTDP_SUCCESS) {
        c.error = std::string("ptdp_gpt_options_from_preset: ") + ptdp_last_error();
      }
      c.options.seq_length = kLlamaSeq;
      if (sh.layers > 0) c.options.num_layers = sh.layers;  // the MoE case: the first layers only
      c.options.hidden_dropout = 0.0f;
      c.options.attention_dropout = 0.0f;
      c.b = o.train_batch_given ? o.train_batch : kLlamaBatch;
    } else {
      c.options.num_layers = sh.layers;
      c.options.hidden_size = sh.hidden;
      c.options.num_attention_heads = sh.heads;
      c.options.vocab_size = 50257;
      c.options.seq_length = 1024;
      c.b = o.train_batch;
    }
    c.options.device = PTDP_DEVICE_CUDA;
    c.options.precision = o.train_precision;
    c.options.attention = PTDP_ATTENTION_AUTO;  // the flash kernel for bf16/f16 at dh 64 and 128
    c.name = std::string(sh.name) + "/b" + std::to_string(c.b) + "/train";
    if (selected(o, c.name)) out.push_back(c);
  }
  return out;
}

// ---- cuBLASLt ---------------------------------------------------------------------------------

enum class Precision { Fp32, Tf32, Bf16 };
constexpr Precision kPrecisions[] = {Precision::Fp32, Precision::Tf32, Precision::Bf16};

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32:
      return "fp32";
    case Precision::Tf32:
      return "tf32";
    case Precision::Bf16:
      return "bf16";
  }
  return "?";
}

double peak_of(Precision p) {
  return p == Precision::Fp32 ? kPeakFp32 : (p == Precision::Tf32 ? kPeakTf32 : kPeakBf16);
}

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

struct Result {
  const Case* c = nullptr;
  Precision p = Precision::Fp32;
  bool ok = false;
  std::string why;  // when !ok
  double ms = 0.0, best_ms = 0.0, tflops = 0.0;
};

struct AttnResult {
  const AttnCase* c = nullptr;
  bool ok = false;
  std::string why;  // when !ok
  double ms = 0.0, best_ms = 0.0, tflops = 0.0;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {}
  ~Bench() {
    for (void* p : {a32_, b32_, c32_, a16_, b16_, c16_, ws_}) {
      if (p != nullptr) cudaFree(p);
    }
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  bool setup(const std::vector<Case>& cases) {
    int64_t na = 1, nb = 1, nc = 1;
    for (const Case& c : cases) {
      na = std::max(na, c.a_elems());
      nb = std::max(nb, c.b_elems());
      nc = std::max(nc, c.c_elems());
    }
    if (!cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !cuda_ok(cudaEventCreate(&start_), "cudaEventCreate") ||
        !cuda_ok(cudaEventCreate(&stop_), "cudaEventCreate")) {
      return false;
    }
    if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasLtCreate failed\n");
      return false;
    }
    const auto bytes = [](int64_t n, std::size_t e) { return static_cast<std::size_t>(n) * e; };
    if (!cuda_ok(cudaMalloc(&a32_, bytes(na, 4)), "cudaMalloc A") ||
        !cuda_ok(cudaMalloc(&b32_, bytes(nb, 4)), "cudaMalloc B") ||
        !cuda_ok(cudaMalloc(&c32_, bytes(nc, 4)), "cudaMalloc C") ||
        !cuda_ok(cudaMalloc(&a16_, bytes(na, 2)), "cudaMalloc A bf16") ||
        !cuda_ok(cudaMalloc(&b16_, bytes(nb, 2)), "cudaMalloc B bf16") ||
        !cuda_ok(cudaMalloc(&c16_, bytes(nc, 2)), "cudaMalloc C bf16") ||
        !cuda_ok(cudaMalloc(&ws_, kWorkspaceBytes), "cudaMalloc workspace")) {
      return false;
    }
    // Random operands in [-1, 1) (tensor-core power and clocks depend on the data), copied
    // tile by tile from one host tile; C starts at zero.
    constexpr std::size_t kTile = 1u << 22;
    std::vector<float> tile(kTile);
    std::vector<uint16_t> tile16(kTile);
    uint64_t state = 0x5eed;
    for (std::size_t i = 0; i < kTile; ++i) {
      tile[i] = static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);
      tile16[i] = ptdp::f32_to_bf16(tile[i]);
    }
    const auto fill = [&](void* dst, int64_t n, const void* src, std::size_t esize) {
      for (int64_t off = 0; off < n; off += static_cast<int64_t>(kTile)) {
        const auto cnt =
            static_cast<std::size_t>(std::min<int64_t>(static_cast<int64_t>(kTile), n - off));
        if (!upload(static_cast<char*>(dst) + static_cast<std::size_t>(off) * esize, src,
                    cnt * esize)) {
          return false;
        }
      }
      return true;
    };
    return fill(a32_, na, tile.data(), 4) && fill(b32_, nb, tile.data(), 4) &&
           fill(a16_, na, tile16.data(), 2) && fill(b16_, nb, tile16.data(), 2) &&
           cuda_ok(cudaMemsetAsync(c32_, 0, bytes(nc, 4), stream_), "cudaMemsetAsync") &&
           cuda_ok(cudaMemsetAsync(c16_, 0, bytes(nc, 2), stream_), "cudaMemsetAsync") &&
           cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  Result run(const Case& c, Precision p) {
    Result r;
    r.c = &c;
    r.p = p;
    const bool bf16 = p == Precision::Bf16;
    const cudaDataType_t dt = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t ct =
        p == Precision::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    const auto cleanup = [&] {
      if (pref) cublasLtMatmulPreferenceDestroy(pref);
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (lc) cublasLtMatrixLayoutDestroy(lc);
      if (op) cublasLtMatmulDescDestroy(op);
    };
    const auto fail = [&](const std::string& why) {
      r.why = why;
      cleanup();
      return r;
    };
    // Row-major C[m, n] = op(A) op(B) as column-major C^T = op(B)^T op(A)^T: cuBLASLt's first
    // operand is our B, its second our A (see kernels/cuda/gemm_cublaslt.cu).
    const cublasOperation_t opa = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const int64_t lda = c.trans_a ? c.m : c.k, ldb = c.trans_b ? c.k : c.n, ldc = c.n;
    if (cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&la, dt, u(c.trans_b ? c.k : c.n), u(c.trans_b ? c.n : c.k),
                                   ldb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lb, dt, u(c.trans_a ? c.m : c.k), u(c.trans_a ? c.k : c.m),
                                   lda) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lc, dt, u(c.n), u(c.m), ldc) != CUBLAS_STATUS_SUCCESS) {
      return fail("descriptor setup failed");
    }
    if (c.batch > 1) {
      const auto count = static_cast<int32_t>(c.batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> ls[] = {
          {la, c.stride_b}, {lb, c.stride_a}, {lc, c.stride_c}};
      for (const auto& [l, stride] : ls) {
        if (cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof count) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &stride, sizeof stride) != CUBLAS_STATUS_SUCCESS) {
          return fail("batch layout setup failed");
        }
      }
    }
    const uint64_t ws = kWorkspaceBytes;
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoGetHeuristic(lt_, op, la, lb, lc, lc, pref, 1, &heur, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      return fail("no cuBLASLt algorithm");
    }
    const void* pa = bf16 ? b16_ : b32_;  // cuBLASLt's A is our B
    const void* pb = bf16 ? a16_ : a32_;
    void* pc = bf16 ? c16_ : c32_;
    const float alpha = 1.0f, beta = 0.0f;
    const auto call = [&] {
      return cublasLtMatmul(lt_, op, &alpha, pa, la, pb, lb, &beta, pc, lc, pc, lc, &heur.algo, ws_,
                            kWorkspaceBytes, stream_);
    };
    if (!time_calls([&] { return call() == CUBLAS_STATUS_SUCCESS; }, r.ms, r.best_ms)) {
      return fail("cublasLtMatmul failed");
    }
    r.tflops = c.flops() / (r.ms * 1e-3) / 1e12;
    r.ok = true;
    cleanup();
    return r;
  }

  /// Times one fused attention pass on freshly allocated random bf16 activations.
  AttnResult run_attention(const AttnCase& c) {
    AttnResult r;
    r.c = &c;
    ptdp::AttentionDesc d;
    d.s = c.s;
    d.b = c.b;
    d.heads = c.heads;
    d.groups = c.groups;
    d.dh = c.dh;
    d.scale = 1.0f / std::sqrt(static_cast<float>(c.dh));
    const int64_t rows = c.s * c.b * c.heads;  // query rows
    // qkv [s, b, groups, heads/groups + 2, dh]: every query head, and per group one key and one value.
    const auto n_qkv = static_cast<std::size_t>(c.s * c.b * (c.heads + 2 * c.groups) * c.dh);
    const auto n_ctx = static_cast<std::size_t>(rows * c.dh);
    const auto n_lse = static_cast<std::size_t>(rows);
    void *qkv = nullptr, *ctx = nullptr, *dctx = nullptr, *dqkv = nullptr;
    float *lse = nullptr, *delta = nullptr;
    const auto cleanup = [&] {
      for (void* p : {qkv, ctx, dctx, dqkv, static_cast<void*>(lse), static_cast<void*>(delta)}) {
        if (p != nullptr) cudaFree(p);
      }
    };
    const auto fail = [&](const std::string& why) {
      r.why = why;
      cleanup();
      return r;
    };
    if (!cuda_ok(cudaMalloc(&qkv, n_qkv * 2), "cudaMalloc qkv") ||
        !cuda_ok(cudaMalloc(&ctx, n_ctx * 2), "cudaMalloc ctx") ||
        !cuda_ok(cudaMalloc(&dctx, n_ctx * 2), "cudaMalloc dctx") ||
        !cuda_ok(cudaMalloc(&dqkv, n_qkv * 2), "cudaMalloc dqkv") ||
        !cuda_ok(cudaMalloc(&lse, n_lse * 4), "cudaMalloc lse") ||
        !cuda_ok(cudaMalloc(&delta, n_lse * 4), "cudaMalloc delta")) {
      return fail("out of device memory");
    }
    // Random activations in [-1, 1) (the softmax then is neither one-hot nor uniform).
    uint64_t state = 0xa77e;
    std::vector<uint16_t> host(n_qkv);
    for (auto& x : host) {
      x = ptdp::f32_to_bf16(
          static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0));
    }
    if (!upload(qkv, host.data(), n_qkv * 2) || !upload(dctx, host.data(), n_ctx * 2)) {
      return fail("upload failed");
    }
    const auto call = [&] {
      try {
        if (c.backward) {
          ptdp::cuda::flash_attention_backward(d, qkv, ctx, lse, dctx, dqkv, delta,
                                               ptdp::DType::BF16, stream_);
        } else {
          ptdp::cuda::flash_attention_forward(d, qkv, ctx, lse, ptdp::DType::BF16, stream_);
        }
        return true;
      } catch (const std::exception& e) {
        r.why = e.what();
        return false;
      }
    };
    try {
      // The backward reads the forward's ctx and lse.
      ptdp::cuda::flash_attention_forward(d, qkv, ctx, lse, ptdp::DType::BF16, stream_);
    } catch (const std::exception& e) {
      return fail(e.what());
    }
    if (!time_calls(call, r.ms, r.best_ms)) return fail(r.why.empty() ? "timing failed" : r.why);
    r.tflops = c.flops() / (r.ms * 1e-3) / 1e12;
    r.ok = true;
    cleanup();
    return r;
  }

 private:
  /// Copies host bytes to the device on stream_ and waits for them: the kernels run on stream_,
  /// a non-blocking stream that a plain cudaMemcpy (legacy stream; for pageable memory it may
  /// return before the DMA lands) would not be ordered with.
  bool upload(void* dst, const void* src, std::size_t bytes) {
    return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync") &&
           cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  /// Median and best milliseconds per call of `call` (true: issued) over o_.runs timed loops,
  /// each calibrated to last at least o_.min_time, after one warm-up call. False on failure.
  template <class Call>
  bool time_calls(const Call& call, double& median_ms, double& best_ms) {
    // Times `iters` back-to-back calls; < 0 on failure.
    const auto time_ms = [&](int iters) -> double {
      if (cudaEventRecord(start_, stream_) != cudaSuccess) return -1.0;
      for (int i = 0; i < iters; ++i) {
        if (!call()) return -1.0;
      }
      if (cudaEventRecord(stop_, stream_) != cudaSuccess ||
          cudaEventSynchronize(stop_) != cudaSuccess)
        return -1.0;
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) return -1.0;
      return static_cast<double>(ms);
    };
    if (time_ms(1) < 0.0) return false;  // warm-up
    const double one = time_ms(1);
    if (one < 0.0) return false;
    const int iters =
        static_cast<int>(std::clamp(o_.min_time * 1e3 / std::max(one, 1e-3), 1.0, 10000.0));
    std::vector<double> per_call;
    for (int run = 0; run < o_.runs; ++run) {
      const double ms = time_ms(iters);
      if (ms < 0.0) return false;
      per_call.push_back(ms / iters);
    }
    std::sort(per_call.begin(), per_call.end());
    median_ms = per_call[per_call.size() / 2];
    best_ms = per_call.front();
    return true;
  }

  const Options& o_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void *a32_ = nullptr, *b32_ = nullptr, *c32_ = nullptr;
  void *a16_ = nullptr, *b16_ = nullptr, *c16_ = nullptr, *ws_ = nullptr;
};

std::string cell(const Result& r) {
  char buf[64];
  if (!r.ok) {
    std::snprintf(buf, sizeof buf, "%16s", "n/a");
  } else {
    std::snprintf(buf, sizeof buf, "%8.1f (%4.1f%%)", r.tflops, 100.0 * r.tflops / peak_of(r.p));
  }
  return buf;
}

// ---- training through the C API -----------------------------------------------------------------

struct TrainResult {
  const TrainCase* c = nullptr;
  bool ok = false;
  std::string why;  // when !ok: the failing call and ptdp_last_error(), or the bad loss
  int64_t parameters = 0;
  double setup_s = 0.0;              // runtime, groups, model (initialisation), optimizer
  std::vector<double> iteration_ms;  // the timed iterations
  std::vector<float> losses;         // every iteration, warm-up included
  int64_t skipped = 0;               // optimizer steps skipped for non-finite gradients
  double ms = 0.0, best_ms = 0.0, tokens_per_s = 0.0, tflops = 0.0;
  bool mem_ok = false;                // cudaMemGetInfo answered
  int64_t mem_new = 0, mem_held = 0;  // device bytes in use after the last iteration minus
                                      // before the case / before the first case
};

/// Device memory in use on the current device by every process, in bytes; < 0 on failure.
double device_used_bytes() {
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return -1.0;
  }
  return static_cast<double>(total_b - free_b);
}

/// The C API handles of one training case, destroyed in the order their dependencies need.
struct TrainHandles {
  ptdp_runtime runtime = nullptr;
  ptdp_groups groups = nullptr;
  ptdp_model model = nullptr;
  ptdp_optimizer optimizer = nullptr;
  ptdp_schedule schedule = nullptr;
  TrainHandles() = default;
  TrainHandles(const TrainHandles&) = delete;
  TrainHandles& operator=(const TrainHandles&) = delete;
  ~TrainHandles() { release(nullptr); }

  /// Destroys every handle (NULL ones are accepted); with `why`, the first failure's message.
  bool release(std::string* why) {
    bool ok = true;
    const auto check = [&](ptdp_status st) {
      if (st != PTDP_SUCCESS && ok) {
        ok = false;
        if (why != nullptr) {
          *why = std::string(ptdp_last_error()) + " [" + ptdp_status_string(st) + "]";
        }
      }
    };
    check(ptdp_optimizer_destroy(optimizer));
    optimizer = nullptr;
    check(ptdp_model_destroy(model));
    model = nullptr;
    check(ptdp_schedule_destroy(schedule));
    schedule = nullptr;
    check(ptdp_groups_destroy(groups));
    groups = nullptr;
    check(ptdp_runtime_destroy(runtime));
    runtime = nullptr;
    return ok;
  }
};

/// Trains c.b sequences per iteration on the runtime's GPU; `baseline` is the device memory in
/// use when the training section started. Every failure is reported in the result.
TrainResult run_training(const TrainCase& c, int iters, double baseline) {
  TrainResult r;
  r.c = &c;
  // ptdp_last_error() must be read right after the failing call: the next call clears it.
  const auto api = [&](ptdp_status st) {
    if (st == PTDP_SUCCESS) return true;
    r.why = std::string(ptdp_last_error()) + " [" + ptdp_status_string(st) + "]";
    return false;
  };
  if (!c.error.empty()) {
    r.why = c.error;
    return r;
  }
  // The model FLOPs of an iteration, counted for the options the model is built from.
  double flops = 0.0;
  if (!api(ptdp_gpt_flops(&c.options, c.b, &flops, nullptr))) {
    r.why = "ptdp_gpt_flops: " + r.why;
    return r;
  }
  const double used_before = device_used_bytes();
  const auto t_setup = Clock::now();
  TrainHandles hd;
  ptdp_runtime_options ro;
  ptdp_optimizer_options oo;
  int32_t gpu = -1;
  if (!api(ptdp_runtime_options_init(&ro))) return r;
  ro.use_mpi = 0;  // a world of one process
  if (!api(ptdp_runtime_create(&ro, &hd.runtime)) ||
      !api(ptdp_groups_create(hd.runtime, nullptr, &hd.groups)) ||
      !api(ptdp_runtime_gpu(hd.runtime, &gpu))) {
    return r;
  }
  if (gpu < 0) {
    r.why = "ptdp_runtime_gpu: the runtime sees no GPU";
    return r;
  }
  if (!api(ptdp_model_create(hd.groups, &c.options, &hd.model)) ||
      !api(ptdp_optimizer_options_init(&oo))) {
    return r;
  }
  oo.optimizer = PTDP_OPTIMIZER_ADAM;
  oo.lr = 1e-4;
  if (c.precision() == PTDP_DTYPE_F16) {
    // A constant scale: a dynamic one would skip steps while it searches for its level.
    oo.dynamic_loss_scale = 0;
    oo.initial_loss_scale = 1024.0f;
  }
  if (!api(ptdp_optimizer_create(hd.model, &oo, &hd.optimizer)) ||
      !api(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 1, 1, &hd.schedule))) {
    return r;
  }
  r.setup_s = seconds_since(t_setup);
  int32_t nparams = 0;
  if (!api(ptdp_model_num_params(hd.model, &nparams))) return r;
  for (int32_t i = 0; i < nparams; ++i) {
    int32_t ndim = 0;
    int64_t shape[2] = {1, 1};
    if (!api(ptdp_model_param_info(hd.model, i, nullptr, 0, &ndim, shape, nullptr))) return r;
    r.parameters += ndim == 2 ? shape[0] * shape[1] : shape[0];
  }

  // Random ids, as a data loader hands them out: per sequence s + 1 tokens, the first s the
  // input and the last s the labels. A pure function of (iteration, position).
  const int total = kTrainWarmup + iters;
  const auto n = static_cast<std::size_t>(c.tokens());
  std::vector<std::vector<int32_t>> tokens(static_cast<std::size_t>(total)), labels(tokens.size());
  for (int it = 0; it < total; ++it) {
    uint64_t state = 0x7a1200000000ull + static_cast<uint64_t>(it);
    std::vector<int32_t> row(static_cast<std::size_t>(c.options.seq_length) + 1);
    auto& tk = tokens[static_cast<std::size_t>(it)];
    auto& lb = labels[static_cast<std::size_t>(it)];
    tk.reserve(n);
    lb.reserve(n);
    for (int32_t seq = 0; seq < c.b; ++seq) {
      for (auto& v : row) {
        v = static_cast<int32_t>(splitmix64(state) % static_cast<uint64_t>(c.options.vocab_size));
      }
      tk.insert(tk.end(), row.begin(), row.end() - 1);
      lb.insert(lb.end(), row.begin() + 1, row.end());
    }
  }

  for (int it = 0; it < total; ++it) {
    ptdp_iteration_result res{};
    const auto t0 = Clock::now();
    if (!api(ptdp_train_iteration(
            hd.model, hd.optimizer, hd.schedule, tokens[static_cast<std::size_t>(it)].data(),
            labels[static_cast<std::size_t>(it)].data(), c.b, it, nullptr, &res))) {
      r.why = "iteration " + std::to_string(it) + ": " + r.why;
      return r;
    }
    const double ms = seconds_since(t0) * 1e3;
    r.losses.push_back(res.loss);
    r.skipped = res.skipped_iterations;
    if (!std::isfinite(res.loss)) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "iteration %d: non-finite loss %g", it,
                    static_cast<double>(res.loss));
      r.why = buf;
      return r;
    }
    if (it >= kTrainWarmup) r.iteration_ms.push_back(ms);
  }
  // The caching allocator keeps what the iterations needed, so this is the case's high-water
  // mark of reserved memory (see the note printed under the table).
  const double used_after = device_used_bytes();
  r.mem_ok = used_before >= 0.0 && used_after >= 0.0 && baseline >= 0.0;
  r.mem_new = static_cast<int64_t>(used_after - used_before);
  r.mem_held = static_cast<int64_t>(used_after - baseline);
  if (!hd.release(&r.why)) return r;

  std::vector<double> sorted = r.iteration_ms;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t k = sorted.size();
  r.ms = k % 2 == 1 ? sorted[k / 2] : 0.5 * (sorted[k / 2 - 1] + sorted[k / 2]);
  r.best_ms = sorted.front();
  r.tokens_per_s = static_cast<double>(c.tokens()) / (r.ms * 1e-3);
  r.tflops = flops / (r.ms * 1e-3) / 1e12;
  r.ok = true;
  return r;
}

/// "124.4M", "1.31B": parameter counts in the table.
std::string short_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000) {
    std::snprintf(buf, sizeof buf, "%.2fB", static_cast<double>(n) * 1e-9);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) * 1e-6);
  }
  return buf;
}

bool write_json(const Options& o, const std::string& device, const std::vector<Result>& results,
                const std::vector<AttnResult>& attention,
                const std::vector<TrainResult>& training) {
  std::string s = "{\n";
  s += "  \"benchmark\": \"bench_gpu\",\n";
  s += "  \"device\": \"" + json_escape(device) + "\",\n";
  s += "  \"quick\": " + std::string(o.quick ? "true" : "false") + ",\n";
  s += "  \"runs\": " + std::to_string(o.runs) + ",\n";
  s += "  \"min_time_s\": " + json_number(o.min_time) + ",\n";
  s += "  \"filter\": \"" + json_escape(o.filter) + "\",\n";
  s += "  \"peak_tflops\": {\"fp32\": " + json_number(kPeakFp32) +
       ", \"tf32\": " + json_number(kPeakTf32) + ", \"bf16\": " + json_number(kPeakBf16) + "},\n";
  s += "  \"results\": [\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const Case& c = *r.c;
    s += "    {\"name\": \"" + json_escape(c.name) + "\", \"model\": \"" + c.model +
         "\", \"b\": " + std::to_string(c.b) + ", \"gemm\": \"" + c.gemm + "\", \"precision\": \"" +
         precision_name(r.p) + "\", \"trans_a\": " + (c.trans_a ? "true" : "false") +
         ", \"trans_b\": " + (c.trans_b ? "true" : "false") + ", \"m\": " + std::to_string(c.m) +
         ", \"n\": " + std::to_string(c.n) + ", \"k\": " + std::to_string(c.k) +
         ", \"batch\": " + std::to_string(c.batch) + ", \"flops\": " + json_number(c.flops());
    if (r.ok) {
      s += ", \"ms\": " + json_number(r.ms) + ", \"best_ms\": " + json_number(r.best_ms) +
           ", \"tflops\": " + json_number(r.tflops) +
           ", \"fraction_of_peak\": " + json_number(r.tflops / peak_of(r.p));
    } else {
      s += ", \"error\": \"" + json_escape(r.why) + "\"";
    }
    s += i + 1 < results.size() ? "},\n" : "}\n";
  }
  s += "  ],\n";
  s += "  \"attention\": [\n";
  for (std::size_t i = 0; i < attention.size(); ++i) {
    const AttnResult& r = attention[i];
    const AttnCase& c = *r.c;
    s += "    {\"name\": \"" + json_escape(c.name) + "\", \"model\": \"" + c.model +
         "\", \"b\": " + std::to_string(c.b) + ", \"s\": " + std::to_string(c.s) +
         ", \"heads\": " + std::to_string(c.heads) + ", \"groups\": " + std::to_string(c.groups) +
         ", \"dh\": " + std::to_string(c.dh) + ", \"pass\": \"" + (c.backward ? "bwd" : "fwd") +
         "\", \"precision\": \"bf16\", \"causal\": true, \"flops\": " + json_number(c.flops());
    if (r.ok) {
      s += ", \"ms\": " + json_number(r.ms) + ", \"best_ms\": " + json_number(r.best_ms) +
           ", \"tflops\": " + json_number(r.tflops) +
           ", \"fraction_of_peak\": " + json_number(r.tflops / kPeakBf16);
    } else {
      s += ", \"error\": \"" + json_escape(r.why) + "\"";
    }
    s += i + 1 < attention.size() ? "},\n" : "}\n";
  }
  s += "  ],\n";
  s += "  \"training\": [\n";
  const auto numbers = [](const auto& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      out += (i > 0 ? ", " : "") + json_number(static_cast<double>(v[i]));
    }
    return out + "]";
  };
  for (std::size_t i = 0; i < training.size(); ++i) {
    const TrainResult& r = training[i];
    const TrainCase& c = *r.c;
    const ptdp_gpt_options& g = c.options;
    // ffn_hidden_size 0 is the GPT's 4h (the SwiGLU default never occurs: the preset gives it).
    const int64_t ffn = g.ffn_hidden_size > 0 ? g.ffn_hidden_size : 4 * int64_t{g.hidden_size};
    const char* positions = g.position_embedding_type == PTDP_POSITION_EMBEDDING_ROPE   ? "rope"
                            : g.position_embedding_type == PTDP_POSITION_EMBEDDING_NONE ? "none"
                                                                                        : "learned_absolute";
    s += "    {\"name\": \"" + json_escape(c.name) + "\", \"model\": \"" + c.model +
         "\", \"preset\": " + (c.preset.empty() ? std::string("null") : "\"" + json_escape(c.preset) + "\"") +
         ", \"layers\": " + std::to_string(g.num_layers) + ", \"hidden\": " + std::to_string(g.hidden_size) +
         ", \"heads\": " + std::to_string(g.num_attention_heads) + ", \"query_groups\": " +
         std::to_string(g.num_query_groups > 0 ? g.num_query_groups : g.num_attention_heads) +
         ", \"ffn_hidden_size\": " + std::to_string(ffn) +
         ", \"swiglu\": " + (g.swiglu ? "true" : "false") + ", \"normalization\": \"" +
         (g.normalization == PTDP_NORMALIZATION_RMSNORM ? "RMSNorm" : "LayerNorm") +
         "\", \"position_embedding\": \"" + positions +
         "\", \"bias_linear\": " + (g.disable_bias_linear ? "false" : "true") +
         ", \"tied_embeddings\": " + (g.untie_embeddings_and_output_weights ? "false" : "true") +
         ", \"vocab\": " + std::to_string(g.vocab_size) + ", \"seq\": " + std::to_string(g.seq_length) +
         ", \"b\": " + std::to_string(c.b) + ", \"precision\": \"" + dtype_name(c.precision()) +
         "\", \"schedule\": \"1f1b\", \"p\": 1, \"m\": 1, \"v\": 1, \"tokens_per_iteration\": " +
         std::to_string(c.tokens()) + ", \"flops_per_iteration\": " + json_number(c.flops()) +
         ", \"peak_tflops\": " + json_number(c.peak_tflops()) +
         ", \"warmup_iterations\": " + std::to_string(kTrainWarmup) +
         ", \"iterations\": " + std::to_string(o.train_iters) +
         ", \"losses\": " + numbers(r.losses);
    if (r.ok) {
      s += ", \"parameters\": " + std::to_string(r.parameters) +
           ", \"setup_s\": " + json_number(r.setup_s) +
           ", \"iteration_ms\": " + numbers(r.iteration_ms) + ", \"ms\": " + json_number(r.ms) +
           ", \"best_ms\": " + json_number(r.best_ms) +
           ", \"tokens_per_s\": " + json_number(r.tokens_per_s) +
           ", \"tflops\": " + json_number(r.tflops) +
           ", \"mfu\": " + json_number(r.tflops / c.peak_tflops()) +
           ", \"first_loss\": " + json_number(r.losses.front()) +
           ", \"last_loss\": " + json_number(r.losses.back()) +
           ", \"skipped_steps\": " + std::to_string(r.skipped) +
           ", \"device_memory_new_bytes\": " + (r.mem_ok ? std::to_string(r.mem_new) : "null") +
           ", \"device_memory_held_bytes\": " + (r.mem_ok ? std::to_string(r.mem_held) : "null");
    } else {
      s += ", \"error\": \"" + json_escape(r.why) + "\"";
    }
    s += i + 1 < training.size() ? "},\n" : "}\n";
  }
  s += "  ]\n}\n";
  return ptdp::bench::write_text_file(o.json_path, s);
}

/// Sections 1 and 2: the GEMM table and the fused attention table. False when the buffers
/// could not be set up. The Bench (its buffers and handles) is gone when this returns.
bool run_kernels(const Options& o, const std::vector<Case>& cases,
                 const std::vector<AttnCase>& attn_cases, std::vector<Result>& results,
                 std::vector<AttnResult>& attention) {
  std::printf(
      "cuBLASLt GEMMs and fused attention: median of %d runs of >= %.3g s; TFLOP/s\n"
      "(fraction of the H200 dense peak: fp32 %.0f, tf32 %.0f, bf16 %.0f)\n\n",
      o.runs, o.min_time, kPeakFp32, kPeakTf32, kPeakBf16);
  Bench bench(o);
  if (!bench.setup(cases)) return false;
  if (!cases.empty()) {
    std::printf("%-24s %6s %6s %6s %5s  %16s %16s %16s\n", "case", "m", "n", "k", "batch", "fp32",
                "tf32", "bf16");
  }
  std::string group;
  double group_flops = 0.0, group_ms[3] = {0.0, 0.0, 0.0};
  bool group_ok[3] = {true, true, true};
  const auto flush_group = [&] {
    if (group.empty()) return;
    std::printf("%-24s %27s ", (group + " layer").c_str(), "all GEMMs above:");
    for (int p = 0; p < 3; ++p) {
      if (!group_ok[p] || group_ms[p] <= 0.0) {
        std::printf(" %16s", "n/a");
      } else {
        const double tf = group_flops / (group_ms[p] * 1e-3) / 1e12;
        std::printf(" %8.1f (%4.1f%%)", tf, 100.0 * tf / peak_of(kPrecisions[p]));
      }
    }
    std::printf("\n\n");
  };
  for (const Case& c : cases) {
    const std::string g = c.model + "/b" + std::to_string(c.b);
    if (g != group) {
      flush_group();
      group = g;
      group_flops = 0.0;
      for (int p = 0; p < 3; ++p) {
        group_ms[p] = 0.0;
        group_ok[p] = true;
      }
    }
    std::string row;
    group_flops += c.flops();
    for (int p = 0; p < 3; ++p) {
      Result r = bench.run(c, kPrecisions[p]);
      if (!r.ok) {
        group_ok[p] = false;
        std::fprintf(stderr, "%s %s: %s\n", c.name.c_str(), precision_name(kPrecisions[p]),
                     r.why.c_str());
      }
      group_ms[p] += r.ms;
      row += ' ';
      row += cell(r);
      results.push_back(r);
    }
    std::printf("%-24s %6lld %6lld %6lld %5lld %s\n", c.name.c_str(), static_cast<long long>(c.m),
                static_cast<long long>(c.n), static_cast<long long>(c.k),
                static_cast<long long>(c.batch), row.c_str());
    std::fflush(stdout);
  }
  flush_group();

  if (!attn_cases.empty()) {
    std::printf(
        "Fused causal attention, bf16 (TFLOP/s of the causal work; backward = 2.5x forward)\n");
    std::printf("%-30s %6s %6s %6s %6s %5s %9s  %16s\n", "case", "s", "heads", "groups", "dh", "b", "ms",
                "bf16");
  }
  for (const AttnCase& c : attn_cases) {
    AttnResult r = bench.run_attention(c);
    if (!r.ok) std::fprintf(stderr, "%s: %s\n", c.name.c_str(), r.why.c_str());
    char cell_text[64];
    if (r.ok) {
      std::snprintf(cell_text, sizeof cell_text, "%9.3f  %8.1f (%4.1f%%)", r.ms, r.tflops,
                    100.0 * r.tflops / kPeakBf16);
    } else {
      std::snprintf(cell_text, sizeof cell_text, "%9s  %16s", "n/a", "n/a");
    }
    std::printf("%-30s %6lld %6lld %6lld %6lld %5d %s\n", c.name.c_str(), static_cast<long long>(c.s),
                static_cast<long long>(c.heads), static_cast<long long>(c.groups),
                static_cast<long long>(c.dh), c.b, cell_text);
    std::fflush(stdout);
    attention.push_back(r);
  }
  return true;
}

/// Section 3: one row per training case, then the notes. False when a case failed.
bool run_train(const Options& o, const std::vector<TrainCase>& train_cases,
               std::vector<TrainResult>& training) {
  const TrainCase& c0 = train_cases.front();
  std::printf(
      "\nTraining through the C API, %s: ptdp_train_iteration (1F1B, p = m = v = 1; AdamW lr "
      "1e-4%s),\n%d warm-up + %d timed iterations; model TFLOP/s = ptdp_gpt_flops / time, MFU "
      "against %.0f TFLOP/s (%s dense)\n",
      dtype_name(c0.precision()), c0.precision() == PTDP_DTYPE_F16 ? ", loss scale 1024" : "",
      kTrainWarmup, o.train_iters, c0.peak_tflops(),
      c0.precision() == PTDP_DTYPE_F32 ? "fp32" : "bf16/f16");
  bool gpt_line = false;
  std::vector<std::string> presets_described;
  for (const TrainCase& c : train_cases) {
    const ptdp_gpt_options& g = c.options;
    if (c.preset.empty() && !gpt_line) {
      gpt_line = true;
      std::printf(
          "  GPTs: s=%d, V=%d (LayerNorm, GeLU MLP, learned positions, biases, dropout 0.1);\n"
          "    FLOPs: the paper's 72 B s l h^2 (1 + s/(6h) + V/(12 l h))\n",
          g.seq_length, g.vocab_size);
    } else if (!c.preset.empty() &&
               std::find(presets_described.begin(), presets_described.end(), c.preset) ==
                   presets_described.end()) {
      presets_described.push_back(c.preset);
      const int32_t groups = g.num_query_groups > 0 ? g.num_query_groups : g.num_attention_heads;
      std::printf(
          "  %s: the preset at s=%d (l %d, h %d, %d heads in %d groups, %s ffn %d, %s, %s, %s, "
          "V=%d, %s, dropout %g)\n"
          "    FLOPs: Megatron's count with its grouped-query and SwiGLU terms, 12 B s l h^2 ((1 + "
          "g/a + s/h) a dh/h\n"
          "    + (3/2) ffn/h) + 6 B s h V\n",
          c.preset.c_str(), g.seq_length, g.num_layers, g.hidden_size, g.num_attention_heads, groups,
          g.swiglu ? "SwiGLU" : "GeLU", g.ffn_hidden_size,
          g.normalization == PTDP_NORMALIZATION_RMSNORM ? "RMSNorm" : "LayerNorm",
          g.position_embedding_type == PTDP_POSITION_EMBEDDING_ROPE ? "RoPE" : "learned positions",
          g.disable_bias_linear ? "no biases" : "biases", g.vocab_size,
          g.untie_embeddings_and_output_weights ? "untied" : "tied", static_cast<double>(g.hidden_dropout));
      if (g.num_experts > 0) {
        std::printf("    MoE: %d experts, top-%d, expert ffn %d, in every layer; the FLOPs' MLP term is k * the\n"
                    "    expert ffn (Megatron's MoE count, the router's left out); one GPU, so no exchange\n",
                    g.num_experts, g.moe_router_topk,
                    g.moe_ffn_hidden_size > 0 ? g.moe_ffn_hidden_size : g.ffn_hidden_size);
      }
    }
  }
  std::printf("%-22s %8s %7s %9s %9s %10s %8s %6s %19s %13s\n", "case", "params", "setup s",
              "ms/it", "best ms", "tokens/s", "TFLOP/s", "MFU", "loss first -> last",
              "GiB new/held");
  std::fflush(stdout);
  // Memory in use before any model: the program's own context and whatever else runs.
  const double baseline = device_used_bytes();
  bool all_ok = true;
  for (const TrainCase& c : train_cases) {
    TrainResult r = run_training(c, o.train_iters, baseline);
    if (r.ok) {
      char mem[32] = "n/a";
      if (r.mem_ok) {
        std::snprintf(mem, sizeof mem, "%.1f / %.1f", static_cast<double>(r.mem_new) / (1u << 30),
                      static_cast<double>(r.mem_held) / (1u << 30));
      }
      std::printf("%-22s %8s %7.1f %9.2f %9.2f %10s %8.1f %5.1f%% %8.4f -> %7.4f %13s\n",
                  c.name.c_str(), short_count(r.parameters).c_str(), r.setup_s, r.ms, r.best_ms,
                  grouped(static_cast<int64_t>(std::llround(r.tokens_per_s))).c_str(), r.tflops,
                  100.0 * r.tflops / c.peak_tflops(), static_cast<double>(r.losses.front()),
                  static_cast<double>(r.losses.back()), mem);
      if (r.skipped > 0) {
        std::fprintf(stderr, "%s: %lld optimizer steps skipped for non-finite gradients\n",
                     c.name.c_str(), static_cast<long long>(r.skipped));
      }
    } else {
      all_ok = false;
      std::printf("%-22s FAILED (the message follows on stderr)\n", c.name.c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), r.why.c_str());
    }
    std::fflush(stdout);
    training.push_back(std::move(r));
  }
  std::printf(
      "GiB new/held: device memory in use after the last iteration minus before the case (new) "
      "and before the\nfirst case (held), by cudaMemGetInfo (ptdp_memory_stats counts host memory "
      "only). ptdp's caching\nallocator keeps freed blocks, so after another case 'new' misses the "
      "blocks it reused and 'held'\nincludes stale ones; --filter one case for its exact "
      "footprint.\n");
  return all_ok;
}

/// Section 4: the MoE experts' ops through the CUDA backend. Each op is timed by the wall clock
/// over a loop ended by synchronize(), after one warm-up call; the median of o.runs runs.
bool run_moe(const Options& o) {
  constexpr int64_t h = 2048, ffn = 1024, E = 64, k = 8, tokens = 8192, rows = tokens * k;
  ptdp::Backend& be = ptdp::cuda::backend(0);
  const auto dev = [](std::size_t bytes) { return ptdp::cuda::device_alloc(0, bytes); };
  // Device buffers: activations [rows, 2 ffn] (bf16), the experts' weights [E, 2 ffn, h] (bf16)
  // and fp32 gradients of the same size; router logits and routing.
  const std::size_t act = static_cast<std::size_t>(rows * 2 * ffn), wts = static_cast<std::size_t>(E * 2 * ffn * h);
  void* a = dev(act * 2);
  void* c = dev(act * 2);
  void* w = dev(wts * 2);
  void* g = dev(wts * 4);
  auto* logits = static_cast<float*>(dev(static_cast<std::size_t>(tokens * E) * 4));
  auto* dlogits = static_cast<float*>(dev(static_cast<std::size_t>(tokens * E) * 4));
  auto* probs = static_cast<float*>(dev(static_cast<std::size_t>(rows) * 4));
  auto* idx = static_cast<int32_t*>(dev(static_cast<std::size_t>(rows) * 4));
  auto* row_of = static_cast<int32_t*>(dev(static_cast<std::size_t>(rows) * 4));
  be.fill(a, ptdp::DType::BF16, 0.01, static_cast<int64_t>(act));
  be.fill(c, ptdp::DType::BF16, 0.01, static_cast<int64_t>(act));
  be.fill(w, ptdp::DType::BF16, 0.001, static_cast<int64_t>(wts));
  be.fill(g, ptdp::DType::F32, 0.0, static_cast<int64_t>(wts));
  std::vector<float> host_logits(static_cast<std::size_t>(tokens * E));
  uint64_t state = 77;
  for (float& v : host_logits) v = static_cast<float>(splitmix64(state) >> 40) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
  be.copy_from_host(logits, host_logits.data(), host_logits.size() * 4);
  ptdp::RouterDesc rd;
  rd.tokens = tokens;
  rd.experts = E;
  rd.topk = k;
  std::vector<int64_t> counts(static_cast<std::size_t>(E));
  be.moe_router_forward(rd, logits, nullptr, idx, probs);
  be.moe_route(idx, tokens, k, E, row_of, counts.data());
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  std::printf("\nMoE experts at OLMoE-1B-7B's shape, bf16 (h %lld, expert ffn %lld SwiGLU, %lld experts, top-%lld, "
              "%lld tokens: %lld rows, %lld..%lld per expert)\n",
              static_cast<long long>(h), static_cast<long long>(ffn), static_cast<long long>(E),
              static_cast<long long>(k), static_cast<long long>(tokens), static_cast<long long>(rows),
              static_cast<long long>(*lo), static_cast<long long>(*hi));
  std::printf("%-24s %6s %6s %6s %10s %9s\n", "case", "m", "n", "k", "ms", "TFLOP/s");
  bool ok = true;
  const auto timed = [&](const std::string& name, int64_t m, int64_t n, int64_t kk, double flops,
                         const std::function<void()>& op) {
    if (!selected(o, name)) return 0.0;
    try {
      op();
      be.synchronize();
      std::vector<double> per_call;
      int64_t iters = 1;
      for (int r = 0; r < o.runs; ++r) {
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < iters; ++i) op();
        be.synchronize();
        double s = seconds_since(t0);
        if (r == 0) {  // calibrate the loop to min_time
          while (s < o.min_time) {
            iters *= 2;
            const auto t1 = Clock::now();
            for (int64_t i = 0; i < iters; ++i) op();
            be.synchronize();
            s = seconds_since(t1);
          }
        }
        per_call.push_back(s / static_cast<double>(iters));
      }
      std::sort(per_call.begin(), per_call.end());
      const double med = per_call[per_call.size() / 2];
      if (flops > 0.0) {
        std::printf("%-24s %6lld %6lld %6lld %10.3f %9.1f\n", name.c_str(), static_cast<long long>(m),
                    static_cast<long long>(n), static_cast<long long>(kk), med * 1e3, flops / med * 1e-12);
      } else {
        std::printf("%-24s %6lld %6lld %6lld %10.3f\n", name.c_str(), static_cast<long long>(m),
                    static_cast<long long>(n), static_cast<long long>(kk), med * 1e3);
      }
      return med;
    } catch (const std::exception& e) {
      ok = false;
      std::printf("%-24s FAILED: %s\n", name.c_str(), e.what());
      return 0.0;
    }
  };
  struct Gemm {
    const char* name;
    ptdp::GroupedDim varying;
    bool trans_b;
    int64_t n, fixed;
  };
  const Gemm gemms[] = {{"fc1.fwd", ptdp::GroupedDim::M, true, 2 * ffn, h},
                        {"fc1.dgrad", ptdp::GroupedDim::M, false, h, 2 * ffn},
                        {"fc1.wgrad", ptdp::GroupedDim::K, false, h, 2 * ffn},
                        {"fc2.fwd", ptdp::GroupedDim::M, true, h, ffn},
                        {"fc2.dgrad", ptdp::GroupedDim::M, false, ffn, h},
                        {"fc2.wgrad", ptdp::GroupedDim::K, false, ffn, h}};
  double gemm_s = 0.0, paired_grouped = 0.0, paired_plain = 0.0;
  for (const Gemm& gm : gemms) {
    const bool wgrad = gm.varying == ptdp::GroupedDim::K;
    ptdp::GroupedGemmDesc d;
    d.groups = E;
    d.sizes = counts.data();
    d.varying = gm.varying;
    d.trans_b = gm.trans_b;
    d.n = gm.n;
    d.m = wgrad ? gm.fixed : rows;
    d.k = wgrad ? rows : gm.fixed;
    d.beta = wgrad ? 1.0f : 0.0f;
    d.a_type = d.b_type = ptdp::DType::BF16;
    d.c_type = wgrad ? ptdp::DType::F32 : ptdp::DType::BF16;
    ptdp::GemmDesc plain;
    plain.trans_a = wgrad;
    plain.trans_b = gm.trans_b;
    plain.m = d.m;
    plain.n = d.n;
    plain.k = d.k;
    plain.beta = d.beta;
    plain.a_type = plain.b_type = ptdp::DType::BF16;
    plain.c_type = d.c_type;
    const double flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
    void* in2 = wgrad ? c : w;
    void* out = wgrad ? g : c;
    const double t = timed(std::string("moe/grouped.") + gm.name, d.m, d.n, d.k, flops,
                           [&] { be.grouped_gemm(d, a, in2, out); });
    const double tp = timed(std::string("moe/gemm.") + gm.name, d.m, d.n, d.k, flops,
                            [&] { be.gemm(plain, a, in2, out); });
    gemm_s += t;
    if (t > 0.0 && tp > 0.0) {
      paired_grouped += t;
      paired_plain += tp;
    }
  }
  double other = 0.0, swiglu = 0.0;
  other += timed("moe/router.fwd", tokens, E, k, 0.0, [&] { be.moe_router_forward(rd, logits, nullptr, idx, probs); });
  other += timed("moe/router.bwd", tokens, E, k, 0.0,
                 [&] { be.moe_router_backward(rd, logits, idx, probs, dlogits, false); });
  other += timed("moe/route", tokens, E, k, 0.0, [&] { be.moe_route(idx, tokens, k, E, row_of, counts.data()); });
  other += timed("moe/permute.fwd", tokens, h, k, 0.0,
                 [&] { be.moe_permute(a, ptdp::DType::BF16, row_of, tokens, k, h, rows, c); });
  other += timed("moe/permute.bwd", tokens, h, k, 0.0,
                 [&] { be.moe_unpermute(c, ptdp::DType::BF16, nullptr, row_of, tokens, k, h, rows, a); });
  other += timed("moe/unpermute.fwd", tokens, h, k, 0.0,
                 [&] { be.moe_unpermute(c, ptdp::DType::BF16, probs, row_of, tokens, k, h, rows, a); });
  other += timed("moe/unpermute.bwd", tokens, h, k, 0.0, [&] {
    be.moe_unpermute_backward(a, c, ptdp::DType::BF16, probs, row_of, tokens, k, h, rows, c, probs);
  });
  swiglu += timed("moe/swiglu.fwd", rows, ffn, 0, 0.0, [&] { be.swiglu_forward(a, c, ptdp::DType::BF16, rows, ffn); });
  swiglu += timed("moe/swiglu.bwd", rows, ffn, 0, 0.0,
                  [&] { be.swiglu_backward(a, c, c, ptdp::DType::BF16, rows, ffn); });
  if (paired_grouped > 0.0) {
    std::printf("grouped GEMMs ran at %.0f%% of one GEMM's speed on the same FLOPs\n",
                100.0 * paired_plain / paired_grouped);
  }
  if (gemm_s > 0.0 && other > 0.0) {
    const double layer = gemm_s + swiglu + other;
    std::printf("router + routing + permute + unpermute (fwd and bwd): %.3f ms of the layer's %.3f ms (%.1f%%)\n",
                other * 1e3, layer * 1e3, 100.0 * other / layer);
  }
  for (void* p : {a, c}) ptdp::cuda::device_free(0, p, act * 2);
  ptdp::cuda::device_free(0, w, wts * 2);
  ptdp::cuda::device_free(0, g, wts * 4);
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(dlogits)})
    ptdp::cuda::device_free(0, p, static_cast<std::size_t>(tokens * E) * 4);
  for (void* p : {static_cast<void*>(probs), static_cast<void*>(idx), static_cast<void*>(row_of)})
    ptdp::cuda::device_free(0, p, static_cast<std::size_t>(rows) * 4);
  return ok;
}

int run(const Options& o) {
  if (ptdp::cuda::device_count() == 0) {
    std::printf("bench_gpu: no CUDA device; nothing to measure\n");
    return 0;
  }
  if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice")) return 1;
  const std::string device = ptdp::cuda::device_description(0);
  const std::vector<Case> cases = make_cases(o);
  const std::vector<AttnCase> attn_cases = make_attention_cases(o);
  const std::vector<TrainCase> train_cases = make_train_cases(o);
  const bool moe = (o.filter.empty() || o.filter.find("moe") != std::string::npos) && selected(o, "moe/");
  if (cases.empty() && attn_cases.empty() && train_cases.empty() && !moe) {
    std::fprintf(stderr, "bench_gpu: no case matches --filter '%s'\n", o.filter.c_str());
    return 2;
  }
  std::printf("bench_gpu on %s\n", device.c_str());
  std::vector<Result> results;
  std::vector<AttnResult> attention;
  if ((!cases.empty() || !attn_cases.empty()) &&
      !run_kernels(o, cases, attn_cases, results, attention)) {
    return 1;
  }
  const bool moe_ok = !moe || run_moe(o);
  std::vector<TrainResult> training;
  const bool train_ok = train_cases.empty() || run_train(o, train_cases, training);
  if (!o.json_path.empty() && !write_json(o, device, results, attention, training)) return 1;
  return train_ok && moe_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return ptdp::bench::bench_main<Options>(argc, argv, "bench_gpu", parse_args, run);
}
