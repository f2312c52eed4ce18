// Full PTD-P training equals serial training: under mpiexec, a tiny GPT trained for 10
// iterations with tensor, pipeline (plain or interleaved) and data parallelism, the distributed
// optimizer on or off, dropout on, reports every iteration the loss, gradient norm and learning
// rate of the single-process run of the same seed and global batch, and ends with its
// parameters.
//
// Usage: test_train_equivalence SPEC...   with SPEC = "t,p,v,schedule,dist,optimizer,bucket[,extras]",
// schedule one of gpipe, 1f1b, zbh1, interleaved, zbv (ZB-V), dualpipev, izb (interleaved zero
// bubble), the first two in the V chunk placement; optimizer adam, sgd or muon; bucket the
// ddp_bucket_size (0: one bucket per model chunk); extras '+'-joined words: untied (separate
// output_layer.weight, also in the serial run), nosg (pipeline scatter/gather off), recompute
// (full activation recomputation), llama (RMSNorm, SwiGLU, RoPE, grouped-query attention, no
// biases, untied output layer), qwen2 (the same with the qkv bias, tied), qkacross (with llama:
// OLMoE's q/k RMSNorms over the whole query and key projections, their row sums all-reduced over
// the tensor group), mla and mlalora (multi-latent attention on the Llama-family block, tied: 8
// heads; mla without query compression and value heads narrower than the query/key heads,
// mlalora with query compression; both with the latent norms), yarn (with llama: --rope-type yarn, cos and sin
// scaled), masks (packed documents
// and masked labels: end-of-document tokens in the batch, ptdp_eod_masks with --eod-mask-loss,
// --reset-position-ids and --reset-attention-mask, the first label of every sample ignored as a
// prompt would be, and at iteration 3 one microbatch whose every label is ignored; every call
// with ptdp_pipeline_options::masks, the serial run's too), first=N and last=N (Megatron's uneven
// pipeline: the first / last stage holds N layers, every other stage 2 v as in the even runs, so
// the model has 2 p v layers with the ends' 2 v replaced by N; ptdp_parallel_options'
// decoder_first/last_pipeline_num_layers), sp (sequence parallelism, ptdp_parallel_options'
// sequence_parallel), selective (selective recomputation), layout=L (Megatron's
// --pipeline-model-parallel-layout L, ptdp_parallel_options' pipeline_model_parallel_layout; the
// model has the layout's decoder layers), cp=N (context parallelism over N
// ranks, ptdp_parallel_options' context_parallel_size; the sequence is 8 tokens, 2N chunks, in
// that spec and its serial run), fused (the parallel run's attention through the fused kernel,
// the serial run's unfused). d = world / (t * p * N). Hidden size 12: a chunk's flat buffer
// (every parameter 16-float aligned) holds 16k + 12 floats, so the distributed optimizer pads for
// d = 8, and odd bucket sizes put bucket and shard boundaries inside tensors.
//
// The serial reference runs in the same job on a runtime with use_mpi = 0 (a world of one: t =
// p = d = 1) of one rank, which broadcasts it (the distinct serial runs are spread over the
// ranks), schedule 1F1B with d * m microbatches over the whole global batch; the parallel
// run gives data-parallel replica r the samples [r*m*b, (r+1)*m*b) of it. Dropout masks are
// keyed by (iteration, r * m + microbatch), so both draw the same masks.
//
// Tolerances (float32 throughout; the runs differ only in summation order):
// - loss, grad_norm: 1e-4 relative, every iteration; learning_rate: 1e-12 relative to the serial
//   run and to Megatron's warm-up + decay formula evaluated here.
// - parameters, all together: ||x - y|| / ||x|| <= 1e-4.
// - parameters, per element, AdamW: |x - y| <= 1e-4 |x| + atol, atol = 2 S. AdamW moves an
//   element by lr_k * m_hat / (sqrt(v_hat) + eps) per step k; by Cauchy-Schwarz
//   |m_hat| / sqrt(v_hat) <= C_k = sqrt(sum_i w_i^2 / u_i), with w and u the bias-corrected EMA
//   weights of beta1 and beta2 (C_k <= 1.044 for k <= 10 with 0.9 / 0.999), and decoupled weight
//   decay only contracts a difference, so two runs can part by at most 2 S, S = sum_k lr_k C_k
//   (1.1e-2 here: lr 1e-3, 10 steps). That is the honest bound for elements whose true gradient
//   is zero or below its round-off: the key third of every linear_qkv.bias (softmax is
//   shift-invariant, its gradient is pure round-off) and, by chance, elements whose gradient
//   is near zero in some step (at t = 2, e.g. decoder.layers.5.mlp.linear_fc1.weight[221] of the
//   16-layer model: 1.1e-5 apart), where Adam's normalisation turns a large relative round-off
//   into a sizeable fraction of an lr step. As it bounds any element, it is backed by:
// - parameters, per tensor (key-bias elements aside): ||x_T - y_T|| <= 1e-2 ||x_T - x0_T||, the
//   difference against how far training moved the tensor; one wrongly updated element of even
//   the largest tensor (636 elements) shows as ~4e-2. Measured worst: 1.9e-4.
// - parameters, per element, SGD (no normalisation): |x - y| <= 1e-4 |x| + 1e-7 everywhere.
// - the embedding table is compared on its first vocab_size rows (padding rows differ in count
//   with t and are never used).
// Each run prints the measured worst values (rank 0).
//
// AdamW runs at lr 1e-3: at 1e-2 its training of the 16-layer model at t = 2 amplifies the
// round-off of a few near-zero gradients until grad_norm is 8e-4 off the serial run's by
// iteration 8 (the same layout with SGD agrees to 2e-7), a property of the dynamics, not of the
// parallelism.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::str;

