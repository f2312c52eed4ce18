// MoE training equals serial training (core API, under mpiexec): a tiny GPT whose MLPs are
// mixtures of experts, trained for a few iterations through the real training loop
// (train_iteration: the pipeline schedule, the gradient reduction of the dense and the expert
// regions, the optimizer), with dropout on, reports every iteration the loss and gradient norm
// of the single-process run of the same seed and global batch, and ends with its parameters.
//
// Usage: test_moe_equivalence SPEC...   SPEC = "t,p,v,c,e,etp,schedule,dist[,extras]" with
// schedule 1f1b, interleaved, zbv; d = world / (t p c); etp 0: t. Extras ('+'-joined): cap
// (capacity factor 1, probs policy), pos (capacity 1, position policy, padded to capacity), aux
// (aux loss and z loss), seqaux (seq_aux_loss, sigmoid scores), shared (shared experts with the
// gate), mixed (--moe-layer-freq: MoE in layers 0, 2, ...), swiglu, allgather, moerecompute
// (the MoE layer alone recomputed), full (full recomputation), bias (sigmoid scores with the
// expert bias of aux-loss-free balancing, update rate 0.01: the bias moves every iteration),
// global (Megatron's global_aux_loss and the z loss: the counts summed over the d replicas and
// averaged over the step's microbatches so far), mla (multi-latent attention with query
// compression and its latent norms, RoPE, value heads padded), limited (DeepSeek's
// device-limited routing: 8 experts in the 4 groups of the e = 4 layout, each token's k = 3
// experts from its 2 best groups scored by their top-2 sums, sigmoid scores scaled by 2.5: a
// fixed model hyperparameter, so the serial run and every e dividing 4 train the same model).
// ds: DeepSeek-V3's block (RMSNorm, SwiGLU, no linear biases, multi-latent attention with query compression, the
// first layer dense, 8 experts k = 3 group-limited to the best 2 of 4 groups by their top-2
// sums, sigmoid scores scaled by 2.5 with the expert bias, a shared expert, seq_aux_loss).
// mtp, mtp2: multi-token prediction with D = 1, 2 (RoPE), each module's layer of the decoder's
// last layer's kind (MoE, or dense with mixed): its MTP losses compared every iteration, its
// loads and expert bias with the decoder layers'; the serial model's parameters equal
// GptConfig::parameter_count() (and the active count) for every spec.
// muon: --optimizer muon (Nesterov, lr 2e-2): Muon on every matrix, each expert's its own,
// orthogonalised once in its expert-tensor x expert-data group; AdamW on the rest. dup (with
// muon): --muon-tp-mode duplicated, every tensor rank orthogonalising the whole matrix.
// qkclip (with muon): QK-clip after every step with a threshold of 0.6, under most heads'
// largest logits, so that heads clip every iteration; each layer's largest logit (1e-4
// relative) and clipped heads (equal) compared with the serial run's every iteration; no linear
// biases (with linear_qkv's bias, AdamW's steps on its round-off key gradient, which the loss
// cannot see, move the largest logits by 3e-4 and the rescaled weights with them).
// gqa: 2 query groups of the 4 heads.
// Every spec runs sequence parallelism where t > 1 (MoE requires it).
//
// Every rank runs the serial reference itself (a world of one) on the whole global batch, d * m
// microbatches through 1F1B; the parallel run gives replica r the samples [r m b, (r+1) m b).
// global_aux_loss depends on d by definition (each microbatch's loss counts the other replicas'
// tokens): its reference is the pure data-parallel run at the same d (t = p = c = e = 1, the
// world split into groups of d consecutive ranks, replica r with the same samples), and the
// spec proves that t, p, c, e, the schedule and recomputation change nothing at that d.
// Tolerances (float32, the runs differ in summation order only; Muon's parameters 5e-4, see
// param_tolerance): loss and grad norm 1e-4
// relative every iteration; every MoE layer's expert loads (min and max over the experts) and
// every expert bias equal to the serial run's every iteration (integer counts, the same sign
// steps), the logged balancing and z losses 1e-4 relative; parameters ||x - y|| <= 1e-4 ||x||
// per tensor, but linear_qkv's bias
// (AdamW's bound per element, as test_train_equivalence.cpp explains).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/comm/runtime.h"
#include "core/model/gpt_pipeline.h"
#include "core/train/trainer.h"
#include "tests/train/spec_harness.h"

