// The paper's performance model for one layout: parameters, FLOPs, memory per GPU and time per
// iteration of a GPT or Llama-family decoder trained with tensor (t), pipeline (p, v chunks per
// rank) and data (d) parallelism, m microbatches of b samples per pipeline, on a Cluster.
//
// Formulas (PTDP-BRIEF.md): parameters GptConfig::parameter_count (the paper's
// 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) for its GPTs), per pipeline rank the layout of
// docs/architecture.md (grouped-query QKV, SwiGLU's 2 ffn rows, norms without bias, no position table with
// RoPE, untied output layers); FLOPs GptConfig::paper_flops (Megatron's
// num_floating_point_operations with the grouped-query and SwiGLU terms; 72 B s l h^2 (1 +
// s/(6h) + V/(12 l h)) for the GPT), split here into layers and logits; tensor-parallel ring
// all-reduces of b s h elements, 2 forward and 2 backward per layer; pipeline transfers of
// b s h elements (b s h / t with scatter/gather); the bubble from the schedule simulator;
// data-parallel ring all-reduce (or reduce-scatter + all-gather) of the gradients; activation
// memory per layer from Korthikanti et al. 2022 for 16-bit GPU training (with q, k, v of a, g, g
// heads of dh, SwiGLU's fc1 output and activation, the norms' statistics, q/k norms, and the
// dropout tensors only with dropout), and the CPU engine's own saved tensors for fp32 (what it
// really keeps, so the estimate can be checked against its measured high-water mark).
// Multi-latent attention replaces QKV by its down and up projections (layer_gemms) and q, k, v
// by its latents and heads (layer_activation_bytes); the D multi-token prediction modules add
// their layers, eh_proj and logits layers to the last pipeline stage's time, parameters and
// activations (docs/deepseek.md, "Planning DeepSeek-V3"). The optimizer (PlanOptimizer) sets the
// state per parameter and the step's memory traffic; Muon adds its Newton-Schulz products
// (kernels/backend.h newton_schulz_flops) at the device's peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/gpt_config.h"
#include "core/model/pipeline_split.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/simulator.h"
#include "core/plan/cluster.h"
#include "core/plan/gemm_table.h"