constexpr int kIters = 10;
constexpr int kVocab = 53;  // not a multiple of 4 * t: the padding is real
constexpr int kSeqPlain = 4;
constexpr int kSeqCp = 8;  // the cp=N specs: 2N chunks of the sequence for N = 2 and 4
int g_seq = kSeqPlain;     // the current spec's (and its serial run's) sequence length
constexpr int kMicro = 2;  // b
constexpr int kHidden = 12;  // see the usage note: the distributed optimizer pads
constexpr int kHeads = 4;
constexpr float kClip = 1.0f;  // between the gradient norms of different iterations: clipping on and off
constexpr double kTensorTol = 1e-2;  // per-tensor ||x - y|| / ||x - x0||

struct Spec {
  int t = 1, p = 1, v = 1;
  ptdp_schedule_kind kind = PTDP_SCHEDULE_1F1B;
  int dist = 0;
  ptdp_optimizer_kind opt = PTDP_OPTIMIZER_ADAM;
  int64_t bucket = 0;
  bool untied = false, no_scatter_gather = false, recompute = false;  // optional 8th field
  bool llama = false, qwen2 = false, masks = false;
  bool qk_across = false;  // --qk-layernorm --qk-layernorm-across-heads (with llama)
  int mla = 0;             // multi-latent attention: 1 without query compression, 2 with it
  bool yarn = false;       // --rope-type yarn with mscale and mscale_all_dim (with llama)
  bool sequence_parallel = false, selective = false;
  bool fused = false;  // the parallel run's attention: the fused kernel (the serial run's: unfused)
  int first = 0, last = 0;  // layers of the first / last stage; 0: 2 v, as every other stage
  int cp = 1;               // context-parallel size
  std::string text;

  /// 2 v layers per stage, the first and last stage's as given.
  std::string layout;  // Megatron's --pipeline-model-parallel-layout (no repetitions here)
  int layers() const {
    if (!layout.empty()) return static_cast<int>(std::count(layout.begin(), layout.end(), 't'));
    return 2 * p * v + (first > 0 ? first - 2 * v : 0) + (last > 0 ? last - 2 * v : 0);
  }
};

// The N of a word "name=N" (> 0), or 0 when the word is not one.
int count_of(const std::string& word, const std::string& name) {
  if (word.rfind(name + "=", 0) != 0) return 0;
  const std::string n = word.substr(name.size() + 1);
  return !n.empty() && n.find_first_not_of("0123456789") == std::string::npos ? std::atoi(n.c_str()) : 0;
}

bool parse(const char* s, Spec* out) {
  Spec x;
  char sched[32] = {0}, opt[32] = {0}, extra[64] = {0};
  long long bucket = 0;
  const int n = std::sscanf(s, "%d,%d,%d,%31[^,],%d,%31[^,],%lld,%63s", &x.t, &x.p, &x.v, sched, &x.dist, opt, &bucket, extra);
  if (n != 7 && n != 8) return false;
  const std::string k = sched, o = opt, e = extra;
  for (std::size_t at = 0; at < e.size();) {
    const std::size_t end = std::min(e.find('+', at), e.size());
    const std::string word = e.substr(at, end - at);
    if (word == "untied") x.untied = true;
    else if (word == "nosg") x.no_scatter_gather = true;
    else if (word == "recompute") x.recompute = true;
    else if (word == "selective") x.selective = true;
    else if (word == "sp") x.sequence_parallel = true;
    else if (word == "fused") x.fused = true;
    else if (word == "llama") x.llama = x.untied = true;
    else if (word == "qwen2") x.qwen2 = true;
    else if (word == "qkacross") x.qk_across = true;
    else if (word == "mla") x.mla = 1;
    else if (word == "mlalora") x.mla = 2;
    else if (word == "yarn") x.yarn = true;
    else if (word == "masks") x.masks = true;
    else if (count_of(word, "first") > 0) x.first = count_of(word, "first");
    else if (word.rfind("layout=", 0) == 0) x.layout = word.substr(7);
    else if (count_of(word, "last") > 0) x.last = count_of(word, "last");
    else if (count_of(word, "cp") > 0) x.cp = count_of(word, "cp");
    else return false;
    at = end + 1;
  }
  if (k == "gpipe") x.kind = PTDP_SCHEDULE_GPIPE;
  else if (k == "1f1b") x.kind = PTDP_SCHEDULE_1F1B;
  else if (k == "zbh1") x.kind = PTDP_SCHEDULE_ZB_H1;
  else if (k == "interleaved") x.kind = PTDP_SCHEDULE_INTERLEAVED_1F1B;
  else if (k == "zbv") x.kind = PTDP_SCHEDULE_ZB_V;
  else if (k == "dualpipev") x.kind = PTDP_SCHEDULE_DUALPIPE_V;
  else if (k == "izb") x.kind = PTDP_SCHEDULE_INTERLEAVED_ZB;
  else return false;
  if (o == "adam") x.opt = PTDP_OPTIMIZER_ADAM;
  else if (o == "sgd") x.opt = PTDP_OPTIMIZER_SGD;
  else if (o == "muon") x.opt = PTDP_OPTIMIZER_MUON;
  else return false;
  x.bucket = bucket;
  x.text = s;
  *out = x;
  return true;
}