using namespace ptdp;

namespace {

using spec_harness::expect;
using spec_harness::g_rank;
using spec_harness::host;
using spec_harness::slice_of;

constexpr int kIters = 4, kMicro = 2, kM = 2, kVocab = 53;

struct Spec {
  int t = 1, p = 1, v = 1, c = 1, e = 1, etp = 0;
  ScheduleKind kind = ScheduleKind::OneFOneB;
  bool dist = false;
  std::string extras, text;
  bool has(const std::string& w) const { return ("+" + extras + "+").find("+" + w + "+") != std::string::npos; }
};

bool parse(const char* s, Spec* out) {
  Spec x;
  char sched[32] = {0}, extra[128] = {0};
  int dist = 0;
  const int n = std::sscanf(s, "%d,%d,%d,%d,%d,%d,%31[^,],%d,%127s", &x.t, &x.p, &x.v, &x.c, &x.e, &x.etp, sched,
                            &dist, extra);
  if (n != 8 && n != 9) return false;
  if (!spec_harness::schedule_of(sched, &x.kind)) return false;
  x.dist = dist != 0;
  x.extras = extra;
  x.text = s;
  *out = x;
  return true;
}

GptConfig config(const Spec& s) {
  GptConfig g;
  g.num_layers = 2 * s.p * s.v;
  g.hidden_size = 16;
  g.num_attention_heads = 4;
  g.seq_length = 8;
  g.vocab_size = kVocab;
  g.make_vocab_size_divisible_by = 4;
  g.hidden_dropout = 0.1f;
  g.attention_dropout = 0.1f;
  g.init_method_std = 0.1f;
  g.ffn_hidden_size = 32;
  g.seed = 2024;
  g.swiglu = s.has("swiglu");
  if (s.has("gqa")) g.num_query_groups = 2;
  // No linear biases with QK-clip (as Kimi K2 and Llama have none): linear_qkv's key bias only
  // shifts each query's logits together, so its gradient is pure round-off, which AdamW turns
  // into steps of up to lr; the loss never sees them, the largest logit does.
  if (s.has("qkclip")) g.add_bias_linear = false;
  if (s.has("full")) g.recompute = Recompute::Full;
  MoeConfig& m = g.moe;
  m.num_experts = std::max(4, s.e);
  m.router_topk = 2;
  m.ffn_hidden_size = 8;
  if (s.has("cap")) m.capacity_factor = 1.0f;
  if (s.has("pos")) {
    m.capacity_factor = 1.0f;
    m.drop_policy = MoeDropPolicy::Position;
    m.pad_expert_input_to_capacity = true;
  }
  if (s.has("aux")) {
    m.aux_loss_coeff = 0.01f;
    m.z_loss_coeff = 0.001f;
  }
  if (s.has("global")) {
    m.aux_loss_coeff = 0.01f;
    m.z_loss_coeff = 0.001f;
    m.load_balancing = MoeLoadBalancing::GlobalAuxLoss;
  }
  if (s.has("seqaux")) {
    m.aux_loss_coeff = 0.01f;
    m.load_balancing = MoeLoadBalancing::SeqAuxLoss;
    m.score_function = MoeScoreFunction::Sigmoid;
  }
  if (s.has("shared")) {
    m.shared_expert_intermediate_size = 8;
    m.shared_expert_gate = true;
  }
  if (s.has("mixed"))
    for (int i = 0; i < g.num_layers; ++i) m.layer_pattern.push_back(i % 2 == 0 ? 1 : 0);
  if (s.has("allgather")) m.dispatcher = MoeDispatcher::AllGather;
  m.recompute = s.has("moerecompute");
  if (s.has("mla")) {
    g.position_embedding = PositionEmbedding::Rope;
    g.multi_latent_attention = true;
    g.qk_layernorm = true;
    g.q_lora_rank = 6;
    g.kv_lora_rank = 5;
    g.qk_head_dim = 4;
    g.qk_pos_emb_head_dim = 2;
    g.v_head_dim = 4;
  }
  if (s.has("limited")) {
    m.num_experts = 8;
    m.router_topk = 3;
    m.score_function = MoeScoreFunction::Sigmoid;
    m.topk_scaling_factor = 2.5f;
    m.num_groups = 4;
    m.topk_limited_devices = 2;
    m.group_topk = 2;
    m.group_score_topk = 2;
  }
  if (s.has("bias")) {
    m.score_function = MoeScoreFunction::Sigmoid;
    m.enable_expert_bias = true;
    m.bias_update_rate = 0.01f;
  }
  if (s.has("ds")) {
    // DeepSeek-V3's block: RMSNorm and SwiGLU, MLA with query compression and latent norms,
    // the first layer dense, 8 routed experts (k = 3) in 4 groups of which each token's best 2
    // by their top-2 sums, sigmoid scores scaled by 2.5 with the expert bias, one shared expert,
    // seq_aux_loss.
    g.normalization = Normalization::RMSNorm;
    g.swiglu = true;
    g.add_bias_linear = false;
    g.position_embedding = PositionEmbedding::Rope;
    g.multi_latent_attention = true;
    g.qk_layernorm = true;
    g.q_lora_rank = 6;
    g.kv_lora_rank = 5;
    g.qk_head_dim = 4;
    g.qk_pos_emb_head_dim = 2;
    g.v_head_dim = 4;
    m.layer_pattern.assign(static_cast<std::size_t>(g.num_layers), 1);
    m.layer_pattern[0] = 0;
    m.num_experts = 8;
    m.router_topk = 3;
    m.score_function = MoeScoreFunction::Sigmoid;
    m.topk_scaling_factor = 2.5f;
    m.num_groups = 4;
    m.group_topk = 2;
    m.group_score_topk = 2;
    m.enable_expert_bias = true;
    m.bias_update_rate = 0.01f;
    m.shared_expert_intermediate_size = 8;
    m.aux_loss_coeff = 0.01f;
    m.load_balancing = MoeLoadBalancing::SeqAuxLoss;
  }
  // Multi-token prediction (RoPE: the modules have no position table), its layer the decoder's
  // last layer's kind: an MoE layer here.
  if (s.has("mtp") || s.has("mtp2")) {
    g.position_embedding = PositionEmbedding::Rope;
    g.mtp_num_layers = s.has("mtp2") ? 2 : 1;
    g.mtp_loss_scaling_factor = 0.3f;
  }
  return g;
}

// Iterations of a spec: Muon's runs the 10.
int iters_of(const Spec& s) { return s.has("muon") ? 10 : kIters; }

// ||x - y|| / ||x|| per parameter. Muon's Newton-Schulz amplifies a relative perturbation of the
// momentum along its small singular values by the product of the steps' linear coefficients
// (the quintic's a: 4.08 * 3.95 * 3.74 * 2.88 * 2.84 = 493), so the fp32 round-off by which
// the layouts' gradients differ (~1e-7 relative) reaches ~5e-5 of an update per step: 5e-4 over
// 10 steps (measured worst 1.1e-4, linear_proj at t = etp = 2).
double param_tolerance(const Spec& s) { return s.has("muon") ? 5e-4 : 1e-4; }

OptimizerConfig optimizer_config(const Spec& s, bool dist) {
  OptimizerConfig o;
  o.lr.lr = 1e-3;
  o.clip_grad = 1.0f;
  o.distributed = dist;
  if (s.has("muon")) {
    // Muon on every matrix (each expert's linears, the router, MLA's projections), AdamW on
    // the rest; Nesterov and the quintic coefficients, q/k/v and gate/up apart.
    o.kind = OptimizerKind::Muon;
    o.lr.lr = 2e-2;
    o.muon.nesterov = true;
    if (s.has("dup")) o.muon.tp_mode = MuonTpMode::Duplicated;
  }
  if (s.has("qkclip")) {
    o.muon.qk_clip = true;
    o.muon.qk_clip_threshold = 0.6f;
  }
  return o;
}

struct Run {
  std::vector<float> loss;
  std::vector<std::vector<float>> mtp;  // by iteration: each depth's MTP loss
  std::vector<double> norm;
  std::vector<MoeMetrics> moe;                                   // by iteration
  std::vector<QkClipMetrics> qk_clip;                            // by iteration
  std::vector<std::map<std::string, std::vector<float>>> biases;  // by iteration: every expert bias
  std::map<std::string, std::vector<float>> params;  // serial: global values
};

// The expert biases of this rank's chunks (whole on every rank: replicated parameters).
std::map<std::string, std::vector<float>> expert_biases(GptPipeline& model) {
  std::map<std::string, std::vector<float>> out;
  for (auto& chunk : model.chunks()) {
    const ParamTable& t = chunk->params();
    for (int i = 0; i < t.size(); ++i)
      if (t.info(i).name.find("router.expert_bias") != std::string::npos) out[t.info(i).name] = host(t.gather_param(i));
  }
  return out;
}

// The iteration's MoE figures and expert biases against the serial run's.
void compare_moe(const Spec& s, int it, const MoeMetrics& got, GptPipeline& model, const Run& ref) {
  const MoeMetrics& want = ref.moe[static_cast<std::size_t>(it)];
  const std::string at = s.text + " iteration " + std::to_string(it) + ": ";
  expect(got.moe_layers == want.moe_layers && got.loads.size() == want.loads.size(), at + "MoE layer count");
  for (std::size_t l = 0; l < std::min(got.loads.size(), want.loads.size()); ++l) {
    const MoeLayerLoad &g = got.loads[l], &w = want.loads[l];
    expect(g.layer == w.layer && g.min_tokens == w.min_tokens && g.max_tokens == w.max_tokens,
           at + "layer " + std::to_string(w.layer) + " expert load " + std::to_string(g.min_tokens) + ".." +
               std::to_string(g.max_tokens) + " vs " + std::to_string(w.min_tokens) + ".." +
               std::to_string(w.max_tokens));
  }
  const auto close = [](double a, double b) { return std::abs(a - b) <= 1e-4 * std::max(std::abs(b), 1e-12); };
  expect(got.has_load_balancing_loss == want.has_load_balancing_loss && got.has_z_loss == want.has_z_loss &&
             close(got.load_balancing_loss, want.load_balancing_loss) && close(got.z_loss, want.z_loss),
         at + "MoE losses " + std::to_string(got.load_balancing_loss) + ", " + std::to_string(got.z_loss) + " vs " +
             std::to_string(want.load_balancing_loss) + ", " + std::to_string(want.z_loss));
  for (const auto& [name, values] : expert_biases(model)) {
    const auto w = ref.biases[static_cast<std::size_t>(it)].find(name);
    expect(w != ref.biases[static_cast<std::size_t>(it)].end() && w->second == values, at + name + " differs");
  }
}

// The iteration's QK-clip figures against the serial run's: every layer's largest logit (1e-4
// relative) and its clipped heads (equal); none without qkclip.
double compare_qk_clip(const Spec& s, int it, const QkClipMetrics& got, const Run& ref) {
  double worst = 0;
  const QkClipMetrics& want = ref.qk_clip[static_cast<std::size_t>(it)];
  const std::string at = s.text + " iteration " + std::to_string(it) + ": ";
  const std::size_t layers = s.has("qkclip") ? static_cast<std::size_t>(config(s).num_layers + config(s).mtp_num_layers) : 0;
  expect(got.max_logits.size() == layers && want.max_logits.size() == layers && got.clipped_heads.size() == layers,
         at + std::to_string(got.max_logits.size()) + " QK-clip layers, want " + std::to_string(layers));
  for (std::size_t l = 0; l < std::min(got.max_logits.size(), want.max_logits.size()); ++l) {
    const float g = got.max_logits[l], w = want.max_logits[l];
    const double rel = std::abs(double{g} - w) / std::abs(w);
    worst = std::max(worst, rel);
    expect(std::isfinite(w) && rel <= 1e-4 && got.clipped_heads[l] == want.clipped_heads[l],
           at + "layer " + std::to_string(l) + " max attention logit " + std::to_string(g) + " (" +
               std::to_string(got.clipped_heads[l]) + " heads clipped) vs " + std::to_string(w) + " (" +
               std::to_string(want.clipped_heads[l]) + ")");
  }
  return worst;
}

void batch(int d, std::vector<int32_t>* tokens, std::vector<int32_t>* labels) {
  const std::size_t n = static_cast<std::size_t>(d * kM * kMicro * 8);
  std::mt19937 g(99);
  std::uniform_int_distribution<int> u(0, kVocab - 1);
  tokens->resize(n);
  labels->resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    (*tokens)[i] = u(g);
    (*labels)[i] = u(g);
  }
}