namespace ptdp::plan {

enum class Precision : int { Fp32 = 0, Bf16 = 1, Fp16 = 2 };
const char* precision_name(Precision p);
/// The optimizer whose state and step a plan prices (Megatron's --optimizer names: "adam", "sgd";
/// and "muon"). Adam is AdamW: two fp32 moments per parameter. SGD: one fp32 momentum buffer.
/// Muon: one fp32 momentum buffer for the 2-D hidden weights (muon_stage_share) and AdamW's two
/// moments for the rest, plus the Newton-Schulz iteration of every hidden matrix.
enum class PlanOptimizer : int { Adam = 0, Sgd = 1, Muon = 2 };
const char* optimizer_name(PlanOptimizer o);
/// "gpipe", "1f1b", "interleaved", "zb-h1".
const char* schedule_short_name(ScheduleKind k);

/// What the user asks for: the model, the batch, what may be used, and optional pins.
struct PlanRequest {
  GptConfig model;              ///< shape (layers, hidden, heads, ffn, vocab, seq, tying, dropout)
  int64_t global_batch_size = 0;  ///< B
  Precision precision = Precision::Fp32;
  bool allow_distributed_optimizer = false;
  /// Sequence parallelism (Megatron's --sequence-parallel, Korthikanti et al. 2022) may be used
  /// where t > 1: the norms and dropouts run on s / t of the tokens and keep 1 / t of their
  /// activations; each tensor all-reduce becomes a reduce-scatter and an all-gather of the same
  /// bytes.
  bool allow_sequence_parallel = false;
  bool allow_recompute[3] = {true, true, true};  ///< indexed by Recompute: none, full, selective
  /// Context parallelism (Megatron's --context-parallel-size): 1 (default) none; N > 1 pins
  /// c = N; 0 searches c in 1, 2, 4, ... (ranks ordered t, c, d, p as Megatron's tp-cp-dp-pp).
  int context_parallel = 1;
  int num_gpus = 0;  ///< 0: every GPU of the cluster
  // Pins: 0 (or nullopt-like -1 for the schedule) means "search".
  int tensor = 0;
  int pipeline = 0;
  int layers_per_virtual_stage = 0;  ///< Megatron's: v = layers / (p * this)
  /// Layers of the first / last pipeline stage (Megatron's --decoder-first/last-pipeline-num-
  /// layers); 0: search (an even split, and uneven ends where they balance the stage times).
  int first_stage_layers = 0;
  int last_stage_layers = 0;
  int micro_batch = 0;
  /// MoE (Megatron's --expert-model-parallel-size e, --expert-tensor-parallel-size etp): 0
  /// searches e over the divisors of num_experts and etp over 1 and t (e etp dividing the
  /// t c d ranks of a stage); N pins. Ignored for a dense model.
  int expert_model = 0;
  int expert_tensor = 0;
  int schedule = -1;  ///< a ScheduleKind, or -1 (1F1B, interleaved 1F1B, ZB-H1 are searched)
  bool scatter_gather = true;       ///< pipeline transfers split over the tensor ranks
  bool overlap_grad_reduce = true;  ///< data-parallel reduction overlapped with the last backward
  /// Gradients are kept and reduced in fp32 (ptdp's engine; Megatron's
  /// --accumulate-allreduce-grads-in-fp32, forced with bf16). False: in the 16-bit training
  /// precision, as Megatron did by default for fp16 when the paper was written (2 bytes per
  /// parameter in memory and in the data-parallel reduction).
  bool grads_in_fp32 = true;
  PlanOptimizer optimizer = PlanOptimizer::Adam;  ///< ptdp-plan's --optimizer
  int muon_ns_steps = 5;        ///< Newton-Schulz steps per Muon step (--muon-num-ns-steps), 1..100
  /// Muon orthogonalises q, k and v, and SwiGLU's gate and up, as separate matrices
  /// (MuonConfig::split_qkv, Megatron's default); false: linear_qkv and linear_fc1 whole.
  bool muon_split_qkv = true;
  int top = 5;                      ///< layouts to report