ptdp_gpt_options gpt_options(int layers, const Spec& sp) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = layers;
  o.hidden_size = kHidden;
  o.num_attention_heads = kHeads;
  o.vocab_size = kVocab;
  o.make_vocab_size_divisible_by = 4;
  o.seq_length = g_seq;
  o.hidden_dropout = 0.1f;
  o.attention_dropout = 0.1f;
  o.init_method_std = 0.1f;
  o.seed = 2024;
  o.untie_embeddings_and_output_weights = sp.untied ? 1 : 0;
  // Named either way: the CPU's auto is the fused kernel, and the serial reference of a fused
  // spec runs the unfused path.
  o.attention = sp.fused ? PTDP_ATTENTION_FUSED : PTDP_ATTENTION_UNFUSED;
  o.recompute_granularity = sp.recompute   ? PTDP_RECOMPUTE_FULL
                            : sp.selective ? PTDP_RECOMPUTE_SELECTIVE
                                           : PTDP_RECOMPUTE_NONE;
  if (sp.llama || sp.qwen2 || sp.mla > 0) {
    // 8 query heads in 4 key/value groups of head dim 4 (t = 4 holds one group each), RMSNorm,
    // SwiGLU, RoPE, no biases; Qwen2 keeps the qkv bias and rotates half of each head.
    o.num_attention_heads = 8;
    o.num_query_groups = 4;
    o.kv_channels = 4;
    o.normalization = PTDP_NORMALIZATION_RMSNORM;
    o.swiglu = 1;
    o.ffn_hidden_size = 16;
    o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
    o.disable_bias_linear = 1;
    if (sp.qwen2) {
      o.add_qkv_bias = 1;
      o.rotary_percent = 0.5f;
      o.rotary_base = 1000000.0;
    }
    if (sp.qk_across) {
      o.qk_layernorm = 1;
      o.qk_layernorm_across_heads = 1;
    }
    if (sp.yarn) {  // head dim 4: frequency 0 kept, frequency 1 half interpolated; cos and sin times 1.17
      o.rope_type = PTDP_ROPE_TYPE_YARN;
      o.rotary_base = 100.0;
      o.rotary_scaling_factor = 4.0f;
      o.original_max_position_embeddings = 64;
      o.beta_fast = 4.0f;
      o.mscale = 1.8f;
      o.mscale_all_dim = 0.5f;
    }
  }
  if (sp.mla > 0) {
    // Multi-latent attention on the Llama-family block, 8 heads, its latents normalised: without
    // query compression, value heads of 4 padded to the query/key heads' 6; with it, v = dq.
    o.num_query_groups = 0;
    o.kv_channels = 0;
    o.multi_latent_attention = 1;
    o.qk_layernorm = 1;
    o.kv_lora_rank = 6;
    o.q_lora_rank = sp.mla == 2 ? 5 : 0;
    o.qk_head_dim = sp.mla == 2 ? 2 : 4;
    o.qk_pos_emb_head_dim = sp.mla == 2 ? 4 : 2;
    o.v_head_dim = sp.mla == 2 ? 6 : 4;
  }
  return o;
}

// AdamW: cosine decay with warm-up; SGD: linear decay with warm-up. Both reach min_lr at
// iteration 8, so iterations 8 and 9 run at the floor.
ptdp_optimizer_options optimizer_options(ptdp_optimizer_kind kind, int dist, int64_t bucket) {
  ptdp_optimizer_options o;
  ptdp_optimizer_options_init(&o);
  o.optimizer = kind;
  o.use_distributed_optimizer = dist;
  o.ddp_bucket_size = bucket;
  o.clip_grad = kClip;
  o.weight_decay = 0.1f;
  o.lr_warmup_iters = 2;
  o.lr_decay_iters = 8;
  if (kind == PTDP_OPTIMIZER_ADAM) {
    o.lr = 1e-3;
    o.min_lr = 1e-4;
    o.lr_decay_style = PTDP_LR_COSINE;
  } else if (kind == PTDP_OPTIMIZER_MUON) {
    // Megatron's defaults (spectral scale, 5 quintic steps, q/k/v and gate/up apart) with
    // Nesterov; AdamW for the embeddings, norms and biases at the same rate.
    o.lr = 2e-3;
    o.min_lr = 2e-4;
    o.lr_decay_style = PTDP_LR_COSINE;
    o.muon_nesterov = 1;
  } else {
    o.lr = 0.1;
    o.min_lr = 0.01;
    o.lr_decay_style = PTDP_LR_LINEAR;
    o.sgd_momentum = 0.9f;
  }
  return o;
}