// The reference run of the global batch of d * m microbatches on `replicas` data-parallel ranks
// (this rank's group of consecutive ranks; 1: a world of one with every microbatch), for
// `iters` iterations. same_data: every replica gets replica 0's samples (and a world of one
// only those m microbatches), without dropout (whose masks differ between replicas).
Run reference(const Spec& s, int d, int replicas, bool same_data = false, int iters = kIters) {
  RuntimeOptions o;
  std::shared_ptr<Runtime> rt;
  if (replicas > 1) {
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank / replicas, g_rank, &sub);
    rt = Runtime::create_from_mpi(o, &sub);  // duplicates it
    MPI_Comm_free(&sub);
  } else {
    rt = Runtime::create_self(o);
  }
  ParallelConfig pc;
  pc.world = replicas;
  ProcessGroups groups(rt, pc);
  GptConfig cfg = config(s);
  if (same_data) cfg.hidden_dropout = cfg.attention_dropout = 0.0f;
  GptPipeline model(cfg, groups);
  auto opt = make_optimizer(model, groups, optimizer_config(s, false));
  const Schedule sched = make_schedule(ScheduleKind::OneFOneB, 1, same_data ? kM : d / replicas * kM, 1);
  std::vector<int32_t> tokens, labels;
  batch(d, &tokens, &labels);
  const std::size_t off =
      same_data ? 0 : static_cast<std::size_t>(groups.rank(GroupKind::Data) * (d / replicas) * kM * kMicro * 8);
  Run r;
  for (int it = 0; it < iters; ++it) {
    const IterationOutcome out =
        train_iteration(model, *opt, groups, sched, tokens.data() + off, labels.data() + off, kMicro, it);
    r.loss.push_back(out.loss);
    r.mtp.push_back(out.mtp_losses);
    r.norm.push_back(out.step.grad_norm);
    r.moe.push_back(out.moe);
    r.qk_clip.push_back(out.qk_clip);
    r.biases.push_back(expert_biases(model));
  }
  if (s.has("qkclip") && replicas == 1) {
    // The test means something only if heads clipped, and not every head every time.
    int clipped = 0, heads = 0;
    for (const QkClipMetrics& q : r.qk_clip) {
      for (int c : q.clipped_heads) clipped += c;
      heads += static_cast<int>(q.clipped_heads.size()) * config(s).num_attention_heads;
    }
    expect(clipped > 0 && clipped < heads, s.text + ": the serial run clipped " + std::to_string(clipped) + " of " +
                                               std::to_string(heads) + " head-iterations");
  }
  if (s.has("bias") && iters == kIters) {
    // The test means something only if the bias moved (and moved apart between experts).
    const std::vector<float>& last = r.biases.back().begin()->second;
    expect(*std::max_element(last.begin(), last.end()) > *std::min_element(last.begin(), last.end()),
           s.text + ": the serial run's expert bias did not move");
  }
  const ParamTable& t = model.chunks()[0]->params();
  for (int i = 0; i < t.size(); ++i) r.params[t.info(i).name] = host(t.param(i));
  if (replicas == 1 && !same_data) {
    // The serial model's parameters are GptConfig's count (the MTP modules' MoE layers
    // included), and its routed experts' share k / E of them the active count's.
    int64_t total = 0, routed = 0;
    for (int i = 0; i < t.size(); ++i) {
      total += t.info(i).global_shape.numel();
      if (t.info(i).expert) routed += t.info(i).global_shape.numel();
    }
    const MoeConfig& m = cfg.moe;
    expect(total == cfg.parameter_count(1), s.text + ": the serial model has " + std::to_string(total) +
                                                " parameters, parameter_count() " +
                                                std::to_string(cfg.parameter_count(1)));
    expect(total - routed / m.num_experts * (m.num_experts - m.router_topk) == cfg.active_parameter_count(1),
           s.text + ": active_parameter_count() " + std::to_string(cfg.active_parameter_count(1)));
  }
  return r;
}