  /// Throws Error(InvalidArgument) naming the field for a request no layout could serve.
  void validate() const;
};

/// One way to lay the model out.
struct Layout {
  int t = 1, p = 1, d = 1, v = 1, b = 1, m = 1;
  /// Layers of the first / last pipeline stage; 0: no count of its own (core/model/
  /// pipeline_split.h: the other stages share the rest evenly).
  int first = 0, last = 0;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  Recompute recompute = Recompute::None;
  bool distributed_optimizer = false;
  bool sequence_parallel = false;  ///< Megatron's --sequence-parallel (only with t > 1)
  /// Context-parallel size: each of c ranks holds s / c of every sequence's tokens (their
  /// activations and work) and the attention exchanges keys and values around a ring of c.
  /// The layout takes t c p d GPUs.
  int c = 1;
  /// MoE: the experts of each MoE layer split over e ranks of a stage, each expert's linears over
  /// etp (0: t), Megatron-Core's parallel folding of the stage's t c d ranks as etp x e x edp.
  int e = 1, etp = 0;
  int expert_tensor() const { return etp > 0 ? etp : t; }
  /// edp = t c d / (e etp): the ranks holding the same experts (their gradients' group).
  int expert_data() const { return t * c * d / (e * expert_tensor()); }
  /// "t=8 p=8 d=24 v=5 b=1 m=96 interleaved-1f1b full dist-opt", with " first=N" and " last=N"
  /// after p for uneven stages, " c=N" after t with context parallelism, " e=N etp=N" after d
  /// with expert parallelism and " sp" with sequence parallelism.
  std::string str() const;
  PipelineSplit split() const;
};

/// Bytes per GPU of one pipeline rank.
struct Memory {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  int slots = 0;  ///< (microbatch, chunk) activation sets held at once
  double total() const { return weights + gradients + optimizer + activations; }
};

/// Everything estimated for one layout.
struct Estimate {
  Layout layout;
  // Parameters of the whole model: the paper's formula (true vocabulary) and ptdp's own model
  // (padded vocabulary, every bias and LayerNorm); and the most any GPU holds.
  double params_formula = 0;
  int64_t params_exact = 0;
  int64_t params_per_gpu = 0;
  /// MoE: the parameters one token uses (GptConfig::active_parameter_count), and of
  /// params_per_gpu the routed experts' (split over e etp, their optimizer state over edp).
  int64_t params_active = 0;
  int64_t expert_params_per_gpu = 0;
  // Memory of the most loaded GPU (the first or the last pipeline stage).
  Memory memory;
  int memory_stage = 0;  ///< the pipeline rank that holds the most
  // Seconds per iteration of the slowest pipeline rank (tensor_comm: the tensor-parallel
  // all-reduces and the exposed context-parallel key/value exchanges). compute + tensor_comm + bubble +
  // pipeline_comm = pipeline (the simulated makespan: the bubble is the makespan without
  // transfer times less the busy time, pipeline_comm what the transfers add on top);
  // iteration = pipeline + data_parallel + embedding_sync + optimizer.
  double compute = 0, tensor_comm = 0, pipeline_comm = 0, bubble = 0, pipeline = 0;
  double data_parallel = 0, embedding_sync = 0, optimizer = 0, iteration = 0;
  /// Muon: of `optimizer`, the Newton-Schulz iteration of the most loaded rank at the device's
  /// peak (newton_schulz_flops / peak of the training precision); 0 for Adam and SGD.
  double newton_schulz = 0;
  double newton_schulz_flops = 0;  ///< Newton-Schulz FLOPs per iteration on that rank
  double bubble_fraction = 0;  ///< bubble / (compute + tensor_comm): the paper's t_bubble / t_ideal
  bool simulated = false;      ///< the bubble and slots come from the simulator (else analytic)
  // Rates.
  /// FLOPs per iteration as ptdp-train counts them for its TFLOP/s (and the paper for its
  /// figures): GptConfig::paper_flops with the recomputed forward under full recomputation.
  /// Selective recomputation's attention products are not counted (as in ptdp-train's and
  /// Megatron's logs), though their time is.
  double hardware_flops = 0;
  double model_flops = 0;     ///< FLOPs per iteration without recomputation (ptdp-train's MFU)
  double tflops_per_gpu = 0;  ///< hardware_flops / (iteration * GPUs) / 1e12 (the paper's figure)
  double mfu = 0;             ///< model_flops / (iteration * GPUs * peak)
  // Where the traffic goes.
  bool tensor_crosses_nodes = false, pipeline_crosses_nodes = false, data_crosses_nodes = false;
  double tensor_allreduce_seconds = 0;  ///< one all-reduce of b s h elements
  /// MoE: one token exchange of one MoE layer and microbatch (the dispatch, or the combine:
  /// the all-to-all over e and the all-gather over etp), and the iteration's exchanges on the
  /// slowest rank (part of tensor_comm).
  double alltoall_seconds = 0, expert_comm = 0;
  bool expert_crosses_nodes = false;  ///< the e etp ranks of an expert group span nodes
  ScheduleCosts costs;                  ///< per-microbatch costs fed to the simulator (seconds)
  bool fits = false;                    ///< memory.total() <= the cluster's usable memory
};

/// The paper's parameter formula with the true vocabulary (a GPT's; see published_parameters).
double paper_parameters(const GptConfig& m);
/// Parameters of the unpartitioned model with the unpadded vocabulary: what Hugging Face and
/// model cards count (GptConfig::parameter_count with make_vocab_size_divisible_by = 1, t = 1).
int64_t published_parameters(const GptConfig& m);
/// Parameters one tensor rank of pipeline rank `stage` holds in ptdp's model (what GptModel
/// allocates for the chunks c = j p + stage, tied-embedding copies included).
int64_t stage_parameters(const GptConfig& m, int t, int p, int v, int stage);
/// The same for a split with uneven first or last stages; with MoE the routed experts of its
/// MoE layers whole on every rank, the routers replicated, the shared experts split over t like
/// a dense MLP.
int64_t stage_parameters(const GptConfig& m, int t, const PipelineSplit& split, int stage);
/// The same with the experts split over e ranks of etp each (the 4-argument form: e = 1, etp = t).
int64_t stage_parameters(const GptConfig& m, int t, const PipelineSplit& split, int stage, int e, int etp);
/// Of stage_parameters, the routed experts' (0 for a dense model).
int64_t stage_expert_parameters(const GptConfig& m, int t, const PipelineSplit& split, int stage, int e, int etp);
/// Muon's share of one tensor rank of pipeline rank `stage` (the split and e, etp as
/// stage_parameters): the 2-D hidden weights, those Muon steps (attention's and the MLP's linears,
/// every routed and shared expert's, the router's and the shared-expert gate's, MLA's down and up
/// projections, the MTP modules' eh_proj and layers; not the embeddings, the output layer, norms
/// and biases).
struct MuonShare {
  int64_t params = 0;         ///< of stage_parameters: the hidden weights' elements on the rank
  int64_t expert_params = 0;  ///< of `params`, the routed experts' (of stage_expert_parameters)
  /// FLOPs of one Newton-Schulz orthogonalisation (kernels/backend.h newton_schulz_flops, `steps`
  /// steps) of every whole hidden matrix of the stage, counted once for the stage (the dense
  /// ones; the routed experts' apart). With split_qkv q, k, v are separate [a dh, h], [g dh, h],
  /// [g dh, h] matrices and SwiGLU's gate and up two [f, h]; each expert is its own matrices.
  double ns_flops = 0;
  double expert_ns_flops = 0;
};
MuonShare muon_stage_share(const GptConfig& m, int t, const PipelineSplit& split, int stage, int e, int etp,
                           int steps, bool split_qkv);
/// Newton-Schulz FLOPs of one rank per iteration: each whole matrix is orthogonalised once in a
/// group of ranks (MuonTpMode::Distributed). Without the distributed optimizer every data-parallel
/// replica runs its stage's matrices, spread over its t tensor ranks (the experts' over their e
/// etp ranks); with it each matrix runs once per stage, spread over the stage's t c d ranks.
double rank_newton_schulz_flops(const MuonShare& s, const Layout& L);

/// FLOPs of one iteration over `samples` samples: the model's (Recompute::None:
/// GptConfig::paper_flops) or as executed (full: paper_flops(samples, true); selective: the
/// attention products' forward once more, 4 s^2 a dh per sample and layer).
double iteration_flops(const GptConfig& m, int64_t samples, Recompute recompute);
/// Whether a run of `m` in `prec` computes its attention with the fused (flash-style) kernel, as
/// the engine resolves GptConfig::attention: Fused and Unfused as pinned; Auto takes the fused
/// kernel where the device has one, which the planner reads off the precision: fp32 plans model
/// ptdp's CPU engine (a fused kernel for every head dim), 16-bit plans the CUDA engine (bf16 and
/// fp16 with head dim 64 or 128). The fused kernel keeps the row log-sum-exp (a / t s b fp32
/// per layer) where the unfused path keeps the s x s probabilities, and recomputes nothing under
/// selective recomputation (it has no probabilities to drop).
bool fused_attention(const GptConfig& m, Precision prec);
/// Activation bytes one transformer layer keeps per microbatch of b samples with tensor size t;
/// with `sequence_parallel` the activations every tensor rank keeps whole without it (the norms'
/// and the dropouts') are split over the t ranks (Korthikanti et al. 2022, Table 2: s b h (34/t
/// + 5 a s/(h t)) for the GPT in 16 bits, s b h 34 / t with selective recomputation). With
/// fused_attention the s x s terms are the fused kernel's row statistics instead (4 a s b / t).
///
/// An MoE model's layers are priced at the model's mix of dense and MoE layers: an MoE layer's
/// MLP keeps, per tensor rank, the k etp b s / t tokens routed to its experts (their hidden
/// states, fc1 outputs of moe_ffn / etp, twice with SwiGLU, and activations) and the shared
/// experts' as a dense MLP's; `etp` is the expert tensor size (0: t).
double layer_activation_bytes(const GptConfig& m, Precision prec, int t, int b, Recompute r,
                              bool sequence_parallel = false, int c = 1, int etp = 0);

/// Bytes of the inference key/value cache per token of context on one tensor rank, summed over
/// the decoder layers (generation runs no MTP module), in the precision's element size:
/// 2 g dh / t per layer for multi-head and grouped-query attention; with multi-latent attention
/// the normalised latent and the shared rotated RoPE key, kv_lora_rank + qk_pos_emb_head_dim per
/// layer, whole on every tensor rank (what core/layers/mla_attention.h caches: DeepSeek-V3's 576
/// numbers per token and layer against 2 a (dn + dr) = 49152 for its keys and values).
double kv_cache_bytes_per_token(const GptConfig& m, Precision prec, int t);

/// One GEMM shape C[m, n] = A[m, k] B[k, n], run `count` times (the batched attention products).
struct Gemm {
  double m = 0, n = 0, k = 0, count = 1;
};
/// The forward GEMMs of one decoder layer on one tensor rank for a microbatch of b samples, in
/// this order: QKV (b s, (a + 2g) dh / t, h), the scores Q K^T (s, s, dh; b a / t of them), the
/// context P V (s, dh, s; b a / t), the projection (b s, h, a dh / t), fc1 (b s, ffn / t, twice
/// with SwiGLU, h) and fc2 (b s, h, ffn / t). Their FLOPs, 2 m n k count summed, are
/// GptConfig::paper_flops' forward of one layer on one rank. The backward prices each as its
/// input gradient (m, k, n) and weight gradient (k, n, m).
/// With multi-latent attention (r_q = q_lora_rank, r = kv_lora_rank, dn, dr, dv the head dims,
/// dq = dn + dr) QKV is, in this order: linear_q_down_proj (b s, r_q, h) and linear_q_up_proj
/// (b s, a dq / t, r_q), or linear_q_proj (b s, a dq / t, h) without query compression;
/// linear_kv_down_proj (b s, r + dr, h); linear_kv_up_proj (b s, a (dn + dv) / t, r); then the
/// scores (s, s, dq), the context (s, dv, s) and the projection (b s, h, a dv / t). The down
/// projections are whole on every tensor rank. Their FLOPs are paper_flops' MLA term (Megatron's)
/// less its latent norms (2 (r_q + r) per token) at t = 1. (ptdp's engine pads each value head to
/// dq for its core attention kernels: the context GEMM it runs is (s, dq, s); this prices a
/// kernel with a separate value head dim, as Megatron's FLOPs count.)
/// Whatever the attention, the last five are the scores, the context, the projection, fc1, fc2.
/// With context parallelism c each rank runs its s / c tokens: M = b s / c, the scores (s / c,
/// s, dh) and the context (s / c, dh, s).
std::vector<Gemm> layer_gemms(const GptConfig& m, int t, int b, int c = 1);
/// The forward GEMMs of one MoE layer's MLP on one rank, in place of layer_gemms' fc1 and fc2:
/// the router (b s / (c t), E, h) on the rank's tokens; the routed experts as grouped GEMMs over
/// the E / e local experts, each of the k etp b s / (c t) routed tokens' share, M = k etp b s e /
/// (c t E) rows, (M, moe_ffn / etp (twice with SwiGLU), h) and (M, h, moe_ffn / etp); the shared
/// experts as a dense MLP of their width over t. With balanced routing the routed FLOPs are
/// GptConfig::paper_flops' k moe_ffn term over t c ranks.
std::vector<Gemm> moe_mlp_gemms(const GptConfig& m, int t, int b, int c, int e, int etp);
/// The logits layer's forward GEMM on one tensor rank: (b s / c, padded V / t, h).
Gemm logit_gemm(const GptConfig& m, int t, int b, int c = 1);
/// Bytes one decoder layer's memory-bound forward kernels move on one tensor rank for a
/// microbatch of b samples (read + written; elements of the training precision, dropout masks of
/// one byte): the two norms (s b h in and out each), the two bias-dropout-residual adds (two in,
/// one out, the mask with hidden dropout), the MLP activation (its ffn / t input, twice with
/// SwiGLU, and ffn / t output), and attention_elementwise_bytes. Backward kernels move about
/// twice as much. The time model prices them at the cluster's memory bandwidth.
/// With `sequence_parallel` the norms and the residual adds run on s / t of the tokens.
/// With context parallelism c each rank's share: 1 / c.
double layer_elementwise_bytes(const GptConfig& m, Precision prec, int t, int b, bool sequence_parallel = false,
                               int c = 1);
/// Of layer_elementwise_bytes, the attention's: the scaled, masked softmax over the scores
/// (a / t heads of s x s per sample, in and out) and, with attention dropout, its dropout; zero
/// with fused_attention, whose scores stay in its tiles (its backward is priced with one more
/// Q K^T, the scores it recomputes).
double attention_elementwise_bytes(const GptConfig& m, Precision prec, int t, int b, int c = 1);

/// Peak (microbatch, chunk) slots of pipeline rank `rank` under a schedule, in closed form (the
/// simulator's count, which the tests check).
int schedule_peak_slots(ScheduleKind kind, int p, int m, int v, int rank);

/// One microbatch's forward and backward seconds on a pipeline stage of layout L, in parts: per
/// decoder layer, and what the first stage (the embedding) and the last stage (the logits layer
/// and the loss) add. A stage of n layers takes n * layer (+ first) (+ last).
struct StageSeconds {
  double layer = 0, first = 0, last = 0;
};
StageSeconds stage_seconds(const PlanRequest& req, const Cluster& cluster, const Layout& layout);

/// Seconds of one microbatch's forward and backward (recomputation and tensor all-reduces
/// included) on each pipeline stage of a layout: its layers, plus the embedding on the first and
/// the logits layer and loss on the last. The pipeline runs at the pace of the largest.
std::vector<double> stage_microbatch_seconds(const PlanRequest& req, const Cluster& cluster, const Layout& layout);

/// Estimates one layout. With `simulate` the pipeline is simulated (exact bubble and slots);
/// otherwise the bubble is the closed form (p-1)/(v m) ((p-1)/(3m) for ZB-H1). Throws
/// Error(InvalidArgument) for a layout that cannot run (naming the numbers).
Estimate estimate(const PlanRequest& req, const Cluster& cluster, const Layout& layout, bool simulate);

/// The CPU engine's seconds per iteration for layout L when its t p d ranks (one thread each)
/// share `cores` cores: a rank that waits for a peer gives its core to the others, so the
/// iteration takes the longer of (a) the estimate with a core per rank (plan::cpu_cluster(W, W):
/// the critical path through the pipeline) and (b) every rank's work, its stages' forward and
/// backward with their tensor collectives (t d m microbatch-stages per stage) and its optimizer
/// step, spread over the cores, plus the data-parallel reduction and the embedding sync.
/// What bench_train prints next to its measurements.
double cpu_iteration_seconds(const PlanRequest& req, const Layout& L, double cores);

}  // namespace ptdp::plan