// Megatron's learning rate of step `it` (from 0), written out independently of the library.
double expected_lr(const ptdp_optimizer_options& o, int it) {
  const double w = static_cast<double>(o.lr_warmup_iters), D = static_cast<double>(o.lr_decay_iters);
  if (it < o.lr_warmup_iters) return o.lr * (it + 1) / w;
  if (it >= o.lr_decay_iters) return o.min_lr;
  const double r = (it - w) / (D - w);
  const double c = o.lr_decay_style == PTDP_LR_COSINE ? 0.5 * (1.0 + std::cos(3.14159265358979323846 * r)) : 1.0 - r;
  return o.min_lr + c * (o.lr - o.min_lr);
}

// Bound on AdamW's |m_hat| / sqrt(v_hat) at step k (from 1); see the header comment.
double adam_ratio_bound(double b1, double b2, int k) {
  double s = 0;
  for (int i = 1; i <= k; ++i) {
    const double w = (1 - b1) * std::pow(b1, k - i) / (1 - std::pow(b1, k));
    const double u = (1 - b2) * std::pow(b2, k - i) / (1 - std::pow(b2, k));
    s += w * w / u;
  }
  return std::sqrt(s);
}

constexpr int32_t kEod = 5;  // the masks runs' end-of-document token

/// A global batch's masks (the masks runs): positions and document starts of every token.
struct Masks {
  std::vector<int32_t> positions, starts;
  /// The masks of the samples from `sample` on.
  ptdp_batch_masks at(int sample) const {
    ptdp_batch_masks m;
    ptdp_batch_masks_init(&m);
    const std::size_t off = static_cast<std::size_t>(sample) * g_seq;
    m.position_ids = positions.data() + off;
    m.document_starts = starts.data() + off;
    return m;
  }
};

// The global batch of iteration `it`: `samples` rows of g_seq tokens, different every iteration.
// With masks: about a quarter of the tokens are end-of-document tokens (the labels after them
// ignored, positions and documents from them), every sample's first label is ignored, and at
// iteration 3 the second microbatch (samples kMicro .. 2 kMicro - 1) is all eod: no counted
// label.
void global_batch(int it, int samples, std::vector<int32_t>& tokens, std::vector<int32_t>& labels,
                  Masks* masks = nullptr) {
  tokens.resize(static_cast<std::size_t>(samples * g_seq));
  labels.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(it) * 40503u + 12345u;
    tokens[i] = static_cast<int32_t>((h >> 7) % kVocab);
    labels[i] = static_cast<int32_t>((h >> 17) % kVocab);
    if (masks && (h >> 27) % 4 == 0) tokens[i] = kEod;
  }
  if (!masks) return;
  if (it == 3) std::fill(tokens.begin() + kMicro * g_seq, tokens.begin() + 2 * kMicro * g_seq, kEod);
  for (int r = 0; r < samples; ++r) labels[static_cast<std::size_t>(r * g_seq)] = PTDP_IGNORE_INDEX;
  masks->positions.resize(tokens.size());
  masks->starts.resize(tokens.size());
  CT_OK(ptdp_eod_masks(tokens.data(), samples, g_seq, kEod,
                       PTDP_EOD_MASK_LOSS | PTDP_EOD_RESET_POSITION_IDS | PTDP_EOD_RESET_ATTENTION_MASK, labels.data(),
                       masks->positions.data(), masks->starts.data()));
}

// Global-shape parameters, embeddings cut to the first kVocab rows.
using Params = ct::ModelParams;
Params read_params(ptdp_model m) { return ct::read_model_params(m, kVocab); }

// Element k of a linear_qkv.bias belongs to a key: [a, 3, dh] per head (q, k, v) for the GPT,
// [g, a/g + 2, dh] per group (its query heads, k, v) for the Llama configurations (see
// gpt_options; with Qwen2 the unrotated half of the key bias is shift-invariant too).
bool is_key_bias(const std::string& name, std::size_t k, const Spec& sp) {
  const std::string suffix = "linear_qkv.bias";
  if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
  const bool grouped = sp.llama || sp.qwen2;
  const std::size_t dh = grouped ? 4 : kHidden / kHeads, per_group = grouped ? 4 : 3;  // 8 heads / 4 groups + k + v
  return (k / dh) % per_group == per_group - 2;
}

struct Trajectory {
  std::vector<ptdp_iteration_result> results;
  Params initial, final_params;
};