// global_aux_loss's definition across d, which the layouts at one d cannot show: with every
// replica on the same samples, the replicas' counts sum to d times one replica's and T is d
// times the microbatch's, so each replica's loss is 1/d of the single run's on those samples and
// the logged value (summed over the replicas, as Megatron logs it) is the single run's. The
// first iteration's main loss and balancing loss against a world of one (later iterations
// differ: each replica's balancing gradient is 1/d of the single run's, as in Megatron).
void check_global_definition(const Spec& s, int d) {
  const Run one = reference(s, d, 1, true, 1), all = reference(s, d, d, true, 1);
  const double want = one.moe[0].load_balancing_loss, got = all.moe[0].load_balancing_loss;
  expect(want > 0.0 && std::abs(got - want) <= 1e-5 * want,
         s.text + ": global_aux_loss over " + std::to_string(d) + " replicas of the same samples " +
             std::to_string(got) + ", one replica " + std::to_string(want));
  expect(std::abs(all.loss[0] - one.loss[0]) <= 1e-6f * std::abs(one.loss[0]),
         s.text + ": the replicated run's loss " + std::to_string(all.loss[0]) + " vs " + std::to_string(one.loss[0]));
}

void run_spec(const Spec& s, int world) {
  const int d = world / (s.t * s.p * s.c);
  // global_aux_loss depends on d: the reference is the pure data-parallel run at d.
  const Run ref = reference(s, d, s.has("global") ? d : 1, false, iters_of(s));
  if (s.has("global") && d > 1) check_global_definition(s, d);
  RuntimeOptions o;
  auto rt = Runtime::create(o);
  ParallelConfig pc;
  pc.world = world;
  pc.tensor = s.t;
  pc.pipeline = s.p;
  pc.virtual_stages = s.v;
  pc.context = s.c;
  pc.expert_model = s.e;
  pc.expert_tensor = s.etp;
  pc.sequence_parallel = s.t > 1;
  pc.chunk_placement = static_cast<int>(placement_of(s.kind));
  ProcessGroups groups(rt, pc);
  GptPipeline model(config(s), groups);
  auto opt = make_optimizer(model, groups, optimizer_config(s, s.dist));
  const Schedule sched = make_schedule(s.kind, s.p, kM, s.v);
  std::vector<int32_t> tokens, labels;
  batch(d, &tokens, &labels);
  const int r = groups.rank(GroupKind::Data);
  const std::size_t off = static_cast<std::size_t>(r * kM * kMicro * 8);
  double worst_loss = 0, worst_norm = 0, worst_param = 0, worst_logit = 0;
  for (int it = 0; it < iters_of(s); ++it) {
    const IterationOutcome out =
        train_iteration(model, *opt, groups, sched, tokens.data() + off, labels.data() + off, kMicro, it);
    const float want_loss = ref.loss[static_cast<std::size_t>(it)];
    const double want_norm = ref.norm[static_cast<std::size_t>(it)];
    const double dl = std::abs(out.loss - want_loss) / std::abs(want_loss);
    const double dn = std::abs(out.step.grad_norm - want_norm) / want_norm;
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    expect(dl <= 1e-4, s.text + ": loss at iteration " + std::to_string(it) + " " + std::to_string(out.loss) + " vs " +
                           std::to_string(want_loss));
    expect(dn <= 1e-4, s.text + ": grad norm at iteration " + std::to_string(it) + " " +
                           std::to_string(out.step.grad_norm) + " vs " + std::to_string(want_norm));
    compare_moe(s, it, out.moe, model, ref);
    worst_logit = std::max(worst_logit, compare_qk_clip(s, it, out.qk_clip, ref));
    // Each depth's MTP loss; the modules' MoE layers in the figures, after the decoder's.
    const GptConfig& cfg = model.config();
    const std::vector<float>& want_mtp = ref.mtp[static_cast<std::size_t>(it)];
    expect(out.mtp_losses.size() == static_cast<std::size_t>(cfg.mtp_num_layers) &&
               want_mtp.size() == out.mtp_losses.size(),
           s.text + ": " + std::to_string(out.mtp_losses.size()) + " MTP losses at iteration " + std::to_string(it));
    for (std::size_t k = 0; k < std::min(out.mtp_losses.size(), want_mtp.size()); ++k) {
      const double dm = std::abs(double{out.mtp_losses[k]} - want_mtp[k]) / std::abs(want_mtp[k]);
      worst_loss = std::max(worst_loss, dm);
      expect(want_mtp[k] > 0.0f && dm <= 1e-4, s.text + ": mtp_" + std::to_string(k + 1) + " loss at iteration " +
                                                  std::to_string(it) + " " + std::to_string(out.mtp_losses[k]) +
                                                  " vs " + std::to_string(want_mtp[k]));
    }
    if (cfg.mtp_moe()) {
      expect(out.moe.moe_layers == cfg.num_moe_layers() + cfg.mtp_num_layers && !out.moe.loads.empty() &&
                 out.moe.loads.back().layer == cfg.num_layers + cfg.mtp_num_layers - 1 &&
                 out.moe.loads.back().max_tokens > 0,
             s.text + ": the MTP modules' MoE layers are not in the MoE figures");
    } else {
      // The decoder's last layer dense (mixed): so are the modules' layers.
      expect(out.moe.moe_layers == cfg.num_moe_layers(), s.text + ": MoE layers past the decoder's");
    }
    // The token exchange's time: a part of the iteration, and some time whenever tokens cross
    // ranks (e or etp > 1; etp 0 means t).
    const bool exchanges = s.e > 1 || (s.etp == 0 ? s.t : s.etp) > 1;
    expect(out.moe_exchange_seconds >= 0 && out.moe_exchange_seconds <= out.seconds,
           s.text + ": the MoE exchange's " + std::to_string(out.moe_exchange_seconds) + " s exceed the iteration's " +
               std::to_string(out.seconds));
    expect(!exchanges || out.moe_exchange_seconds > 0, s.text + ": no time counted in the MoE token exchange");
  }
  for (auto& chunk : model.chunks()) {
    ParamTable& t = chunk->params();
    for (int i = 0; i < t.size(); ++i) {
      const ParamInfo& info = t.info(i);
      // The vocabulary tables hold padded rows.
      if (info.name == "embedding.word_embeddings.weight" || info.name == "output_layer.weight") continue;
      const auto it = ref.params.find(info.name);
      if (it == ref.params.end()) {
        expect(false, s.text + ": " + info.name + " is not in the serial model");
        continue;
      }
      const std::vector<float> want = slice_of(info, it->second);
      const std::vector<float> got = host(t.gather_param(i));
      double num = 0, den = 0;
      for (std::size_t k = 0; k < want.size(); ++k) {
        num += (got[k] - want[k]) * (got[k] - want[k]);
        den += want[k] * want[k];
      }
      const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
      if (info.name.find("linear_qkv.bias") != std::string::npos) {
        // The key third's gradient is pure round-off (softmax is shift-invariant), which AdamW
        // normalises into steps of up to lr each: the bound is 2 sum_k lr C_k (C_k <= 1.05; see
        // test_train_equivalence.cpp), per element.
        double worst = 0;
        for (std::size_t k = 0; k < want.size(); ++k)
          worst = std::max(worst, static_cast<double>(std::abs(got[k] - want[k])));
        expect(worst <= 2.0 * iters_of(s) * optimizer_config(s, false).lr.lr * 1.05,
               s.text + ": parameter " + info.name + " differs by " + std::to_string(worst));
        continue;
      }
      worst_param = std::max(worst_param, rel);
      expect(rel <= param_tolerance(s), s.text + ": parameter " + info.name + " differs by " + std::to_string(rel));
    }
  }
  if (model.config().mtp_num_layers > 0) {
    // The modules' routed experts exist (split over e like the decoder's) and were compared.
    int experts = 0;
    for (auto& chunk : model.chunks()) {
      const ParamTable& t = chunk->params();
      for (int i = 0; i < t.size(); ++i)
        experts += t.info(i).expert && t.info(i).name.rfind("mtp.layers.", 0) == 0 ? 1 : 0;
    }
    MPI_Allreduce(MPI_IN_PLACE, &experts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    expect((experts > 0) == model.config().mtp_moe(),
           s.text + ": " + std::to_string(experts) + " MTP expert parameters (the decoder's last layer " +
               (model.config().mtp_moe() ? "MoE)" : "dense)"));
  }
  if (g_rank == 0)
    std::printf("%s: worst loss %.2e, grad norm %.2e, parameter %.2e%s\n", s.text.c_str(), worst_loss, worst_norm,
                worst_param,
                s.has("qkclip") ? (", max attention logit " + std::to_string(worst_logit)).c_str() : "");
}

}  // namespace

int main(int argc, char** argv) { return ptdp::spec_harness::run_specs<Spec>(argc, argv, parse, run_spec); }
