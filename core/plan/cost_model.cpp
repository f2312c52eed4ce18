#include "core/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "base/error.h"
#include "core/pipeline/simulator.h"
#include "kernels/backend.h"

namespace ptdp::plan {

namespace {

// A GEMM runs below the large-size rate when its smallest dimension is small (tensor-core tiles
// of 128-256 and the fixed cost of a launch): rate = large rate * x / (x + kGemmHalfSize), with
// x the smallest dimension of the layer's GEMMs (tokens b s, or the per-rank width h / t).
// h / t = 1536 (145.6B at t = 8) keeps 96 % of the rate; h / t = 288 (1.7B at t = 8) 82 %.
constexpr double kGemmHalfSize = 64;
// Bytes a memory-bound kernel's backward moves per byte of its forward (see cost_parts).
constexpr double kElementwiseBackward = 1.25;
// Megatron's default data-parallel bucket: 40M elements; all but the last overlap the backward.
constexpr double kBucketElements = 40e6;

double bytes_of(Precision p) { return p == Precision::Fp32 ? 4.0 : 2.0; }
// The fp32 gradient buffer (Megatron's main_grad; ptdp's grads).
constexpr double kGradBytes = 4.0;
// Adam's two fp32 moments and, in 16-bit training, the fp32 master weights (both sharded by the
// distributed optimizer).
constexpr double kMomentBytes = 8.0;
double master_bytes(Precision p) { return p == Precision::Fp32 ? 0.0 : 4.0; }

// Ring all-reduce over n ranks of `bytes`: 2 (n-1)/n of the data crosses each rank's link.
double allreduce_seconds(int n, double bytes, double bandwidth, double latency) {
  if (n <= 1) return 0;
  return latency + 2.0 * (n - 1) / n * bytes / bandwidth;
}

// Reduce-scatter or all-gather: (n-1)/n of the data per link.
double half_ring_seconds(int n, double bytes, double bandwidth, double latency) {
  if (n <= 1) return 0;
  return latency + static_cast<double>(n - 1) / n * bytes / bandwidth;
}

// Bytes of one gradient element: fp32, or the 16-bit precision without
// --accumulate-allreduce-grads-in-fp32 (PlanRequest::grads_in_fp32).
double grad_bytes(const PlanRequest& req) { return req.grads_in_fp32 ? kGradBytes : bytes_of(req.precision); }

}  // namespace

const char* optimizer_name(PlanOptimizer o) {
  switch (o) {
    case PlanOptimizer::Adam: return "adam";
    case PlanOptimizer::Sgd: return "sgd";
    case PlanOptimizer::Muon: return "muon";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

void PlanRequest::validate() const {
  model.validate(1);
  PTDP_CHECK_ARG(global_batch_size > 0, str_cat("global batch size = ", global_batch_size, " is not > 0"));
  PTDP_CHECK_ARG(num_gpus >= 0, str_cat("number of GPUs = ", num_gpus, " is negative"));
  PTDP_CHECK_ARG(tensor >= 0 && pipeline >= 0 && layers_per_virtual_stage >= 0 && micro_batch >= 0,
                 str_cat("pinned sizes must be >= 0 (0: search), got t = ", tensor, ", p = ", pipeline,
                         ", layers per virtual stage = ", layers_per_virtual_stage, ", b = ", micro_batch));
  PTDP_CHECK_ARG(schedule >= -1 && schedule <= static_cast<int>(ScheduleKind::InterleavedZeroBubble) &&
                     schedule != static_cast<int>(ScheduleKind::ForwardOnly),
                 str_cat("schedule = ", schedule, " is not a training schedule kind (or -1: search)"));
  PTDP_CHECK_ARG(first_stage_layers >= 0 && last_stage_layers >= 0,
                 str_cat("pinned first and last stage layers must be >= 0 (0: search), got ", first_stage_layers,
                         " and ", last_stage_layers));
  PTDP_CHECK_ARG(layers_per_virtual_stage == 0 || (first_stage_layers == 0 && last_stage_layers == 0),
                 str_cat("layers per virtual stage = ", layers_per_virtual_stage,
                         " cannot be pinned with first or last stage layers (as in Megatron, which takes v from "
                         "--num-virtual-stages-per-pipeline-rank then); leave v to the search"));
  PTDP_CHECK_ARG(top > 0, str_cat("top = ", top, " is not > 0"));
  PTDP_CHECK_ARG(optimizer == PlanOptimizer::Adam || optimizer == PlanOptimizer::Sgd || optimizer == PlanOptimizer::Muon,
                 str_cat("optimizer = ", static_cast<int>(optimizer), " is not adam (0), sgd (1) or muon (2)"));
  PTDP_CHECK_ARG(muon_ns_steps >= 1 && muon_ns_steps <= 100,
                 str_cat("muon_ns_steps = ", muon_ns_steps, " is not in [1, 100]"));
  PTDP_CHECK_ARG(context_parallel >= 0,
                 str_cat("context parallel size = ", context_parallel, " is negative (1: none, 0: search)"));
  PTDP_CHECK_ARG(expert_model >= 0 && expert_tensor >= 0,
                 str_cat("pinned expert sizes must be >= 0 (0: search), got e = ", expert_model, ", etp = ",
                         expert_tensor));
  PTDP_CHECK_ARG(model.moe.enabled() || (expert_model <= 1 && expert_tensor == 0),
                 str_cat("expert model parallel size (--expert-model-parallel-size) ", expert_model,
                         " and expert tensor parallel size ", expert_tensor, " need an MoE model (--num-experts)"));
  PTDP_CHECK_ARG(expert_model == 0 || model.moe.num_experts % expert_model == 0,
                 str_cat("num_experts (--num-experts) ", model.moe.num_experts,
                         " is not a multiple of the pinned expert model parallel size (--expert-model-parallel-size) ",
                         expert_model));
  PTDP_CHECK_ARG(allow_recompute[0] || allow_recompute[1] || allow_recompute[2],
                 "no recomputation granularity is allowed (none, full and selective are all excluded)");
}

const char* schedule_short_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved1F1B: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
    case ScheduleKind::ForwardOnly: return "forward-only";
    case ScheduleKind::ZeroBubbleV: return "zb-v";
    case ScheduleKind::DualPipeV: return "dualpipev";
    case ScheduleKind::InterleavedZeroBubble: return "interleaved-zb";
  }
  return "?";
}

PipelineSplit Layout::split() const {
  return PipelineSplit{p, v, first, last, {}};
}

std::string Layout::str() const {
  std::string s = str_cat("t=", t, c > 1 ? str_cat(" c=", c) : std::string(), " p=", p);
  if (first > 0) s += str_cat(" first=", first);
  if (last > 0) s += str_cat(" last=", last);
  s += str_cat(" d=", d);
  if (e > 1 || (etp > 0 && etp != t)) s += str_cat(" e=", e, " etp=", expert_tensor());
  if (v > 1) s += str_cat(" v=", v);
  const bool plain = p == 1 && schedule == ScheduleKind::OneFOneB;
  s += str_cat(" b=", b, " m=", m, " ", plain ? "no-pipeline" : schedule_short_name(schedule), " recompute=",
               recompute_name(recompute));
  if (distributed_optimizer) s += " dist-opt";
  if (sequence_parallel) s += " sp";
  return s;
}

double paper_parameters(const GptConfig& m) {
  const double l = m.num_layers, h = m.hidden_size, s = m.seq_length, V = m.vocab_size;
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

int64_t published_parameters(const GptConfig& m) {
  GptConfig unpadded = m;
  unpadded.make_vocab_size_divisible_by = 1;
  return unpadded.parameter_count(1);
}

int64_t stage_parameters(const GptConfig& m, int t, int p, int v, int stage) {
  PipelineSplit split;
  split.pipeline = p;
  split.virtual_stages = v;
  return stage_parameters(m, t, split, stage);
}

namespace {

int64_t dense_stage_parameters(const GptConfig& m, int t, const PipelineSplit& split_of_layers, int stage);

// One MoE layer's MLP parameters on one rank: the routed experts' (E / e local experts, each
// split over etp) and the rest (the router and its expert bias and the shared experts' gate,
// replicated; the shared experts split over t like a dense MLP).
struct MoeLayerParams {
  int64_t experts = 0, other = 0;
};
MoeLayerParams moe_layer_params(const GptConfig& m, int t, int e, int etp) {
  const int64_t h = m.hidden_size, fe = m.moe_ffn(), fe1 = m.swiglu ? 2 * fe : fe;
  const int64_t sh = m.moe.shared_expert_intermediate_size, sh1 = m.swiglu ? 2 * sh : sh;
  const bool bias = m.add_bias_linear;
  MoeLayerParams p;
  p.experts = m.moe.num_experts / e * ((fe1 * h + fe * h) / etp + (bias ? fe1 / etp + h : 0));
  p.other = m.moe.num_experts * h + (m.moe.enable_expert_bias ? m.moe.num_experts : 0) +
            (m.moe.shared_expert_gate ? h : 0);
  if (sh > 0) p.other += (sh1 * h + sh * h + (bias ? sh1 : 0)) / t + (bias ? h : 0);
  return p;
}

// stage_parameters with the routed experts counted (`experts_only`) or not.
int64_t count_stage_parameters(const GptConfig& m, int t, const PipelineSplit& split_of_layers, int stage, int e,
                               int etp, bool experts_only) {
  const int64_t dense = experts_only ? 0 : dense_stage_parameters(m, t, split_of_layers, stage);
  if (!m.moe.enabled()) return dense;
  // Each MoE layer of the stage's chunks trades the dense MLP counted above for its experts.
  const int64_t h = m.hidden_size, f = m.ffn(), fc1 = m.swiglu ? 2 * f : f;
  const int64_t dense_mlp = (fc1 * h + (m.add_bias_linear ? fc1 : 0) + f * h) / t + (m.add_bias_linear ? h : 0);
  const MoeLayerParams moe = moe_layer_params(m, t, e, etp > 0 ? etp : t);
  const std::vector<int> layers = chunk_layer_counts(m.num_layers, split_of_layers);
  int64_t n = dense;
  int first = 0;
  for (int c = 0; c < static_cast<int>(layers.size()); ++c) {
    const int count = layers[static_cast<std::size_t>(c)];
    if (c % split_of_layers.pipeline == stage) {
      for (int layer = first; layer < first + count; ++layer) {
        if (!m.moe.is_moe_layer(layer)) continue;
        n += experts_only ? moe.experts : moe.experts + moe.other - dense_mlp;
      }
      if (c == static_cast<int>(layers.size()) - 1 && m.mtp_moe()) {
        n += m.mtp_num_layers * (experts_only ? moe.experts : moe.experts + moe.other - dense_mlp);
      }
    }
    first += count;
  }
  return n;
}

}  // namespace

int64_t stage_parameters(const GptConfig& m, int t, const PipelineSplit& split, int stage, int e, int etp) {
  return count_stage_parameters(m, t, split, stage, e, etp, false);
}

int64_t stage_expert_parameters(const GptConfig& m, int t, const PipelineSplit& split, int stage, int e, int etp) {
  return count_stage_parameters(m, t, split, stage, e, etp, true);
}

namespace {

// One matrix [rows, cols] of Muon's: its Newton-Schulz FLOPs.
double ns(double rows, double cols, int steps) {
  return newton_schulz_flops(static_cast<int64_t>(rows), static_cast<int64_t>(cols), steps);
}

// A dense MLP of width f (linear_fc1 [f or 2f, h], linear_fc2 [h, f]): its weights on a rank
// (split over `ranks`) and the NS FLOPs of its whole matrices.
MuonShare mlp_share(const GptConfig& m, int64_t f, int ranks, int steps, bool split) {
  const int64_t h = m.hidden_size, fc1 = m.swiglu ? 2 * f : f;
  MuonShare s;
  if (f <= 0) return s;
  s.params = (fc1 * h + f * h) / ranks;
  s.ns_flops = (m.swiglu && split ? 2.0 * ns(f, h, steps) : ns(fc1, h, steps)) + ns(h, f, steps);
  return s;
}

// A decoder layer's attention (linear_qkv or MLA's projections, linear_proj) on one tensor rank.
MuonShare attention_share(const GptConfig& m, int t, int steps, bool split) {
  const int64_t h = m.hidden_size, ctx = m.attention_width();
  MuonShare s;
  if (m.multi_latent_attention) {
    // The down projections whole on every rank, the up projections (or linear_q_proj) by heads.
    const int64_t a = m.num_attention_heads, dq = m.mla_qk_dim(), rq = m.q_lora_rank, r = m.kv_lora_rank;
    const int64_t dr = m.qk_pos_emb_head_dim, up = a * (int64_t{m.qk_head_dim} + m.v_head_dim);
    const int64_t whole = (rq > 0 ? rq * h : 0) + (r + dr) * h;
    const int64_t heads = (rq > 0 ? a * dq * rq : a * dq * h) + up * r;
    s.params = whole + (heads + ctx * h) / t;
    s.ns_flops = (rq > 0 ? ns(rq, h, steps) + ns(a * dq, rq, steps) : ns(a * dq, h, steps)) + ns(r + dr, h, steps) +
                 ns(up, r, steps) + ns(h, ctx, steps);
    return s;
  }
  const int64_t dh = m.head_dim(), a = m.num_attention_heads, g = m.query_groups();
  s.params = (m.qkv_rows() * h + ctx * h) / t;
  s.ns_flops = (split ? ns(a * dh, h, steps) + 2.0 * ns(g * dh, h, steps) : ns(m.qkv_rows(), h, steps)) +
               ns(h, ctx, steps);
  return s;
}

void add(MuonShare& to, const MuonShare& s, double times = 1.0) {
  to.params += static_cast<int64_t>(times) * s.params;
  to.expert_params += static_cast<int64_t>(times) * s.expert_params;
  to.ns_flops += times * s.ns_flops;
  to.expert_ns_flops += times * s.expert_ns_flops;
}

// One decoder layer (dense or MoE MLP) on one rank.
MuonShare layer_share(const GptConfig& m, int t, int e, int etp, int steps, bool split, bool moe_layer) {
  MuonShare s = attention_share(m, t, steps, split);
  if (!moe_layer) {
    add(s, mlp_share(m, m.ffn(), t, steps, split));
    return s;
  }
  // The router [E, h] and the shared-expert gate [1, h] replicated; the shared experts a dense
  // MLP over t; the E / e local routed experts each split over etp, every expert its own matrices.
  const int64_t h = m.hidden_size, E = m.moe.num_experts;
  s.params += E * h + (m.moe.shared_expert_gate ? h : 0);
  s.ns_flops += ns(E, h, steps) + (m.moe.shared_expert_gate ? ns(1, h, steps) : 0.0);
  add(s, mlp_share(m, m.moe.shared_expert_intermediate_size, t, steps, split));
  const MuonShare expert = mlp_share(m, m.moe_ffn(), etp, steps, split);
  s.params += E / e * expert.params;
  s.expert_params += E / e * expert.params;
  s.expert_ns_flops += static_cast<double>(E) * expert.ns_flops;
  return s;
}

}  // namespace

MuonShare muon_stage_share(const GptConfig& m, int t, const PipelineSplit& split_of_layers, int stage, int e, int etp,
                           int steps, bool split) {
  if (etp <= 0) etp = t;
  const std::vector<int> layers = chunk_layer_counts(m.num_layers, split_of_layers);
  const int chunks = static_cast<int>(layers.size());
  MuonShare s;
  int first = 0;
  for (int c = 0; c < chunks; ++c) {
    const int count = layers[static_cast<std::size_t>(c)];
    if (c % split_of_layers.pipeline == stage) {
      for (int layer = first; layer < first + count; ++layer) {
        add(s, layer_share(m, t, e, etp, steps, split, m.moe.enabled() && m.moe.is_moe_layer(layer)));
      }
      if (c == chunks - 1 && m.mtp_num_layers > 0) {
        // Each MTP module: eh_proj [h, 2h] (column-parallel) and its layer.
        const int64_t h = m.hidden_size;
        MuonShare module = layer_share(m, t, e, etp, steps, split, m.moe.enabled() && m.mtp_moe());
        module.params += 2 * h * h / t;
        module.ns_flops += ns(h, 2.0 * h, steps);
        add(s, module, m.mtp_num_layers);
      }
    }
    first += count;
  }
  return s;
}

double rank_newton_schulz_flops(const MuonShare& s, const Layout& L) {
  const double stage_ranks = static_cast<double>(L.t) * L.c * L.d;
  if (L.distributed_optimizer) return (s.ns_flops + s.expert_ns_flops) / stage_ranks;
  return s.ns_flops / L.t + s.expert_ns_flops / (static_cast<double>(L.e) * L.expert_tensor());
}

namespace {

int64_t dense_stage_parameters(const GptConfig& m, int t, const PipelineSplit& split_of_layers, int stage) {
  // The layout of docs/architecture.md ("Parameter names and layouts"), one tensor rank's slice of it.
  // Column-parallel linear_qkv and linear_fc1 split their weight and bias by rows (whole query
  // groups; SwiGLU's gate and up halves each), row-parallel linear_proj and linear_fc2 split
  // their weight by columns and keep their bias whole; norms (input, pre-MLP, q/k, final) are
  // replicated; the word embedding and the output layer split the padded vocabulary.
  const int64_t h = m.hidden_size, f = m.ffn(), vp = m.padded_vocab(t), dh = m.head_dim();
  const int64_t qkv = m.qkv_rows(), ctx = m.attention_width(), fc1 = m.swiglu ? 2 * f : f;
  const bool rms = m.normalization == Normalization::RMSNorm;
  const int64_t norm = rms ? h : 2 * h;                                  // one hidden-size norm
  // q_layernorm, k_layernorm: replicated per-head norms, or split by heads across them.
  const bool across = m.qk_layernorm && m.qk_layernorm_across_heads;
  const int64_t qk_norm = m.qk_layernorm && !across ? 2 * (rms ? dh : 2 * dh) : 0;
  const int64_t qk_split = across ? (int64_t{m.num_attention_heads} + m.query_groups()) * dh : 0;
  const int64_t split = qkv * h + (m.qkv_bias() ? qkv : 0) + ctx * h + fc1 * h + (m.add_bias_linear ? fc1 : 0) + f * h +
                        qk_split;
  const int64_t replicated = 2 * norm + qk_norm + (m.add_bias_linear ? 2 * h : 0);  // + proj, fc2 biases
  int64_t layer = replicated + split / t;
  if (m.multi_latent_attention) {
    // MLA in place of linear_qkv (and the per-head q/k norms): the down projections and the
    // latent norms replicated, the up projections (and linear_q_proj) split by heads.
    const int64_t a = m.num_attention_heads, dq = m.mla_qk_dim(), rq = m.q_lora_rank, r = m.kv_lora_rank;
    const int64_t latent_norm = !m.qk_layernorm ? 0 : rms ? 1 : 2;
    const int64_t whole = (rq > 0 ? rq * h + latent_norm * rq : 0) + (r + m.qk_pos_emb_head_dim) * h + latent_norm * r;
    const int64_t heads = (rq > 0 ? a * dq * rq : a * dq * h) + a * (int64_t{m.qk_head_dim} + m.v_head_dim) * r;
    layer = 2 * norm + (m.add_bias_linear ? 2 * h : 0) + whole +
            (heads + ctx * h + fc1 * h + (m.add_bias_linear ? fc1 : 0) + f * h) / t;
  }
  const int p = split_of_layers.pipeline;
  const std::vector<int> layers = chunk_layer_counts(m.num_layers, split_of_layers);
  const int chunks = static_cast<int>(layers.size());
  int64_t n = 0;
  for (int c = stage; c < chunks; c += p) {
    n += layers[static_cast<std::size_t>(c)] * layer;
    if (c == 0) {
      n += vp * h / t;
      if (m.learned_positions()) n += static_cast<int64_t>(m.max_positions()) * h;
    }
    if (c == chunks - 1) {
      n += norm;                                             // final norm
      if (!m.tie_embeddings || chunks > 1) n += vp * h / t;  // output layer, or the tied copy
      // The MTP modules (on the last chunk, with the output layer): enorm, hnorm and
      // final_layernorm replicated, the column-parallel eh_proj [h, 2h], a layer (its MLP dense
      // here; count_stage_parameters trades it for experts where mtp_moe()). An untied
      // model on p > 1 also keeps a copy of the word embedding there for the modules' inputs.
      if (m.mtp_num_layers > 0) {
        n += m.mtp_num_layers * (3 * norm + 2 * h * h / t + layer);
        if (!m.tie_embeddings && chunks > 1) n += vp * h / t;
      }
    }
  }
  return n;
}

}  // namespace

int64_t stage_parameters(const GptConfig& m, int t, const PipelineSplit& split, int stage) {
  return count_stage_parameters(m, t, split, stage, 1, t, false);
}

namespace {

// FLOPs come from GptConfig::paper_flops (Megatron's num_floating_point_operations), the one
// place ptdp counts them; the planner only splits them. Its layer term is 12 (16 recomputing)
// units of the layers' GEMMs and attention products, so the difference of the two is one
// forward of all layers; the rest, 6 B s h V, is the logit GEMM's forward and backward. With
// multi-token prediction the layer terms hold the D modules' layers too (l + D layers), and the
// rest also holds their layers, projections and logits, all on the last stage with the logits.
double layer_forward_flops(const GptConfig& m, double samples) {
  const auto n = static_cast<int64_t>(samples);
  return (m.paper_flops(n, true) - m.paper_flops(n, false)) / (m.num_layers + m.mtp_num_layers);
}

// One MTP module's forward besides its layer and logits: Megatron's 2 s (3h + 2h^2) per sample
// (the norms and eh_proj).
double mtp_projection_forward_flops(const GptConfig& m, double samples) {
  const double h = m.hidden_size;
  return 2.0 * samples * m.seq_length * (3.0 * h + 2.0 * h * h);
}

// One logit GEMM's forward over `vocab` rows (the padded vocabulary is what runs); the model
// runs 1 + D of them (the MTP modules share the output layer).
double logit_forward_flops(const GptConfig& m, double samples, double vocab) {
  const auto n = static_cast<int64_t>(samples);
  const double D = m.mtp_num_layers;
  const double logits = m.paper_flops(n, false) - 3.0 * (m.num_layers + D) * layer_forward_flops(m, samples) -
                        3.0 * D * mtp_projection_forward_flops(m, samples);
  return logits / 3.0 / (1.0 + D) * vocab / m.vocab_size;
}

// What selective recomputation repeats: the forward of the attention products Q K^T and P V of
// one layer (2 s^2 a dh FLOPs each per sample; with MLA 2 s^2 a (dn + dr) and 2 s^2 a dv), the
// s / h part of paper_flops' attention term.
double attention_core_flops(const GptConfig& m, double samples) {
  const double s = m.seq_length;
  if (m.multi_latent_attention) {
    return samples * 2.0 * s * s * m.num_attention_heads * static_cast<double>(m.mla_qk_dim() + m.v_head_dim);
  }
  return samples * 4.0 * s * s * static_cast<double>(m.attention_width());
}

// Forward-equivalents of one layer's forward that recomputation adds.
double recompute_flops(const GptConfig& m, double samples, Recompute r) {
  switch (r) {
    case Recompute::Full: return layer_forward_flops(m, samples);
    case Recompute::Selective: return attention_core_flops(m, samples);
    case Recompute::None: return 0;
  }
  return 0;
}

}  // namespace

double iteration_flops(const GptConfig& m, int64_t samples, Recompute recompute) {
  switch (recompute) {
    case Recompute::None: return m.paper_flops(samples);
    case Recompute::Full: return m.paper_flops(samples, true);
    case Recompute::Selective:
      return m.paper_flops(samples) +
             (m.num_layers + m.mtp_num_layers) * attention_core_flops(m, static_cast<double>(samples));
  }
  return m.paper_flops(samples);
}

bool fused_attention(const GptConfig& m, Precision prec) {
  switch (m.attention) {
    case AttentionImpl::Fused: return true;
    case AttentionImpl::Unfused: return false;
    case AttentionImpl::Auto: break;
  }
  if (prec == Precision::Fp32) return true;  // the CPU engine's kernel takes every head dim
  const int64_t dh = m.attention_head_dim();  // MLA: qk_head_dim + qk_pos_emb_head_dim
  return dh == 64 || dh == 128;  // the CUDA engine's flash attention (kernels/cuda/flash_attention.cu)
}

namespace {

// One layer's MLP widths per token, before the split over t: fc1's output (SwiGLU's two halves),
// the activation's, and the routed copies of the hidden state the experts keep as their input.
// An MoE model's are the mean over its layers (an MoE layer's routed experts see k etp / t of
// the b s tokens per rank, split over etp: k moe_ffn per token over t, as a dense MLP's ffn).
struct MlpWidths {
  double fc1 = 0, act = 0, routed_hidden = 0;
};
MlpWidths mlp_widths(const GptConfig& m, int t, int etp) {
  const double f = m.ffn();
  MlpWidths w{m.swiglu ? 2.0 * f : f, f, 0.0};
  if (!m.moe.enabled()) return w;
  const double share = static_cast<double>(m.num_moe_layers()) / m.num_layers;
  const double k = m.moe.router_topk, fe = m.moe_ffn(), sh = m.moe.shared_expert_intermediate_size;
  const double glu = m.swiglu ? 2.0 : 1.0;
  w.fc1 = (1.0 - share) * w.fc1 + share * glu * (k * fe + sh);
  w.act = (1.0 - share) * w.act + share * (k * fe + sh);
  w.routed_hidden = share * k * (etp > 0 ? etp : t) * m.hidden_size;
  return w;
}

}  // namespace

namespace {

// layer_activation_bytes with multi-latent attention (c = 1).
double mla_layer_activation_bytes(const GptConfig& m, Precision prec, int t, int b, Recompute r,
                                  bool sequence_parallel, const MlpWidths& mlp) {
  const double whole = sequence_parallel ? 1.0 / t : 1.0;
  const double s = m.seq_length, h = m.hidden_size, a = m.num_attention_heads, sb = s * b;
  const double dq = static_cast<double>(m.mla_qk_dim()), dv = m.v_head_dim;
  const double rq = m.q_lora_rank, rkv = m.kv_lora_rank, dr = m.qk_pos_emb_head_dim;
  const double mlp_kept = mlp.fc1 + mlp.act + mlp.routed_hidden;
  const double stats = m.normalization == Normalization::RMSNorm ? 1.0 : 2.0;
  // The latents, whole on every tensor rank (gathered along the sequence under sequence
  // parallelism): the query latent before and after its norm (q_up's input), the down
  // projection's output [r + dr] (kv_norm's input and the shared RoPE key) and the normalised
  // latent (kv_up's input); the latent norms' row statistics.
  const double latents = (rq > 0 ? 2.0 * rq : 0.0) + (rkv + dr) + rkv;
  const double latent_stats = m.qk_layernorm ? (rq > 0 ? 2.0 : 1.0) * stats : 0.0;
  const bool fused = fused_attention(m, prec);
  const double lse_bytes = 4.0 * (a / t) * b * s;
  if (prec == Precision::Fp32) {
    // The CPU engine: as for the dense layer, with its MLA tensors per tensor rank: the core
    // attention's input in linear_qkv's layout (query, key and value heads of dq each, the value
    // padded with zeros; mla_attention.h), its context (dq per head) and linear_proj's input
    // (dv per head).
    if (r == Recompute::Full) return 4.0 * sb * h * whole;
    double elements = (sb * 4.0 * h + 2.0 * stats * sb) * whole + sb * (latents + latent_stats) +
                      sb * (a * (3.0 * dq + dq + dv) + mlp_kept) / t;
    if (fused) return 4.0 * elements + lse_bytes;
    if (r == Recompute::None) elements += (m.attention_dropout > 0 ? 2.0 : 1.0) * (a / t) * b * s * s;
    return 4.0 * elements;
  }
  // 16-bit, Korthikanti et al. 2022's terms with MLA's tensors: the replicated norms' inputs,
  // masks and statistics as the dense layer's; the latents (16-bit) and their norms' fp32
  // statistics on every rank; per tensor rank the query and key heads (a dq), the values and
  // the context (a dv each), MLP as the dense layer's; the s^2 terms unless fused or recomputed.
  if (r == Recompute::Full) return 2.0 * sb * h * whole;
  double bytes = (sb * h * (8.0 + (m.hidden_dropout > 0 ? 2.0 : 0.0)) + 2.0 * 4.0 * stats * sb) * whole;
  bytes += sb * (2.0 * latents + 4.0 * latent_stats);
  bytes += (2.0 * (2.0 * a * dq + 2.0 * a * dv) + 2.0 * mlp_kept) * sb / t;
  if (fused) return bytes + lse_bytes;
  if (r == Recompute::None) bytes += (m.attention_dropout > 0 ? 5.0 : 2.0) * a * s * s * b / t;
  return bytes;
}

}  // namespace

double layer_activation_bytes(const GptConfig& m, Precision prec, int t, int b, Recompute r, bool sequence_parallel,
                              int c, int etp) {
  // Context parallelism keeps each rank's s / c tokens: every term below per token, the scores
  // s / c x s.
  if (c > 1) return layer_activation_bytes(m, prec, t, b, r, sequence_parallel, 1, etp) / c;
  // What every tensor rank keeps whole without sequence parallelism is split over t with it.
  const double whole = sequence_parallel ? 1.0 / t : 1.0;
  const double s = m.seq_length, h = m.hidden_size, a = m.num_attention_heads, sb = s * b;
  const double g = m.query_groups(), dh = m.head_dim(), ctx = static_cast<double>(m.attention_width());
  const double qkv = static_cast<double>(m.qkv_rows());
  const MlpWidths mlp = mlp_widths(m, t, etp);
  if (m.multi_latent_attention) return mla_layer_activation_bytes(m, prec, t, b, r, sequence_parallel, mlp);
  const double mlp_kept = mlp.fc1 + mlp.act + mlp.routed_hidden;  // per token, split over t
  // Row statistics a norm keeps for its backward: LayerNorm mean and rstd, RMSNorm rstd (fp32).
  const double stats = m.normalization == Normalization::RMSNorm ? 1.0 : 2.0;
  // The fused kernel keeps its fp32 row log-sum-exp [b, a/t, s] in place of the probabilities
  // (it recomputes them tile by tile in the backward, whatever the recomputation setting).
  const bool fused = fused_attention(m, prec);
  const double lse_bytes = 4.0 * (a / t) * b * s;
  if (prec == Precision::Fp32) {
    // ptdp's CPU engine keeps fp32 tensors (dropout masks are redrawn from Philox, never
    // stored; RoPE rotates q and k in place). Per layer: its input and the pre-MLP norm's input
    // x1 (each held by its norm), the two norm outputs (held by QKV and fc1), the norms' row
    // statistics; per tensor rank QKV's output [sb, (a + 2g) dh / t], the attention context
    // [sb, a dh / t] (held by the projection), fc1's output [sb, ffn / t, twice with SwiGLU]
    // and the activation's [sb, ffn / t]; with --qk-layernorm the q and k heads before their
    // norm and its statistics; and the attention probabilities before and after dropout
    // [b, a/t, s, s] (one tensor without attention dropout).
    if (r == Recompute::Full) return 4.0 * sb * h * whole;
    double elements = (sb * 4.0 * h + 2.0 * stats * sb) * whole + sb * (qkv + ctx + mlp_kept) / t;
    // Across heads: one statistic per row of q and of k.
    if (m.qk_layernorm) elements += sb * ((a + g) / t * dh + (m.qk_layernorm_across_heads ? 2.0 : (a + g) / t) * stats);
    if (fused) return 4.0 * elements + lse_bytes;
    if (r == Recompute::None) elements += (m.attention_dropout > 0 ? 2.0 : 1.0) * (a / t) * b * s * s;
    return 4.0 * elements;
  }
  // Korthikanti et al. 2022, 16-bit activations without sequence parallelism, per layer:
  // s b h (10 + 24/t) + 5 a s^2 b / t bytes for the GPT (selective drops the 5 a s^2 b / t;
  // full keeps the 2 s b h input). Term by term, with the Llama options:
  //  - replicated: the inputs of both norms, of QKV and of fc1 (2 s b h each); the dropout
  //    masks after the projection and fc2 (s b h each, none without hidden dropout); the
  //    norms' fp32 row statistics (two per row for LayerNorm, one for RMSNorm);
  //  - per tensor rank: q, k, v (a, g, g heads of dh; RoPE rotates q and k in place, so the
  //    rotated ones are what QK^T keeps) and the context (a dh), 2 bytes each; fc1's output
  //    (ffn, or 2 ffn with SwiGLU) and the activation's (ffn), 2 bytes each: 16 s b h / t for
  //    the GPT's GeLU, 6 s b ffn / t with SwiGLU; with --qk-layernorm the q and k heads before
  //    their norm and its statistics;
  //  - per tensor rank, without recomputation: the softmax output (2 a s^2 b), and with
  //    attention dropout its mask (a s^2 b) and output (2 a s^2 b).
  //  With sequence parallelism (Korthikanti et al. 2022, section 4.2.2) the replicated part is
  //  split over the t ranks: s b h (10 + 24/t) becomes s b h 34 / t.
  if (r == Recompute::Full) return 2.0 * sb * h * whole;
  double bytes = (sb * h * (8.0 + (m.hidden_dropout > 0 ? 2.0 : 0.0)) + 2.0 * 4.0 * stats * sb) * whole;
  bytes += (2.0 * (ctx + 2.0 * g * dh + ctx) + 2.0 * mlp_kept) * sb / t;
  if (m.qk_layernorm) {
    bytes += sb * ((a + g) / t * 2.0 * dh + (m.qk_layernorm_across_heads ? 2.0 : (a + g) / t) * 4.0 * stats);
  }
  if (fused) return bytes + lse_bytes;
  if (r == Recompute::None) bytes += (m.attention_dropout > 0 ? 5.0 : 2.0) * a * s * s * b / t;
  return bytes;
}

double kv_cache_bytes_per_token(const GptConfig& m, Precision prec, int t) {
  const double per_layer = m.multi_latent_attention
                               ? static_cast<double>(m.kv_lora_rank) + m.qk_pos_emb_head_dim
                               : 2.0 * m.query_groups() * m.head_dim() / t;
  return m.num_layers * per_layer * bytes_of(prec);
}

std::vector<Gemm> layer_gemms(const GptConfig& m, int t, int b, int c) {
  const double s = m.seq_length, h = m.hidden_size, tokens = static_cast<double>(b) * s / c, q = s / c;
  const double dh = m.head_dim(), heads = static_cast<double>(m.num_attention_heads) / t;
  const double qkv = static_cast<double>(m.qkv_rows()), ctx = static_cast<double>(m.attention_width());
  const double f = m.ffn(), fc1 = m.swiglu ? 2.0 * f : f;
  if (m.multi_latent_attention) {
    const double a = m.num_attention_heads, dq = static_cast<double>(m.mla_qk_dim()), dv = m.v_head_dim;
    const double rq = m.q_lora_rank, r = m.kv_lora_rank, dr = m.qk_pos_emb_head_dim, dn = m.qk_head_dim;
    std::vector<Gemm> out;
    if (rq > 0) {
      out.push_back({tokens, rq, h, 1});           // linear_q_down_proj (whole on every rank)
      out.push_back({tokens, a * dq / t, rq, 1});  // linear_q_up_proj
    } else {
      out.push_back({tokens, a * dq / t, h, 1});   // linear_q_proj
    }
    out.push_back({tokens, r + dr, h, 1});             // linear_kv_down_proj (whole on every rank)
    out.push_back({tokens, a * (dn + dv) / t, r, 1});  // linear_kv_up_proj
    out.push_back({q, s, dq, b * heads});              // scores over dn + dr
    out.push_back({q, dv, s, b * heads});              // context of dv
    out.push_back({tokens, h, ctx / t, 1});            // projection from a dv
    out.push_back({tokens, fc1 / t, h, 1});
    out.push_back({tokens, h, f / t, 1});
    return out;
  }
  return {
      {tokens, qkv / t, h, 1},   // QKV
      {q, s, dh, b * heads},     // scores Q K^T (this rank's queries against every key)
      {q, dh, s, b * heads},     // context P V
      {tokens, h, ctx / t, 1},   // projection
      {tokens, fc1 / t, h, 1},   // fc1
      {tokens, h, f / t, 1},     // fc2
  };
}

std::vector<Gemm> moe_mlp_gemms(const GptConfig& m, int t, int b, int c, int e, int etp) {
  const int x = etp > 0 ? etp : t;
  const double h = m.hidden_size, tokens = static_cast<double>(b) * m.seq_length / c;
  const double experts = m.moe.num_experts, local = experts / e, k = m.moe.router_topk;
  const double fe = m.moe_ffn(), fe1 = m.swiglu ? 2.0 * fe : fe;
  const double rows = tokens * k * x / t / local;  // each local expert's share of the routed tokens
  std::vector<Gemm> out = {
      {tokens / t, experts, h, 1},    // router logits on this rank's s / t tokens
      {rows, fe1 / x, h, local},      // routed experts' fc1 (a grouped GEMM)
      {rows, h, fe / x, local},       // routed experts' fc2
  };
  const double sh = m.moe.shared_expert_intermediate_size;
  if (sh > 0) {
    out.push_back({tokens, (m.swiglu ? 2.0 * sh : sh) / t, h, 1});  // shared experts' fc1
    out.push_back({tokens, h, sh / t, 1});                          // shared experts' fc2
  }
  return out;
}

Gemm logit_gemm(const GptConfig& m, int t, int b, int c) {
  return {static_cast<double>(b) * m.seq_length / c, static_cast<double>(m.padded_vocab(t)) / t,
          static_cast<double>(m.hidden_size), 1};
}

double attention_elementwise_bytes(const GptConfig& m, Precision prec, int t, int b, int c) {
  if (fused_attention(m, prec)) return 0;  // the scores never leave the kernel's tiles
  const double e = bytes_of(prec), s = m.seq_length;
  const double scores = static_cast<double>(m.num_attention_heads) / t * b * s * s / c;
  return scores * (2.0 * e + (m.attention_dropout > 0 ? 2.0 * e + 1.0 : 0.0));
}

double layer_elementwise_bytes(const GptConfig& m, Precision prec, int t, int b, bool sequence_parallel, int c) {
  const double e = bytes_of(prec), sb = static_cast<double>(b) * m.seq_length / c, h = m.hidden_size;
  const double f = m.moe.enabled() ? mlp_widths(m, t, 0).act : m.ffn(), whole = sequence_parallel ? 1.0 / t : 1.0;
  double norms = 2.0 * 2.0 * e * sb * h * whole;
  // MLA's latent norms (whole on every rank): in and out.
  if (m.multi_latent_attention && m.qk_layernorm) norms += 2.0 * e * sb * (m.q_lora_rank + m.kv_lora_rank);
  const double residual_adds = 2.0 * (3.0 * e + (m.hidden_dropout > 0 ? 1.0 : 0.0)) * sb * h * whole;
  // An MoE layer's activation runs on the routed tokens' k moe_ffn and the shared experts' widths.
  const double activation = (m.swiglu ? 3.0 : 2.0) * e * sb * f / t;
  return norms + residual_adds + activation + attention_elementwise_bytes(m, prec, t, b, c);
}

int schedule_peak_slots(ScheduleKind kind, int p, int m, int v, int rank) {
  switch (kind) {
    case ScheduleKind::GPipe: return m * v;
    case ScheduleKind::ForwardOnly: return 1;  // each activation is released after its forward
    case ScheduleKind::OneFOneB: return std::min(m, p - rank);
    // The deferred weight gradients keep every rank's slots until the cool-down.
    case ScheduleKind::ZeroBubbleH1: return std::min(m, p);
    case ScheduleKind::Interleaved1F1B: {
      // Megatron's warm-up: 2 (p - rank - 1) + (v - 1) p forwards, then one more before the
      // first backward; with m = p every forward comes first.
      if (m == p) return m * v;
      const int warmup = 2 * (p - rank - 1) + (v - 1) * p;
      return std::min(m * v, warmup + 1);
    }
    // Generated by list scheduling: the peak is what the schedule's own lists hold.
    case ScheduleKind::ZeroBubbleV:
    case ScheduleKind::DualPipeV:
    case ScheduleKind::InterleavedZeroBubble: {
      // One generation and simulation per (kind, p, m, v), shared by every rank and candidate.
      static std::mutex mutex;
      static std::map<std::tuple<int, int, int, int>, std::vector<int>> peaks;
      const auto key = std::make_tuple(static_cast<int>(kind), p, m, v);
      std::lock_guard<std::mutex> lock(mutex);
      auto it = peaks.find(key);
      if (it == peaks.end()) {
        const SimulationResult r = simulate(make_schedule(kind, p, m, v), ScheduleCosts{});
        it = peaks.emplace(key, std::vector<int>(r.peak_slots.begin(), r.peak_slots.end())).first;
      }
      return it->second.at(static_cast<std::size_t>(rank));
    }
  }
  return m * v;
}

namespace {

void check_layout_runs(const PlanRequest& req, const Layout& L) {
  const GptConfig& g = req.model;
  const int t = L.t, p = L.p, d = L.d, v = L.v, b = L.b, m = L.m;
  PTDP_CHECK_ARG(t > 0 && p > 0 && d > 0 && v > 0 && b > 0 && m > 0, str_cat("layout ", L.str(), " has a size <= 0"));
  if (L.first > 0 || L.last > 0) {
    try {
      chunk_layer_counts(g.num_layers, L.split());
    } catch (const Error& e) {
      throw_error(ErrorCode::InvalidArgument, str_cat("layout ", L.str(), ": ", e.what()));
    }
  } else {
    PTDP_CHECK_ARG(g.num_layers % (p * v) == 0,
                   str_cat("layout ", L.str(), ": ", g.num_layers, " layers do not split over p * v = ", p * v, " chunks"));
  }
  PTDP_CHECK_ARG(static_cast<int64_t>(m) * b * d == req.global_batch_size,
                 str_cat("layout ", L.str(), ": m * b * d = ", static_cast<int64_t>(m) * b * d,
                         " is not the global batch ", req.global_batch_size));
  PTDP_CHECK_ARG(L.c > 0 && (L.c == 1 || g.seq_length % (2 * L.c) == 0),
                 str_cat("layout ", L.str(), ": context parallelism c = ", L.c, " needs 2 c to divide the sequence length ",
                         g.seq_length, " (each rank takes two chunks, balancing the causal mask)"));
  PTDP_CHECK_ARG(!L.sequence_parallel || (t > 1 && g.seq_length % t == 0),
                 str_cat("layout ", L.str(), ": sequence parallelism needs t > 1 dividing the sequence length ",
                         g.seq_length));
  PTDP_CHECK_ARG(L.e > 0 && L.etp >= 0 && (static_cast<int64_t>(t) * L.c * d) % (L.e * L.expert_tensor()) == 0,
                 str_cat("layout ", L.str(), ": e * etp = ", L.e * L.expert_tensor(),
                         " does not divide the t * c * d = ", t * L.c * d, " ranks of a stage"));
  // The model as the layout runs it: MoE with t > 1 needs sequence parallelism (Megatron's rule).
  GptConfig run = g;
  run.sequence_parallel = L.sequence_parallel;
  run.validate(t);
  run.validate_experts(L.e, L.expert_tensor());
}

// The link a group's collectives run over: NVLink inside a node, the network once the group
// spans nodes.
struct Link {
  double bandwidth, latency;
};
Link link_for(const Cluster& cl, bool crosses_nodes) {
  return crosses_nodes ? Link{cl.inter_node_bandwidth, cl.inter_node_latency}
                       : Link{cl.intra_node_bandwidth, cl.intra_node_latency};
}

double peak_flops(const PlanRequest& req, const Cluster& cl) {
  return req.precision == Precision::Fp32 ? cl.peak_flops_fp32 : cl.peak_flops_16bit;
}

// One activation [s, b, h]: what a tensor all-reduce or a pipeline transfer carries.
double activation_message_bytes(const PlanRequest& req, const Layout& L) {
  return static_cast<double>(L.b) * req.model.seq_length / L.c * req.model.hidden_size * bytes_of(req.precision);
}

// Seconds of one microbatch through a whole pipeline rank (all its v chunks). bwd_compute
// holds the input and the weight gradients; bwd_weight the weight gradients' part of it.
struct StageCost {
  double fwd_compute, bwd_compute, bwd_weight, recompute, tp_fwd, tp_bwd;
};

// What every stage's cost is made of: one layer's forward, input-gradient and weight-gradient
// seconds and its recomputation, the same for the logits layer, one tensor all-reduce, and the
// all-reduces of one layer's backward.
struct CostParts {
  double layer_fwd, layer_bwd_input, layer_bwd_weight, logit_fwd, logit_bwd_input, logit_bwd_weight, layer_recompute;
  double ar, ar_per_layer_bwd;
  double cp_fwd, cp_bwd;  ///< one layer's exposed context-parallel ring exchanges
  /// MoE: one token exchange over the e ranks (dispatch or combine), and one layer's exchanges
  /// forward and backward at the model's share of MoE layers.
  double a2a, a2a_fwd, a2a_bwd;
  /// MTP: one module's eh_proj (its layer and logits are priced as the decoder's).
  double mtp_proj_fwd = 0, mtp_proj_bwd_input = 0, mtp_proj_bwd_weight = 0;
};

// The GEMM tables of the request's precision (empty: the cluster's single gemm_efficiency).
const GemmTable* table_for(const PlanRequest& req, const Cluster& cl) {
  const std::string& name = req.precision == Precision::Fp32 ? cl.gemm_table_fp32 : cl.gemm_table_16bit;
  if (name.empty()) return nullptr;
  return &cached_gemm_table(name);
}

// Seconds of GEMMs priced by shape: forward C = A B as (M, N, K); the input gradient dA = dC B^T
// as (M, K, N); the weight gradient dB = A^T dC as (K, N, M).
struct PassSeconds {
  double fwd = 0, bwd_input = 0, bwd_weight = 0;
};
// Each at the cluster's peak times the table's efficiency for its shape.
PassSeconds gemm_seconds(const GemmTable& tab, double peak, const std::vector<Gemm>& gemms) {
  PassSeconds out;
  const auto seconds = [&](double m, double n, double k, double count) {
    return 2.0 * m * n * k * count / (peak * tab.at(m, n, k));
  };
  for (const Gemm& x : gemms) {
    out.fwd += seconds(x.m, x.n, x.k, x.count);
    out.bwd_input += seconds(x.m, x.k, x.n, x.count);
    out.bwd_weight += seconds(x.k, x.n, x.m, x.count);
  }
  return out;
}

CostParts cost_parts(const PlanRequest& req, const Cluster& cl, const Layout& L, double tensor_allreduce) {
  const GptConfig& g = req.model;
  const int t = L.t, b = L.b, cp = L.c;
  const double vp = static_cast<double>(g.padded_vocab(t));
  CostParts c;
  const GemmTable* tab = table_for(req, cl);
  double attention_fwd = 0, attention_bwd = 0;  // the attention products' seconds (context parallelism hides its ring behind them)
  const bool fused = fused_attention(g, req.precision);
  if (tab == nullptr) {
    // One efficiency for every GEMM (the cluster's gemm_efficiency, memory-bound kernels
    // included), lowered when the smallest dimension of the layer's GEMMs (tokens b s, or the
    // per-rank width h / t) is small: rate = large rate * x / (x + kGemmHalfSize).
    const double h = g.hidden_size, s = g.seq_length;
    const double smallest = std::min(static_cast<double>(b) * s, h / t);
    const double rate = peak_flops(req, cl) * cl.gemm_efficiency * smallest / (smallest + kGemmHalfSize);
    c.layer_fwd = layer_forward_flops(g, b) / t / cp / rate;
    c.logit_fwd = logit_forward_flops(g, b, vp) / t / cp / rate;
    c.layer_recompute = fused && L.recompute == Recompute::Selective
                            ? 0.0
                            : recompute_flops(g, b, L.recompute) / t / cp / rate;
    c.layer_bwd_input = c.layer_bwd_weight = c.layer_fwd;
    c.logit_bwd_input = c.logit_bwd_weight = c.logit_fwd;
    c.mtp_proj_fwd = mtp_projection_forward_flops(g, b) / t / cp / rate;
    c.mtp_proj_bwd_input = c.mtp_proj_bwd_weight = c.mtp_proj_fwd;
    attention_fwd = attention_core_flops(g, b) / t / cp / rate;
    attention_bwd = 2.0 * attention_fwd;
    if (fused) {  // the fused backward recomputes the scores Q K^T: half the products' forward
      c.layer_bwd_input += attention_fwd / 2.0;
      attention_bwd += attention_fwd / 2.0;
    }
  } else {
    // Every GEMM at its own shape's efficiency, and the memory-bound kernels (norms,
    // activation, bias-dropout-add, softmax, dropout) at the achieved memory bandwidth.
    const double peak = peak_flops(req, cl);
    const std::vector<Gemm> all = layer_gemms(g, t, b, cp);
    const std::size_t n = all.size();  // ... scores, context, projection, fc1, fc2
    PassSeconds layer = gemm_seconds(*tab, peak, all);
    if (g.moe.enabled()) {
      // The model's mix of layers: an MoE layer's router, grouped expert GEMMs and shared
      // experts in place of the dense fc1 and fc2.
      const double share = static_cast<double>(g.num_moe_layers()) / g.num_layers;
      const PassSeconds dense = gemm_seconds(*tab, peak, {all[n - 2], all[n - 1]});
      const PassSeconds moe = gemm_seconds(*tab, peak, moe_mlp_gemms(g, t, b, cp, L.e, L.etp));
      layer.fwd += share * (moe.fwd - dense.fwd);
      layer.bwd_input += share * (moe.bwd_input - dense.bwd_input);
      layer.bwd_weight += share * (moe.bwd_weight - dense.bwd_weight);
    }
    const PassSeconds logit = gemm_seconds(*tab, peak, {logit_gemm(g, t, b, cp)});
    // Each MTP module's eh_proj (column-parallel [h, 2h]).
    const PassSeconds eh_proj = gemm_seconds(
        *tab, peak, {Gemm{static_cast<double>(b) * g.seq_length / cp, static_cast<double>(g.hidden_size) / t,
                          2.0 * g.hidden_size, 1}});
    c.mtp_proj_fwd = eh_proj.fwd;
    c.mtp_proj_bwd_input = eh_proj.bwd_input;
    c.mtp_proj_bwd_weight = eh_proj.bwd_weight;
    const PassSeconds attention = gemm_seconds(*tab, peak, {all[n - 5], all[n - 4]});  // Q K^T and P V
    const double bandwidth = cl.elementwise_bandwidth > 0 ? cl.elementwise_bandwidth : cl.memory_bandwidth;
    const double fwd_bytes = layer_elementwise_bytes(g, req.precision, t, b, L.sequence_parallel, cp);
    const double attention_ew = attention_elementwise_bytes(g, req.precision, t, b, cp) / bandwidth;
    attention_fwd = attention.fwd + attention_ew;
    attention_bwd = attention.bwd_input + attention.bwd_weight + kElementwiseBackward * attention_ew;
    // The fused backward recomputes the scores Q K^T tile by tile before its four products.
    const double rescore = fused ? gemm_seconds(*tab, peak, {all[n - 5]}).fwd : 0.0;
    attention_bwd += rescore;
    const double ew_fwd = fwd_bytes / bandwidth;
    c.layer_fwd = layer.fwd + ew_fwd;
    // A memory-bound kernel's backward reads the output gradient and what its forward kept and
    // writes the input gradient: about 1.25 times the forward's bytes over these kernels (the
    // softmax 6 bytes per score against 4, the attention dropout 5 against 5, the norms and
    // the activation 1.5 times, the residual adds about once).
    c.layer_bwd_input = layer.bwd_input + kElementwiseBackward * ew_fwd + rescore;
    c.layer_bwd_weight = layer.bwd_weight;
    // The loss: a softmax over the fp32 logits [b s, V / t] and its gradient, written in place
    // (read and write each way).
    const double loss = 2.0 * 4.0 * b * g.seq_length / cp * vp / t / bandwidth;
    c.logit_fwd = logit.fwd + loss;
    c.logit_bwd_input = logit.bwd_input + loss;
    c.logit_bwd_weight = logit.bwd_weight;
    switch (L.recompute) {
      case Recompute::Full: c.layer_recompute = c.layer_fwd; break;
      case Recompute::Selective: c.layer_recompute = fused ? 0.0 : attention_fwd; break;  // nothing dropped
      case Recompute::None: c.layer_recompute = 0; break;
    }
  }
  c.ar = tensor_allreduce;
  // Per layer: 2 forward (after attention and MLP), 2 backward (their conjugates); full
  // recomputation repeats the forward's 2.
  c.ar_per_layer_bwd = 2.0 + (L.recompute == Recompute::Full ? 2.0 : 0.0);
  // Context parallelism: each layer's attention passes its keys and values (2 b s/c g dh / t
  // elements) around the ring of c ranks, c - 1 steps, forward; the backward sends them and
  // their gradients (twice the bytes). As in Megatron's ring attention each step's transfer
  // overlaps the attention products of the step before: what exceeds them is exposed.
  // MoE with e > 1: each MoE layer's tokens go to their experts' ranks and back (the dispatch
  // and the combine), an all-to-all over the e ranks of this rank's b s / (c t) tokens' k routed
  // hidden states, (e - 1) / e of them leaving; the backward exchanges their gradients the same
  // way. (etp's gathering of the routed tokens replaces the dense MLP's sequence-parallel
  // all-gather and reduce-scatter, which the tensor all-reduces above already count.)
  c.a2a = c.a2a_fwd = c.a2a_bwd = 0;
  if (g.moe.enabled() && L.e > 1) {
    const Link link = link_for(cl, L.e * L.expert_tensor() > cl.gpus_per_node);
    const double routed = static_cast<double>(b) * g.seq_length / cp / t * g.moe.router_topk * g.hidden_size *
                          bytes_of(req.precision);
    const double share = static_cast<double>(g.num_moe_layers()) / g.num_layers;
    c.a2a = link.latency + routed * (L.e - 1) / L.e / link.bandwidth;
    c.a2a_fwd = 2.0 * share * c.a2a;
    c.a2a_bwd = c.a2a_fwd + (L.recompute == Recompute::Full || g.moe.recompute ? c.a2a_fwd : 0.0);
  }
  c.cp_fwd = c.cp_bwd = 0;
  if (cp > 1) {
    const Link link = link_for(cl, t * cp > cl.gpus_per_node);
    // MLA passes the assembled keys and values (a heads of dn + dr, the values padded to it).
    const double kv_heads = g.multi_latent_attention ? static_cast<double>(g.num_attention_heads) * g.mla_qk_dim()
                                                     : static_cast<double>(g.query_groups()) * g.head_dim();
    const double kv = 2.0 * b * g.seq_length / cp * kv_heads / t * bytes_of(req.precision);
    const double ring = (cp - 1) * (link.latency + kv / link.bandwidth);
    c.cp_fwd = std::max(0.0, ring - attention_fwd);
    c.cp_bwd = std::max(0.0, 2.0 * ring - attention_bwd) + (L.recompute == Recompute::Full ? c.cp_fwd : 0.0);
  }
  return c;
}

// Every pipeline rank's cost: its layers (the split's count, even or not), the first rank's
// embedding and the last rank's LM head.
std::vector<StageCost> stage_costs(const PlanRequest& req, const Cluster& cl, const Layout& L, double tensor_allreduce) {
  const int p = L.p;
  const std::vector<int> stage_layers = stage_layer_counts(req.model.num_layers, L.split());
  const CostParts parts = cost_parts(req, cl, L, tensor_allreduce);
  // The first stage adds the embedding's all-reduce, the last the LM head's input gradient's.
  std::vector<StageCost> stages(static_cast<std::size_t>(p));
  // The last stage also runs the D MTP modules: D more layers (priced as the decoder's), D more
  // logits layers and losses, and D eh_proj GEMMs.
  const double D = req.model.mtp_num_layers;
  for (int k = 0; k < p; ++k) {
    const bool first = k == 0, last = k == p - 1;
    const double layers = stage_layers[static_cast<std::size_t>(k)] + (last ? D : 0.0);
    const double heads = last ? 1.0 + D : 0.0;
    const double mtp = last ? D : 0.0;
    StageCost& c = stages[static_cast<std::size_t>(k)];
    c.fwd_compute = layers * parts.layer_fwd + heads * parts.logit_fwd + mtp * parts.mtp_proj_fwd;
    c.bwd_weight = layers * parts.layer_bwd_weight + heads * parts.logit_bwd_weight + mtp * parts.mtp_proj_bwd_weight;
    c.bwd_compute =
        layers * parts.layer_bwd_input + heads * parts.logit_bwd_input + mtp * parts.mtp_proj_bwd_input + c.bwd_weight;
    c.recompute = layers * parts.layer_recompute;
    c.tp_fwd = (2.0 * layers + (first ? 1.0 : 0.0)) * parts.ar + layers * (parts.cp_fwd + parts.a2a_fwd);
    c.tp_bwd =
        (parts.ar_per_layer_bwd * layers + (last ? 1.0 : 0.0)) * parts.ar + layers * (parts.cp_bwd + parts.a2a_bwd);
  }
  return stages;
}

double total(const StageCost& c) { return c.fwd_compute + c.bwd_compute + c.recompute + c.tp_fwd + c.tp_bwd; }

// The pipeline runs at the pace of its slowest rank (the last on ties: it also holds the loss).
StageCost slowest_stage_cost(const PlanRequest& req, const Cluster& cl, const Layout& L, double tensor_allreduce) {
  const std::vector<StageCost> stages = stage_costs(req, cl, L, tensor_allreduce);
  std::size_t slowest = stages.size() - 1;
  for (std::size_t k = 0; k < stages.size(); ++k) {
    if (total(stages[k]) > total(stages[slowest])) slowest = k;
  }
  return stages[slowest];
}

// One activation (or its gradient) between pipeline neighbours.
double pipeline_transfer_seconds(const PlanRequest& req, const Layout& L, double msg, const Link& pipe,
                                 const Link& tensor) {
  const int t = L.t;
  if (L.p == 1) return 0;
  // With sequence parallelism the activation between stages is already split: [s / t, b, h].
  if (L.sequence_parallel) return pipe.latency + msg / t / pipe.bandwidth;
  if (req.scatter_gather && t > 1) {
    // Each tensor rank sends 1/t; the receivers all-gather the pieces inside their node.
    return pipe.latency + msg / t / pipe.bandwidth + half_ring_seconds(t, msg, tensor.bandwidth, tensor.latency);
  }
  return pipe.latency + msg / pipe.bandwidth;
}

ScheduleCosts microbatch_costs(const StageCost& slow, double transfer) {
  ScheduleCosts costs;
  costs.forward = slow.fwd_compute + slow.tp_fwd;
  costs.backward = slow.bwd_compute + slow.recompute + slow.tp_bwd;
  // Zero bubble: B carries the recomputation, the input gradients and their all-reduces; W the
  // weight gradients.
  costs.backward_input = slow.bwd_compute - slow.bwd_weight + slow.recompute + slow.tp_bwd;
  costs.backward_weight = slow.bwd_weight;
  costs.p2p_latency = transfer;
  return costs;
}

// The slowest pipeline rank's busy time, its idle time and what the transfers add, and the
// activation slots its schedule holds at once on the first and the last rank.
struct PipelineTime {
  double compute = 0, tensor_comm = 0, pipeline_comm = 0, bubble = 0, pipeline = 0;
  bool simulated = false;
  std::vector<int> slots;  ///< peak activation slots of each pipeline rank
};

// The schedule runs every stage at the slowest stage's costs, so its fill and drain would pass
// p - 1 stages as slow as that one; they pass the others. `others` = the other stages' time
// per microbatch over (p - 1) times the slowest's (1 for balanced stages) scales the bubble: a
// 1F1B pipeline with one slow stage takes m T_slow + sum of the others' T, not (m + p - 1) T_slow.
PipelineTime pipeline_time(const Layout& L, const StageCost& slow, const ScheduleCosts& costs, bool simulate_pipeline,
                           double others) {
  const int p = L.p, v = L.v, m = L.m;
  const double transfer = costs.p2p_latency;
  const ScheduleKind kind = L.schedule;
  PipelineTime pt;
  const double per_mb_compute = slow.fwd_compute + slow.bwd_compute + slow.recompute;
  const double per_mb_tensor = slow.tp_fwd + slow.tp_bwd;
  pt.compute = m * per_mb_compute;
  pt.tensor_comm = m * per_mb_tensor;
  // Two transfer batches per microbatch and chunk on a rank (activation out and gradient in,
  // then gradient out and activation in).
  pt.pipeline_comm = p > 1 ? 2.0 * m * v * transfer : 0.0;
  const double ideal = pt.compute + pt.tensor_comm;
  for (int r = 0; r < p; ++r) pt.slots.push_back(schedule_peak_slots(kind, p, m, v, r));
  if (simulate_pipeline && p > 1) {
    // Twice: without transfer times for the bubble alone, then with them.
    const Schedule sched = make_schedule(kind, p, m, v);
    ScheduleCosts free_transfers = costs;
    free_transfers.p2p_latency = 0;
    const SimulationResult bare = simulate(sched, free_transfers);
    const SimulationResult sim = simulate(sched, costs);
    const double uniform_bubble = std::max(0.0, bare.makespan - ideal);
    pt.bubble = uniform_bubble * others;
    pt.pipeline = sim.makespan - uniform_bubble + pt.bubble;
    pt.pipeline_comm = std::max(0.0, sim.makespan - bare.makespan);
    pt.slots.assign(sim.peak_slots.begin(), sim.peak_slots.end());
    pt.simulated = true;
  } else if (p > 1) {
    // Closed forms: (p - 1) stage steps of fill and drain, shortened by v, and for ZB-H1 filled
    // by the deferred weight gradients; the transfers of the fill and drain add to the busy time.
    const double step = costs.forward + costs.backward;
    pt.bubble = (p - 1) * step / v;
    if (kind == ScheduleKind::ZeroBubbleH1) {
      pt.bubble = (p - 1) * std::max(0.0, costs.forward + costs.backward_input - costs.backward_weight);
    } else if (kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::InterleavedZeroBubble) {
      // The weight gradients fill the fill and drain of v chunks per rank (the leaders are
      // simulated exactly).
      pt.bubble = (p - 1) * std::max(0.0, costs.forward + costs.backward_input - costs.backward_weight) / v;
    } else if (kind == ScheduleKind::DualPipeV) {
      // Without overlapping each forward/backward pair ptdp's DualPipeV sits between the two.
      pt.bubble = (p - 1) * (step + std::max(0.0, costs.forward + costs.backward_input - costs.backward_weight)) /
                  (2.0 * v);
    }
    pt.bubble *= others;
    pt.pipeline_comm += 2.0 * (p - 1) * transfer;
    pt.pipeline = ideal + pt.bubble + pt.pipeline_comm;
  } else {
    pt.pipeline = ideal;
  }
  return pt;
}

// The gradient reduction (and, with the distributed optimizer, the all-gather of the updated
// weights) of `n_local` parameters over the `d` ranks holding them (the data-parallel group and
// the context-parallel ranks, d c; an MoE model's experts over edp), less what hides behind the
// last microbatch's backward (`window` seconds).
double data_parallel_seconds(const PlanRequest& req, const Layout& L, double n_local, double window, const Link& dp,
                             int d) {
  const double param_bytes = bytes_of(req.precision);
  double reduce = 0, gather = 0;
  if (L.distributed_optimizer) {
    reduce = half_ring_seconds(d, n_local * grad_bytes(req), dp.bandwidth, dp.latency);    // reduce-scatter of the gradients
    gather = half_ring_seconds(d, n_local * param_bytes, dp.bandwidth, dp.latency);  // all-gather of the updated weights
  } else {
    reduce = allreduce_seconds(d, n_local * grad_bytes(req), dp.bandwidth, dp.latency);
  }
  if (req.overlap_grad_reduce && reduce > 0) {
    // Buckets are reduced while the last microbatch's backward runs; the last one cannot be.
    const double buckets = std::max(1.0, std::ceil(n_local / kBucketElements));
    reduce = std::max(reduce / buckets, reduce - window);
  }
  return reduce + gather;
}

// Tied embeddings: the first and last stage sum their word-embedding gradients.
double embedding_sync_seconds(const PlanRequest& req, const Layout& L, const Link& pipe) {
  const GptConfig& g = req.model;
  if (L.p == 1 || !g.tie_embeddings) return 0;
  const double h = g.hidden_size, vp = static_cast<double>(g.padded_vocab(L.t));
  return allreduce_seconds(2, vp * h / L.t * kGradBytes, pipe.bandwidth, pipe.latency);
}

// Of `params` parameters (`muon_params` of them Muon's hidden weights), those whose optimizer
// keeps one fp32 buffer (SGD's momentum, Muon's) instead of AdamW's two moments.
double single_buffer_params(const PlanRequest& req, double params, double muon_params) {
  switch (req.optimizer) {
    case PlanOptimizer::Sgd: return params;
    case PlanOptimizer::Muon: return muon_params;
    case PlanOptimizer::Adam: break;
  }
  return 0.0;
}
constexpr double kMomentumBytes = 4.0;
double state_bytes(const PlanRequest& req, double params, double muon_params) {
  return params * kMomentBytes - single_buffer_params(req, params, muon_params) * (kMomentBytes - kMomentumBytes);
}

// Adam streams the weights, gradients, moments (and fp32 master weights) through memory:
// reads and writes of 28 bytes per parameter in fp32, 32 with 16-bit weights; a single state
// buffer (SGD, Muon's hidden weights) saves one read and one write of 4 bytes. Muon's
// Newton-Schulz products are priced apart, at the device's peak (rank_newton_schulz_flops).
// With the distributed optimizer each rank steps its shard: the dense parameters over d, the
// experts (`expert_local` of `n_local`) over edp.
double optimizer_seconds(const PlanRequest& req, const Cluster& cl, const Layout& L, double n_local,
                         double expert_local, const MuonShare& muon) {
  const double touched = req.precision == Precision::Fp32 ? 28.0 : 32.0;
  if (req.optimizer == PlanOptimizer::Adam) {
    if (expert_local <= 0) return n_local / (L.distributed_optimizer ? L.d : 1) * touched / cl.memory_bandwidth;
    const double dense = n_local - expert_local;
    return (dense / (L.distributed_optimizer ? L.d : 1) +
            expert_local / (L.distributed_optimizer ? L.expert_data() : 1)) *
           touched / cl.memory_bandwidth;
  }
  // One state buffer fewer: one read and one write of 4 bytes less per parameter.
  auto bytes = [&](double params, double muon_params) {
    return params * touched - single_buffer_params(req, params, muon_params) * 2.0 * (kMomentBytes - kMomentumBytes);
  };
  const double muon_dense = static_cast<double>(muon.params - muon.expert_params);
  const double muon_expert = static_cast<double>(muon.expert_params);
  const double dense = n_local - expert_local;
  return (bytes(dense, muon_dense) / (L.distributed_optimizer ? L.d : 1) +
          bytes(expert_local, muon_expert) / (L.distributed_optimizer ? L.expert_data() : 1)) /
         cl.memory_bandwidth;
}

// Working memory of the backward beyond what is kept.
double backward_working_bytes(const PlanRequest& req, const Layout& L, double layers_per_chunk) {
  const GptConfig& g = req.model;
  const int t = L.t, b = L.b;
  const double h = g.hidden_size, s = g.seq_length;
  const double none_act =
      layer_activation_bytes(g, req.precision, t, b, Recompute::None, L.sequence_parallel, 1, L.etp);
  const double sel_act =
      layer_activation_bytes(g, req.precision, t, b, Recompute::Selective, L.sequence_parallel, 1, L.etp);
  double working = 0;
  if (req.precision == Precision::Fp32) {
    // The CPU engine runs a chunk's input gradients layer by layer, then its weight gradients:
    // until then every linear layer of the chunk keeps its input and its output gradient
    // (s b (4h + ((a + 2g) dh + a dh + fc1 + ffn)/t) per layer, s b (4h + (4h + 2f)/t) for the
    // GPT). Under full recomputation that is the recomputed chunk; the attention probabilities
    // are recomputed for one layer at a time (full and selective); and one layer's backward
    // allocates the probabilities' gradient and QKV's.
    // MLA: the up projections' outputs and the assembled qkv (mla_attention.h) in place of QKV's.
    const double qkv = g.multi_latent_attention
                           ? static_cast<double>(g.num_attention_heads) * (3.0 * g.mla_qk_dim())
                           : static_cast<double>(g.qkv_rows());
    const double ctx = static_cast<double>(g.attention_width());
    const double f = g.ffn(), fc1 = g.swiglu ? 2.0 * f : f;
    const double held_for_weights = 4.0 * b * s * (4.0 * h + (qkv + ctx + fc1 + f) / t);
    if (L.recompute == Recompute::Full) working += layers_per_chunk * held_for_weights;
    if (L.recompute != Recompute::None) working += none_act - sel_act;
    // With the fused kernel that is its fp32 row statistics delta [b, a/t, s] (its tiles are
    // a few KiB per thread) in place of the probabilities' gradient.
    const double heads = static_cast<double>(g.num_attention_heads) / t;
    const double scores = fused_attention(g, req.precision) ? heads * b * s : heads * b * s * s;
    working += 4.0 * (scores + qkv * b * s / t + 2.0 * b * s * h);
  } else {
    // Megatron frees each layer's activations as its backward passes: the recomputed layer (full)
    // or the recomputed attention (selective) is all that is added.
    if (L.recompute == Recompute::Full) working += none_act;
    if (L.recompute == Recompute::Selective) working += none_act - sel_act;
  }
  return working;
}

// Bytes per GPU of the pipeline rank holding `params` parameters, `layers_per_chunk` layers in
// each of its chunks and `slots` activation sets; `last` for the rank that computes the loss.
Memory stage_memory(const PlanRequest& req, const Layout& L, int64_t params, int64_t expert_params,
                    const MuonShare& muon, double layers_per_chunk, int slots, int last_rank_slots, bool last) {
  const GptConfig& g = req.model;
  const int t = L.t, b = L.b, m = L.m;
  const double act = bytes_of(req.precision);
  const double h = g.hidden_size, s = g.seq_length;
  const double vp = static_cast<double>(g.padded_vocab(t));
  const double layer_act = layer_activation_bytes(g, req.precision, t, b, L.recompute, L.sequence_parallel, L.c, L.etp);
  const double working = backward_working_bytes(req, L, layers_per_chunk) / L.c;
  // The last stage's loss: the final LayerNorm's and the LM head's inputs, and the fp32 logits
  // [s b, V/t] (turned into their gradient in place).
  const double head_act = (2.0 * b * s * h * act + 4.0 * b * s * vp / t) / L.c;
  const ScheduleKind kind = L.schedule;
  const int last_chunk_slots = kind == ScheduleKind::GPipe ? m : (kind == ScheduleKind::ZeroBubbleH1 ? last_rank_slots : 1);
  Memory mm;
  const double n = static_cast<double>(params);
  mm.weights = n * bytes_of(req.precision);
  mm.gradients = n * kGradBytes;
  // The distributed optimizer shards the moments and the fp32 masters over d (full sharding):
  // 6 + 12/d bytes per parameter with 16-bit weights and Adam, 8 + 8/d in fp32; the experts'
  // state is sharded over the edp ranks holding the same experts. SGD and Muon's hidden weights
  // keep one fp32 buffer in place of Adam's two.
  const double ne = static_cast<double>(expert_params);
  const double me = static_cast<double>(muon.expert_params), md = static_cast<double>(muon.params) - me;
  const double master = master_bytes(req.precision);
  mm.optimizer = ((n - ne) * master + state_bytes(req, n - ne, md)) / (L.distributed_optimizer ? L.d : 1) +
                 (ne * master + state_bytes(req, ne, me)) / (L.distributed_optimizer ? L.expert_data() : 1);
  mm.slots = slots;
  // The D MTP modules on the last chunk: a layer's activations, the logits' and eh_proj's input
  // [s b 2h] each per microbatch in flight there.
  const double D = g.mtp_num_layers;
  const double mtp_act = D * (layer_act + head_act + 2.0 * b * s * h * act / L.c);
  mm.activations = mm.slots * layers_per_chunk * layer_act + working + (last ? last_chunk_slots * (head_act + mtp_act) : 0.0);
  return mm;
}

}  // namespace

StageSeconds stage_seconds(const PlanRequest& req, const Cluster& cl, const Layout& L) {
  const Link tensor_link = link_for(cl, L.t > cl.gpus_per_node);
  const double ar = allreduce_seconds(L.t, activation_message_bytes(req, L), tensor_link.bandwidth, tensor_link.latency);
  const CostParts c = cost_parts(req, cl, L, ar);
  StageSeconds out;
  out.layer = c.layer_fwd + c.layer_bwd_input + c.layer_bwd_weight + c.layer_recompute +
              (2.0 + c.ar_per_layer_bwd) * c.ar + c.cp_fwd + c.cp_bwd + c.a2a_fwd + c.a2a_bwd;  // as stage_costs
  out.first = c.ar;
  const double D = req.model.mtp_num_layers;
  out.last = (1.0 + D) * (c.logit_fwd + c.logit_bwd_input + c.logit_bwd_weight) + c.ar +
             D * (out.layer + c.mtp_proj_fwd + c.mtp_proj_bwd_input + c.mtp_proj_bwd_weight);
  return out;
}

std::vector<double> stage_microbatch_seconds(const PlanRequest& req, const Cluster& cl, const Layout& L) {
  check_layout_runs(req, L);
  const Link tensor_link = link_for(cl, L.t > cl.gpus_per_node);
  const double ar = allreduce_seconds(L.t, activation_message_bytes(req, L), tensor_link.bandwidth, tensor_link.latency);
  std::vector<double> out;
  for (const StageCost& c : stage_costs(req, cl, L, ar)) out.push_back(total(c));
  return out;
}

Estimate estimate(const PlanRequest& req, const Cluster& cl, const Layout& L, bool simulate_pipeline) {
  check_layout_runs(req, L);
  const GptConfig& g = req.model;
  const int t = L.t, p = L.p, d = L.d, v = L.v;
  Estimate e;
  e.layout = L;
  const int gpus = t * L.c * p * d;
  const int gpn = cl.gpus_per_node;

  e.params_formula = paper_parameters(g);
  e.params_exact = g.parameter_count(t);
  e.params_active = g.active_parameter_count(t);
  std::vector<int64_t> stage_params, stage_experts;
  std::vector<MuonShare> stage_muon(static_cast<std::size_t>(p));  // all zero unless Muon
  for (int r = 0; r < p; ++r) {
    stage_params.push_back(stage_parameters(g, t, L.split(), r, L.e, L.expert_tensor()));
    stage_experts.push_back(stage_expert_parameters(g, t, L.split(), r, L.e, L.expert_tensor()));
    if (req.optimizer == PlanOptimizer::Muon) {
      stage_muon[static_cast<std::size_t>(r)] =
          muon_stage_share(g, t, L.split(), r, L.e, L.expert_tensor(), req.muon_ns_steps, req.muon_split_qkv);
    }
  }
  const std::size_t most = static_cast<std::size_t>(std::max_element(stage_params.begin(), stage_params.end()) -
                                                    stage_params.begin());
  e.params_per_gpu = stage_params[most];
  e.expert_params_per_gpu = stage_experts[most];

  e.tensor_crosses_nodes = t > gpn;
  const Link tensor_link = link_for(cl, e.tensor_crosses_nodes);
  const double msg = activation_message_bytes(req, L);
  e.tensor_allreduce_seconds = allreduce_seconds(t, msg, tensor_link.bandwidth, tensor_link.latency);
  const StageCost slow = slowest_stage_cost(req, cl, L, e.tensor_allreduce_seconds);
  double others = 1.0;
  if (p > 1) {
    double sum = 0;
    for (const StageCost& c : stage_costs(req, cl, L, e.tensor_allreduce_seconds)) sum += total(c);
    others = std::clamp((sum - total(slow)) / ((p - 1) * total(slow)), 0.0, 1.0);
  }

  // Pipeline neighbours are t * d ranks apart; once the job spans nodes, some stage boundary
  // falls between nodes and the schedule waits for the slowest.
  e.pipeline_crosses_nodes = p > 1 && gpus > gpn;
  const Link pipeline_link = link_for(cl, e.pipeline_crosses_nodes);
  e.costs = microbatch_costs(slow, pipeline_transfer_seconds(req, L, msg, pipeline_link, tensor_link));

  const PipelineTime pt = pipeline_time(L, slow, e.costs, simulate_pipeline, others);
  e.compute = pt.compute;
  e.tensor_comm = pt.tensor_comm;
  e.pipeline_comm = pt.pipeline_comm;
  e.bubble = pt.bubble;
  e.pipeline = pt.pipeline;
  e.simulated = pt.simulated;
  e.bubble_fraction = e.bubble / (e.compute + e.tensor_comm);

  // The data-parallel group of a stage is d ranks t apart inside a block of t * d ranks.
  e.data_crosses_nodes = d * L.c > 1 && t * L.c * d > gpn;
  const double n_local = static_cast<double>(e.params_per_gpu);
  const double expert_local = static_cast<double>(e.expert_params_per_gpu);
  const double backward_window = slow.bwd_compute + slow.recompute + slow.tp_bwd;
  // The dense parameters are reduced over the d c ranks holding them, the experts over edp (the
  // stage's ranks with the same experts, spread over the whole stage).
  e.data_parallel = data_parallel_seconds(req, L, n_local - expert_local, backward_window,
                                          link_for(cl, e.data_crosses_nodes), d * L.c);
  if (expert_local > 0) {
    e.data_parallel += data_parallel_seconds(req, L, expert_local, 0.0, link_for(cl, t * L.c * d > gpn),
                                             L.expert_data());
    const CostParts parts = cost_parts(req, cl, L, e.tensor_allreduce_seconds);
    const std::vector<int> layers = stage_layer_counts(g.num_layers, L.split());
    e.alltoall_seconds = parts.a2a;
    e.expert_comm = L.m * *std::max_element(layers.begin(), layers.end()) * (parts.a2a_fwd + parts.a2a_bwd);
    e.expert_crosses_nodes = L.e * L.expert_tensor() > gpn;
  }
  e.embedding_sync = embedding_sync_seconds(req, L, pipeline_link);
  // The optimizer step of the rank with the most parameters; Muon's Newton-Schulz products at
  // the device's peak on top of its memory-bound part.
  e.newton_schulz_flops = rank_newton_schulz_flops(stage_muon[most], L);
  e.newton_schulz = e.newton_schulz_flops / peak_flops(req, cl);
  e.optimizer = optimizer_seconds(req, cl, L, n_local, expert_local, stage_muon[most]) + e.newton_schulz;
  e.iteration = e.pipeline + e.data_parallel + e.embedding_sync + e.optimizer;

  const int64_t samples = req.global_batch_size;
  e.hardware_flops = g.paper_flops(samples, L.recompute == Recompute::Full);  // ptdp-train's count
  e.model_flops = iteration_flops(g, samples, Recompute::None);
  e.tflops_per_gpu = e.hardware_flops / (e.iteration * gpus) / 1e12;
  e.mfu = e.model_flops / (e.iteration * gpus * peak_flops(req, cl));

  // Every rank: the first holds the most activation slots, the last the loss, and with uneven
  // stages any of them may hold the most layers.
  const std::vector<int> stage_layers = stage_layer_counts(g.num_layers, L.split());
  for (int r = 0; r < p; ++r) {
    const std::size_t k = static_cast<std::size_t>(r);
    Memory mm = stage_memory(req, L, stage_params[k], stage_experts[k], stage_muon[k],
                             static_cast<double>(stage_layers[k]) / v,
                             pt.slots[k], pt.slots.back(), r == p - 1);
    mm.gradients = static_cast<double>(stage_params[k]) * grad_bytes(req);  // 16-bit without grads_in_fp32
    if (r == 0 || mm.total() > e.memory.total()) {
      e.memory = mm;
      e.memory_stage = r;
    }
  }
  e.fits = e.memory.total() <= cl.usable_memory();
  return e;
}

double cpu_iteration_seconds(const PlanRequest& req, const Layout& L, double cores) {
  PTDP_CHECK_ARG(cores > 0 && std::isfinite(cores), str_cat("cores = ", cores, " is not > 0"));
  const int ranks = L.t * L.c * L.p * L.d;
  const Cluster own_cores = cpu_cluster(ranks, ranks);
  const Estimate e = estimate(req, own_cores, L, true);
  double stages = 0;
  for (double s : stage_microbatch_seconds(req, own_cores, L)) stages += s;
  const double work = static_cast<double>(L.t) * L.c * L.d * L.m * stages + ranks * e.optimizer;
  return std::max(e.iteration, work / cores + e.data_parallel + e.embedding_sync);
}

}  // namespace ptdp::plan