// The serial run: a world of one, t = p = d = 1, 1F1B over all d * m microbatches.
Trajectory serial(ptdp_groups g1, int layers, int microbatches, const ptdp_optimizer_options& oo, const Spec& sp) {
  Trajectory r;
  Spec plain;  // recomputation and scatter/gather do not change the numbers
  plain.untied = sp.untied;
  plain.llama = sp.llama;
  plain.qwen2 = sp.qwen2;
  plain.qk_across = sp.qk_across;
  plain.mla = sp.mla;
  plain.yarn = sp.yarn;
  plain.masks = sp.masks;
  const ptdp_gpt_options o = gpt_options(layers, plain);
  ptdp_model m = nullptr;
  ptdp_optimizer opt = nullptr;
  ptdp_schedule s = nullptr;
  ptdp_optimizer_options so = oo;
  so.use_distributed_optimizer = 0;
  so.ddp_bucket_size = 0;
  if (CT_OK(ptdp_model_create(g1, &o, &m)).empty() && CT_OK(ptdp_optimizer_create(m, &so, &opt)).empty() &&
      CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, microbatches, 1, &s)).empty()) {
    r.initial = read_params(m);
    std::vector<int32_t> tok, lab;
    Masks masks;
    for (int it = 0; it < kIters; ++it) {
      global_batch(it, microbatches * kMicro, tok, lab, sp.masks ? &masks : nullptr);
      ptdp_iteration_result res{};
      const ptdp_batch_masks mk = sp.masks ? masks.at(0) : ptdp_batch_masks{};
      ptdp_pipeline_options po;
      CT_OK(ptdp_pipeline_options_init(&po));
      po.masks = sp.masks ? &mk : nullptr;
      CT_OK(ptdp_train_iteration(m, opt, s, tok.data(), lab.data(), kMicro, it, &po, &res));
      r.results.push_back(res);
    }
    r.final_params = read_params(m);
  }
  ptdp_schedule_destroy(s);
  CT_OK(ptdp_optimizer_destroy(opt));
  CT_OK(ptdp_model_destroy(m));
  return r;
}

double rel(double a, double b) { return a == b ? 0.0 : std::fabs(a - b) / std::max(std::fabs(a), std::fabs(b)); }

struct Worst {
  double loss = 0, norm = 0, lr = 0, param_l2 = 0, moved = 0;
  double atol = 0;
  double excess = -1;      // max over the elements other than key biases of |x - y| - 1e-4 |x|
  std::string excess_at;
  double key_excess = -1;  // the same over the key-bias elements
  double tensor = 0;       // max over tensors of ||x_T - y_T|| / ||x_T - x0_T||
  std::string tensor_at;
};

// (layers, G, optimizer, untied, llama, qwen2, masks, sequence length, qk norms across heads, MLA,
// YaRN)
using SerialKey = std::tuple<int, int, int, bool, bool, bool, bool, int, bool, int, bool>;
std::map<SerialKey, std::shared_ptr<Trajectory>> g_serial;

// What makes two specs share a serial run: layers, microbatches, optimizer, the model family,
// masks and the sequence length.
SerialKey serial_key(int W, const Spec& sp) {
  const int d = W / (sp.t * sp.p * sp.cp), m = 2 * sp.p;
  return std::make_tuple(sp.layers(), d * m, static_cast<int>(sp.opt), sp.untied, sp.llama, sp.qwen2, sp.masks,
                         sp.cp > 1 ? kSeqCp : kSeqPlain, sp.qk_across, sp.mla, sp.yarn);
}

// A trajectory as bytes, to broadcast it.
std::vector<char> pack(const Trajectory& t) {
  std::vector<char> b;
  ct::put_results(b, t.results);
  ct::put_params(b, t.initial);
  ct::put_params(b, t.final_params);
  return b;
}
Trajectory unpack(const std::vector<char>& b) {
  Trajectory t;
  std::size_t at = 0;
  t.results = ct::take_results(b, at);
  t.initial = ct::take_params(b, at);
  t.final_params = ct::take_params(b, at);
  return t;
}

// The serial runs every spec needs, spread over the ranks: rank i % W computes the i-th distinct
// one, then broadcasts it (the ranks that wait sleep, so the computing ones keep the cores).
// Before this, every rank computed every serial run: 8 times the work of the job's ranks.
void serial_references(ptdp_groups g1, int W, int me, const std::vector<Spec>& specs) {
  std::vector<std::pair<SerialKey, const Spec*>> todo;
  for (const Spec& sp : specs) {
    const SerialKey key = serial_key(W, sp);
    if (std::none_of(todo.begin(), todo.end(), [&](const auto& k) { return k.first == key; })) todo.emplace_back(key, &sp);
  }
  std::vector<std::vector<char>> mine(todo.size());
  for (std::size_t i = 0; i < todo.size(); ++i) {
    if (static_cast<int>(i % static_cast<std::size_t>(W)) != me) continue;
    const Spec& sp = *todo[i].second;
    g_seq = sp.cp > 1 ? kSeqCp : kSeqPlain;
    const int d = W / (sp.t * sp.p * sp.cp);
    mine[i] = pack(serial(g1, sp.layers(), d * 2 * sp.p, optimizer_options(sp.opt, sp.dist, sp.bucket), sp));
  }
  for (std::size_t i = 0; i < todo.size(); ++i) {
    ct::bcast_bytes(mine[i], static_cast<int>(i % static_cast<std::size_t>(W)));
    g_serial[todo[i].first] = std::make_shared<Trajectory>(unpack(mine[i]));
  }
}
int g_clipped = 0, g_unclipped = 0;  // iterations with grad_norm above / below clip_grad, all runs

// Compares the final parameters of the serial run (x) and the parallel run (y); see the header
// comment for the tolerances. `S` is the AdamW movement bound sum_k lr_k C_k.
void compare_params(const Trajectory& want, const Params& got, bool adam, double S, Worst& w, const Spec& sp) {
  w.atol = adam ? 2 * S : 1e-7;
  double num = 0, den = 0, moved = 0, den0 = 0;
  for (std::size_t i = 0; i < got.names.size(); ++i) {
    const std::string& name = got.names[i];
    const std::vector<float>& x = want.final_params.values[i];
    const std::vector<float>& x0 = want.initial.values[i];
    const std::vector<float>& y = got.values[i];
    if (!expect(x.size() == y.size() && x0.size() == x.size(), name + ": size", str(x.size()), str(y.size()))) continue;
    std::size_t bad = 0, first_bad = 0;
    double tdiff = 0, tmoved = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      const double a = x[k], b = y[k], diff = std::fabs(a - b), excess = diff - 1e-4 * std::fabs(a);
      num += diff * diff;
      den += a * a;
      moved += (a - x0[k]) * (a - x0[k]);
      den0 += static_cast<double>(x0[k]) * x0[k];
      if (!(excess <= w.atol) && bad++ == 0) first_bad = k;
      if (is_key_bias(name, k, sp)) {
        w.key_excess = std::max(w.key_excess, excess);
        continue;
      }
      tdiff += diff * diff;
      tmoved += (a - x0[k]) * (a - x0[k]);
      if (excess > w.excess) {
        w.excess = excess;
        w.excess_at = name + "[" + str(k) + "] (" + str(a) + " vs " + str(b) + ")";
      }
    }
    expect(bad == 0, name + ": every element within 1e-4 |x| + atol", "atol " + str(w.atol),
           str(bad) + " elements off, first [" + str(first_bad) + "]: serial " + str(x[first_bad]) + ", parallel " +
               str(y[first_bad]));
    // Localised errors (one element or one tensor updated wrongly) stand out against how far
    // training moved the tensor, whatever the size of its values.
    const double tr = std::sqrt(tdiff / tmoved);
    if (tr > w.tensor) {
      w.tensor = tr;
      w.tensor_at = name;
    }
    expect(tmoved > 0 && tr <= kTensorTol, name + ": ||x - y|| <= 1e-2 ||x - x0|| (key-bias elements aside)", "<= 1e-2",
           str(tr));
  }
  w.param_l2 = std::sqrt(num / den);
  w.moved = std::sqrt(moved / den0);
  expect(w.param_l2 <= 1e-4, "||x - y|| / ||x|| <= 1e-4 over all parameters", "<= 1e-4", str(w.param_l2));
  // Training really moved the parameters: the equality is not that of two idle runs.
  expect(w.moved > 5e-3, "training changed the parameters (||x - x0|| / ||x0|| > 5e-3)", "> 5e-3", str(w.moved));
}

void run(ptdp_runtime rt, int W, const Spec& sp) {
  g_seq = sp.cp > 1 ? kSeqCp : kSeqPlain;
  const int d = W / (sp.t * sp.p * sp.cp);
  const int m = 2 * sp.p;
  const int layers = sp.layers();
  const std::string what = sp.text + " (t=" + str(sp.t) + " p=" + str(sp.p) + " v=" + str(sp.v) + " c=" + str(sp.cp) + " d=" + str(d) +
                           ", " + str(layers) + " layers)";
  ct::context(what);
  const ptdp_optimizer_options oo = optimizer_options(sp.opt, sp.dist, sp.bucket);

  const auto found = g_serial.find(serial_key(W, sp));
  if (!expect(found != g_serial.end() && static_cast<int>(found->second->results.size()) == kIters,
              "serial reference ran"))
    return;
  const Trajectory& want = *found->second;

  ptdp_parallel_options po;
  ptdp_parallel_options_init(&po);
  po.tensor_model_parallel_size = sp.t;
  po.pipeline_model_parallel_size = sp.p;
  // With a layout string the C API takes v from it (its entries / p); the schedule below uses
  // the spec's v, so a wrong derivation fails.
  po.virtual_pipeline_model_parallel_size = sp.layout.empty() ? sp.v : 1;
  po.pipeline_model_parallel_layout = sp.layout.empty() ? nullptr : sp.layout.c_str();
  po.decoder_first_pipeline_num_layers = sp.first;
  po.sequence_parallel = sp.sequence_parallel ? 1 : 0;
  po.decoder_last_pipeline_num_layers = sp.last;
  po.context_parallel_size = sp.cp;
  // ZB-V and DualPipeV run the model in the V placement (rank r: chunks r and 2p - 1 - r).
  po.pipeline_chunk_placement = sp.kind == PTDP_SCHEDULE_ZB_V || sp.kind == PTDP_SCHEDULE_DUALPIPE_V
                                    ? PTDP_CHUNK_PLACEMENT_V
                                    : PTDP_CHUNK_PLACEMENT_ROUND_ROBIN;
  ptdp_groups g = nullptr;
  if (!CT_OK(ptdp_groups_create(rt, &po, &g)).empty()) return;
  int32_t dp = -1, dsize = 0;
  CT_OK(ptdp_groups_rank(g, PTDP_GROUP_DATA, &dp));
  CT_OK(ptdp_groups_size(g, PTDP_GROUP_DATA, &dsize));
  expect(dsize == d, "data-parallel size", str(d), str(dsize));
  int32_t csize = 0, dcsize = 0;
  CT_OK(ptdp_groups_size(g, PTDP_GROUP_CONTEXT, &csize));
  CT_OK(ptdp_groups_size(g, PTDP_GROUP_DATA_CONTEXT, &dcsize));
  expect(csize == sp.cp && dcsize == d * sp.cp, "context and data+context sizes", str(sp.cp) + ", " + str(d * sp.cp),
         str(csize) + ", " + str(dcsize));
  const ptdp_gpt_options o = gpt_options(layers, sp);
  ptdp_pipeline_options popt;
  ptdp_pipeline_options_init(&popt);
  popt.scatter_gather = sp.no_scatter_gather ? 0 : 1;
  ptdp_model model = nullptr;
  ptdp_optimizer opt = nullptr;
  ptdp_schedule s = nullptr;
  Worst w;
  if (CT_OK(ptdp_model_create(g, &o, &model)).empty() && CT_OK(ptdp_optimizer_create(model, &oo, &opt)).empty() &&
      CT_OK(ptdp_schedule_create(sp.kind, sp.p, m, sp.v, &s)).empty()) {
    std::vector<int32_t> tok, lab;
    Masks masks;
    const std::size_t off = static_cast<std::size_t>(dp) * m * kMicro * g_seq;
    int clipped = 0;
    double S = 0;  // the AdamW movement bound
    for (int it = 0; it < kIters; ++it) {
      global_batch(it, d * m * kMicro, tok, lab, sp.masks ? &masks : nullptr);
      ptdp_iteration_result got{};
      const std::string at = "iteration " + str(it);
      const ptdp_batch_masks mk = sp.masks ? masks.at(dp * m * kMicro) : ptdp_batch_masks{};  // this replica's
      popt.masks = sp.masks ? &mk : nullptr;
      if (!CT_OK(ptdp_train_iteration(model, opt, s, tok.data() + off, lab.data() + off, kMicro, it, &popt, &got))
               .empty())
        break;
      const ptdp_iteration_result& ref = want.results[static_cast<std::size_t>(it)];
      w.loss = std::max(w.loss, rel(got.loss, ref.loss));
      w.norm = std::max(w.norm, rel(got.grad_norm, ref.grad_norm));
      w.lr = std::max(w.lr, rel(got.learning_rate, ref.learning_rate));
      expect(std::isfinite(got.loss) && rel(got.loss, ref.loss) <= 1e-4, at + ": loss equals the serial run's (1e-4 rel)",
             str(ref.loss), str(got.loss));
      expect(std::isfinite(got.grad_norm) && rel(got.grad_norm, ref.grad_norm) <= 1e-4,
             at + ": grad_norm equals the serial run's (1e-4 rel)", str(ref.grad_norm), str(got.grad_norm));
      expect(rel(got.learning_rate, ref.learning_rate) <= 1e-12, at + ": learning_rate equals the serial run's",
             str(ref.learning_rate), str(got.learning_rate));
      const double lr = expected_lr(oo, it);
      expect(rel(got.learning_rate, lr) <= 1e-12, at + ": learning_rate follows the warm-up + decay schedule", str(lr),
             str(got.learning_rate));
      expect(got.loss_scale == 1.0f && got.skipped == 0 && got.skipped_iterations == 0,
             at + ": loss scale 1, not skipped", "1, 0, 0",
             str(got.loss_scale) + ", " + str(got.skipped) + ", " + str(got.skipped_iterations));
      expect(got.seconds > 0 && got.comm_wait_seconds >= 0 && got.comm_wait_seconds <= got.seconds * 1.001 + 1e-6,
             at + ": seconds > 0 and 0 <= comm_wait_seconds <= seconds", "true",
             str(got.seconds) + " / " + str(got.comm_wait_seconds));
      if (got.grad_norm > kClip) ++clipped;
      // Muon moves an element of an [A, B] matrix by at most lr sqrt(max(A, B)) (the spectral
      // scale) times the largest entry of the orthogonalised update (<= its spectral norm, which
      // 5 quintic steps leave below 1.25).
      S += sp.opt == PTDP_OPTIMIZER_MUON
               ? lr * std::max(adam_ratio_bound(oo.adam_beta1, oo.adam_beta2, it + 1),
                               1.25 * std::sqrt(static_cast<double>(std::max(o.ffn_hidden_size > 0 ? o.ffn_hidden_size
                                                                                                   : 4 * kHidden,
                                                                             kHidden))))
               : lr * adam_ratio_bound(oo.adam_beta1, oo.adam_beta2, it + 1);
    }
    g_clipped += clipped;
    g_unclipped += kIters - clipped;
    if (sp.cp > 1 && sp.p == 1) {
      // Context parallelism splits the sequence: the whole-sequence logits are refused, naming it.
      std::vector<int32_t> tokens(static_cast<std::size_t>(g_seq), 1);
      std::vector<float> logits(static_cast<std::size_t>(g_seq * kVocab));
      expect(ptdp_model_logits(model, tokens.data(), 1, logits.data(), logits.size() * sizeof(float)) ==
                 PTDP_ERR_INVALID_ARGUMENT,
             "ptdp_model_logits refuses context parallelism");
      const std::string why = ptdp_last_error();
      expect(why.find("context parallelism (context_parallel_size " + str(sp.cp) + ")") != std::string::npos,
             "the refusal names context_parallel_size", "context parallelism (context_parallel_size N)", why);
    }
    if (sp.cp > 1) {
      // A sequence that 2c chunks do not divide is refused at creation, naming the numbers.
      ptdp_gpt_options bad = o;
      bad.seq_length = 2 * sp.cp + 2;
      ptdp_model m2 = nullptr;
      expect(ptdp_model_create(g, &bad, &m2) == PTDP_ERR_INVALID_ARGUMENT && m2 == nullptr,
             "a seq_length not divisible by 2c is refused");
      const std::string why = ptdp_last_error();
      expect(why.find("seq_length " + str(bad.seq_length) + " is not divisible by 2 x context_parallel_size " +
                      str(sp.cp)) != std::string::npos,
             "the refusal names seq_length and context_parallel_size", "seq_length N is not divisible by ...", why);
    }
    const Params got = read_params(model);
    const bool has_output = std::find(got.names.begin(), got.names.end(), "output_layer.weight") != got.names.end();
    expect(has_output == sp.untied, "output_layer.weight exists exactly when the embeddings are untied");
    if (expect(got.names == want.final_params.names, "parameter names and order")) {
      compare_params(want, got, sp.opt != PTDP_OPTIMIZER_SGD, S, w, sp);
      if (ct::g_rank == 0) {
        std::printf("%-28s d=%d: worst rel loss %.1e, grad_norm %.1e, lr %.1e | params: rel L2 %.1e (training moved "
                    "them %.3f), worst |x-y|-1e-4|x| %.1e at %s, on key-bias elements %.1e (atol %.1e); worst tensor "
                    "||x-y||/||x-x0|| %.1e at %s | clipped %d of %d\n",
                    sp.text.c_str(), d, w.loss, w.norm, w.lr, w.param_l2, w.moved, w.excess, w.excess_at.c_str(),
                    w.key_excess, w.atol, w.tensor, w.tensor_at.c_str(), clipped, kIters);
        std::fflush(stdout);
      }
    }
  }
  ptdp_schedule_destroy(s);
  CT_OK(ptdp_optimizer_destroy(opt));
  CT_OK(ptdp_model_destroy(model));
  CT_OK(ptdp_groups_destroy(g));
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  std::vector<Spec> specs;
  for (int i = 1; i < argc; ++i) {
    Spec s;
    if (!expect(parse(argv[i], &s) && W % (s.t * s.p * s.cp) == 0, std::string("spec ") + argv[i] + " parses and fits the world"))
      continue;
    specs.push_back(s);
  }
  expect(!specs.empty(), "at least one spec given");
  ptdp_runtime rt = nullptr, serial_rt = nullptr;
  ptdp_groups g1 = nullptr;
  ptdp_runtime_options ro = ct::runtime_options();
  ptdp_runtime_options so = ct::runtime_options();
  so.use_mpi = 0;
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty() && CT_OK(ptdp_runtime_create(&so, &serial_rt)).empty() &&
      CT_OK(ptdp_groups_create(serial_rt, nullptr, &g1)).empty()) {
    int32_t r1 = -1, w1 = 0;
    CT_OK(ptdp_runtime_world(serial_rt, &r1, &w1));
    expect(r1 == 0 && w1 == 1, "use_mpi = 0 gives a world of one under mpiexec", "0 of 1", str(r1) + " of " + str(w1));
    serial_references(g1, W, me, specs);
    for (const Spec& s : specs) run(rt, W, s);
    // Both branches of gradient clipping were taken (over all runs of this job).
    expect(g_clipped > 0 && g_unclipped > 0, "iterations with and without clipping", "both > 0",
           str(g_clipped) + " clipped, " + str(g_unclipped) + " not");
  }
  g_serial.clear();
  CT_OK(ptdp_groups_destroy(g1));
  CT_OK(ptdp_runtime_destroy(serial_rt));
  CT_OK(ptdp_runtime_destroy(rt));
  const int code = ct::finish("test_train_equivalence");
  MPI_Finalize();
  return code;
}
