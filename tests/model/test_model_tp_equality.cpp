// The tensor-parallel GPT equals the serial one (under mpiexec; every rank runs every check), for
// the GPT and for Llama- and Qwen2-style decoders.
//
// usage: test_model_tp_equality T [T ...]     (each T divides the world size)
//
// In one job, on one runtime, every rank builds the reference model on groups with tensor size
// 1 (it holds the whole model) and the model under test on groups with tensor size T, with the
// same options and seed, and runs the same schedule on both:
//   - initial parameters (ptdp_model_get_param at global shape) equal the reference exactly on
//     every row both have (init is a pure function of seed, name and index);
//   - every parameter is then set (ptdp_model_set_param) to the same perturbed values, so biases
//     and LayerNorm parameters are not at their trivial init; the padded vocabulary rows get
//     large values that would change the loss if they ever took part;
//   - m = 3 microbatches of iteration 7 are accumulated with grad_scale 1/3, then (from zero)
//     m = 2 of iteration 8 with microbatch indices 4 and 9 and grad_scale 1/2;
//   - ptdp_model_forward (training 1 and 0) of the same steps, and with other iteration and
//     microbatch keys, which key the dropout masks.
// Checked against the reference: every loss and every gradient (ptdp_model_get_grad at global
// shape; the first vocab_size rows of the vocabulary-padded ones) to 1e-5 relative. Checked on
// every model: padded rows' gradients are exactly zero; recompute full and selective give
// bitwise the losses and gradients of none; forward gives bitwise the loss of forward_backward
// for the same step and leaves the gradients alone; dropout keys change the loss (dropout on)
// or do not (off); the accumulated gradient is the 1/m-weighted sum of the microbatches' own.
// The `masks` cases give every call options with masks (ptdp_pipeline_options::masks): Megatron's
// end-of-document masks (ptdp_eod_masks with --eod-mask-loss, --reset-position-ids and
// --reset-attention-mask: ignored labels, restarted positions, documents) and check the same,
// with the unfused attention (learned positions) and the fused kernel (Llama: RoPE, GQA).
#include "model_test.h"

#include <cstdlib>

namespace {

using mt::ParamInfo;
using mt::Worst;

constexpr int32_t kB = 2;          // micro batch size
constexpr int kM = 3;              // microbatches accumulated
constexpr int64_t kIter = 7;       // iteration of the accumulated step
constexpr double kRel = 1e-5;      // tensor-parallel vs serial, relative
// Absolute floor, for entries near zero. An entry of a gradient is a sum over tokens (and, in
// the row-parallel and vocabulary all-reduces, over ranks) whose order of summation changes
// with t, and a sum that cancels keeps the rounding of its largest partial sums: a few ulps of
// the gradient's scale, not of the entry. The gradients here are at most about 0.17 (ulp
// 1.5e-8); the measured differences are at most 9e-8 (6 ulps) and, beyond 1e-5 relative, at
// most 4.3e-8. 2e-7 (13 ulps of the largest entries, 1.2e-6 of the gradients' scale) leaves a
// margin of 4.6x for other BLAS kernels and still asks for 1e-5 relative of every entry above
// 2e-2; a real error (a missing all-reduce, a wrong slice, an unmasked padded column) is of
// the order of the entries themselves.
constexpr double kFloor = 2e-7;

enum class Arch { Gpt, Llama, Qwen2, Olmoe };

struct Case {
  std::string name;
  float dropout;       // hidden and attention
  int32_t untie;       // untie_embeddings_and_output_weights
  int32_t vocab;       // vocab_size
  int32_t divisible;   // make_vocab_size_divisible_by
  Arch arch = Arch::Gpt;
  bool masks = false;  // ignored labels, reset positions and documents from an eod token
  bool fused = false;  // the fused attention kernel (the CPU's default), else the unfused path
};

// V = 301 is not divisible by any t > 1. With make_vocab_size_divisible_by = 4 the padded
// vocabulary is 304 for t = 1, 2 and 4; with 3 it is 303, 306 and 312: the padding differs
// with t.
const Case kCases[] = {
    {"dropout 0.1, tied, V 301 / 4", 0.1f, 0, 301, 4},
    {"dropout 0, tied, V 301 / 3", 0.0f, 0, 301, 3},
    {"dropout 0.1, untied, V 301 / 3", 0.1f, 1, 301, 3},
    {"dropout 0, untied, V 301 / 4", 0.0f, 1, 301, 4},
    // Llama: RMSNorm, SwiGLU (fc1's gate and up rows split alike over t), RoPE, 8 query heads
    // in 4 key/value groups (t = 4 holds one group each), head dim 8 (kv_channels; 8 x 8 = 64
    // != h), no biases, untied output layer. Qwen2: the qkv bias kept, a quarter of each head
    // rotated, q and k normalised per head, tied.
    {"llama, dropout 0.1, untied, V 301 / 4", 0.1f, 1, 301, 4, Arch::Llama},
    {"qwen2, dropout 0, tied, V 301 / 3", 0.0f, 0, 301, 3, Arch::Qwen2},
    // OLMoE's q and k norms over the whole projections: their row sums all-reduced over t.
    {"olmoe q/k norms across heads, dropout 0.1, untied, V 301 / 4", 0.1f, 1, 301, 4, Arch::Olmoe},
    {"masks, dropout 0.1, tied, V 301 / 4", 0.1f, 0, 301, 4, Arch::Gpt, true},
    {"llama, masks, fused attention, dropout 0.1, untied, V 301 / 3", 0.1f, 1, 301, 3, Arch::Llama, true, true},
};

constexpr int32_t kEod = 7;  // the masks cases' end-of-document token

const ptdp_recompute kRecomputes[] = {PTDP_RECOMPUTE_NONE, PTDP_RECOMPUTE_FULL, PTDP_RECOMPUTE_SELECTIVE};
const char* recompute_name(ptdp_recompute r) {
  return r == PTDP_RECOMPUTE_NONE ? "none" : r == PTDP_RECOMPUTE_FULL ? "full" : "selective";
}

ptdp_gpt_options options_of(const Case& c, ptdp_recompute r) {
  ptdp_gpt_options o = mt::tiny_gpt();
  o.hidden_dropout = c.dropout;
  o.attention_dropout = c.dropout;
  o.untie_embeddings_and_output_weights = c.untie;
  o.vocab_size = c.vocab;
  o.make_vocab_size_divisible_by = c.divisible;
  o.recompute_granularity = r;
  o.attention = c.fused ? PTDP_ATTENTION_FUSED : PTDP_ATTENTION_UNFUSED;
  if (c.arch != Arch::Gpt) {
    o.normalization = PTDP_NORMALIZATION_RMSNORM;
    o.swiglu = 1;
    o.ffn_hidden_size = 40;
    o.position_embedding_type = PTDP_POSITION_EMBEDDING_ROPE;
    o.rotary_base = 500.0;
    o.num_attention_heads = 8;
    o.num_query_groups = 4;
    o.kv_channels = 8;
    o.disable_bias_linear = 1;
  }
  if (c.arch == Arch::Olmoe) {
    o.qk_layernorm = 1;
    o.qk_layernorm_across_heads = 1;
  }
  if (c.arch == Arch::Qwen2) {
    o.add_qkv_bias = 1;
    o.rotary_percent = 0.25f;
    o.qk_layernorm = 1;
  }
  return o;
}

int64_t padded(const Case& c, int t) {
  const int64_t m = static_cast<int64_t>(c.divisible) * t;
  return (c.vocab + m - 1) / m * m;
}

struct Batch {
  std::vector<int32_t> tokens, labels;
  std::vector<int32_t> positions, starts;  // masks cases
  bool masked = false;
  /// The options to pass: with this batch's masks in the masks cases, else the defaults.
  const ptdp_pipeline_options* options() {
    ptdp_pipeline_options_init(&c_options);
    if (masked) {
      ptdp_batch_masks_init(&c_masks);
      c_masks.position_ids = positions.data();
      c_masks.document_starts = starts.data();
      c_options.masks = &c_masks;
    }
    return &c_options;
  }
  ptdp_batch_masks c_masks{};
  ptdp_pipeline_options c_options{};
};

Batch batch(int k, int32_t vocab, int32_t s, bool masked) {
  const std::size_t n = static_cast<std::size_t>(kB * s);
  Batch b;
  b.tokens = mt::ids(n, vocab, 100 + static_cast<uint64_t>(k));
  b.labels = mt::ids(n, vocab, 200 + static_cast<uint64_t>(k));
  // The last id of the vocabulary (on the last tensor rank) always appears.
  b.tokens[static_cast<std::size_t>(k)] = vocab - 1;
  b.labels[static_cast<std::size_t>(k) + 1] = vocab - 1;
  if (masked) {
    // Three documents in sample 0 (eods at 4 and 6), two in sample 1 (eod at 2 + k).
    for (std::size_t at : {std::size_t{4}, std::size_t{6}, static_cast<std::size_t>(s + 2 + k)}) b.tokens[at] = kEod;
    b.positions.resize(n);
    b.starts.resize(n);
    CT_OK(ptdp_eod_masks(b.tokens.data(), kB, s, kEod,
                         PTDP_EOD_MASK_LOSS | PTDP_EOD_RESET_POSITION_IDS | PTDP_EOD_RESET_ATTENTION_MASK,
                         b.labels.data(), b.positions.data(), b.starts.data()));
    mt::expect(std::count(b.labels.begin(), b.labels.end(), PTDP_IGNORE_INDEX) >= 3, "the eod labels are ignored");
    b.masked = true;
  }
  return b;
}

// The keys the extra forward passes use: (iteration, microbatch), all on batch 0.
const int64_t kKeys[][2] = {{kIter, 1}, {kIter + 1, 0}, {kIter + 1, 5}};

/// What one model computed.
struct Run {
  bool ok = false;
  std::vector<ParamInfo> infos;
  std::map<std::string, std::vector<float>> init;   // parameters as created
  std::vector<float> fb;                            // forward_backward losses, per microbatch
  std::vector<float> fwd_train, fwd_eval;           // ptdp_model_forward, per microbatch
  std::vector<float> keyed;                         // forward (training) of batch 0 under kKeys
  std::map<std::string, std::vector<float>> grads;  // after the m microbatches
  std::vector<float> fb2;                            // iteration 8, microbatches 4 and 9
  std::map<std::string, std::vector<float>> grads2;  // after them
};

/// The values every parameter is set to: the initial value plus noise (so biases and LayerNorm
/// parameters are not 0 and 1), a pure function of the name and the global index; the padded
/// vocabulary rows get large values instead.
std::vector<float> perturbed(const ParamInfo& p, const std::vector<float>& init, int32_t vocab) {
  std::vector<float> v = init;
  const uint64_t h = mt::hash_name(p.name);
  for (int64_t r = 0; r < p.rows(); ++r) {
    for (int64_t c = 0; c < p.cols(); ++c) {
      const std::size_t i = static_cast<std::size_t>(r * p.cols() + c);
      const double u = mt::urand(h, i);
      v[i] = p.vocab_rows() && r >= vocab ? static_cast<float>(3.0 * u) : static_cast<float>(v[i] + 0.05 * u);
    }
  }
  return v;
}

Run run_model(ptdp_groups groups, const Case& c, ptdp_recompute rc, int t, const std::string& tag) {
  Run run;
  ct::context(c.name + ", " + tag);
  const ptdp_gpt_options o = options_of(c, rc);
  ptdp_model m = nullptr;
  if (!CT_OK(ptdp_model_create(groups, &o, &m)).empty()) return run;

  run.infos = mt::param_infos(m);
  for (const ParamInfo& p : run.infos) {
    if (p.vocab_rows()) {
      mt::expect_eq<int64_t>(p.rows(), padded(c, t), p.name + " has the padded vocabulary rows for t");
    }
    run.init[p.name] = mt::get_param(m, p);
    const std::vector<float> v = perturbed(p, run.init[p.name], c.vocab);
    mt::set_param(m, p, v);
    mt::expect_bitwise(mt::get_param(m, p), v, "ptdp_model_get_param(" + p.name + ") returns what set_param set");
  }

  // m microbatches of one iteration, accumulated with grad_scale 1/m.
  const float scale = 1.0f / kM;
  CT_OK(ptdp_model_zero_grad(m));
  std::vector<Batch> batches;
  for (int k = 0; k < kM; ++k) {
    batches.push_back(batch(k, c.vocab, o.seq_length, c.masks));
    float loss = std::nanf("");
    CT_OK(ptdp_model_forward_backward(m, batches[k].tokens.data(), batches[k].labels.data(), kB, kIter, k, scale,
                                      batches[k].options(), &loss));
    run.fb.push_back(loss);
  }
  run.grads = mt::all_grads(m, run.infos);

  // Forward only: the same steps, then batch 0 under other dropout keys.
  for (int k = 0; k < kM; ++k) {
    for (int32_t training : {1, 0}) {
      float loss = std::nanf("");
      CT_OK(ptdp_model_forward(m, batches[k].tokens.data(), batches[k].labels.data(), kB, kIter, k, training,
                               batches[k].options(), &loss));
      (training ? run.fwd_train : run.fwd_eval).push_back(loss);
    }
  }
  for (const auto& key : kKeys) {
    float loss = std::nanf("");
    CT_OK(ptdp_model_forward(m, batches[0].tokens.data(), batches[0].labels.data(), kB, key[0], key[1], 1,
                             batches[0].options(), &loss));
    run.keyed.push_back(loss);
  }
  for (const ParamInfo& p : run.infos) {
    mt::expect_bitwise(mt::get_grad(m, p), run.grads[p.name], "ptdp_model_forward leaves the gradient of " + p.name + " alone");
  }

  // The accumulated gradient is the 1/m-weighted sum of each microbatch's own gradient (each
  // computed alone from zero, grad_scale 1). The summation orders differ, so the bound is
  // relative to the sum of the terms' magnitudes, plus the floor (a term is itself a sum that
  // may cancel; the key part of the QKV bias has a gradient that is zero up to round-off).
  std::map<std::string, std::vector<double>> sum, sum_abs;
  for (const ParamInfo& p : run.infos) {
    sum[p.name].assign(p.numel(), 0.0);
    sum_abs[p.name].assign(p.numel(), 0.0);
  }
  for (int k = 0; k < kM; ++k) {
    CT_OK(ptdp_model_zero_grad(m));
    float loss = std::nanf("");
    CT_OK(ptdp_model_forward_backward(m, batches[k].tokens.data(), batches[k].labels.data(), kB, kIter, k, 1.0f,
                                      batches[k].options(), &loss));
    mt::expect_bitwise(&loss, &run.fb[static_cast<std::size_t>(k)], 1,
                       "microbatch " + std::to_string(k) + " alone has the loss it had in the accumulation");
    for (const ParamInfo& p : run.infos) {
      const std::vector<float> g = mt::get_grad(m, p);
      for (std::size_t i = 0; i < g.size(); ++i) {
        sum[p.name][i] += static_cast<double>(g[i]) / kM;
        sum_abs[p.name][i] += std::fabs(static_cast<double>(g[i])) / kM;
      }
    }
  }
  for (const ParamInfo& p : run.infos) {
    const std::vector<float>& g = run.grads[p.name];
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < g.size(); ++i) {
      if (std::fabs(g[i] - sum[p.name][i]) > kRel * sum_abs[p.name][i] + kFloor) {
        if (bad++ == 0) first = i;
      }
    }
    mt::expect(bad == 0, "the accumulated gradient of " + p.name + " is the 1/m sum of the microbatches' own",
               "within 1e-5 of the terms' magnitudes + 2e-7",
               bad == 0 ? "" : std::to_string(bad) + " elements off, first [" + std::to_string(first) + "]: " +
                                   mt::str(g[first]) + " vs " + mt::str(sum[p.name][first]));
  }

  // A second step: iteration 8, m = 2 microbatches with indices 4 and 9 (batches 1 and 2).
  CT_OK(ptdp_model_zero_grad(m));
  for (int k : {1, 2}) {
    float loss = std::nanf("");
    CT_OK(ptdp_model_forward_backward(m, batches[k].tokens.data(), batches[k].labels.data(), kB, kIter + 1,
                                      k == 1 ? 4 : 9, 0.5f, batches[k].options(), &loss));
    run.fb2.push_back(loss);
  }
  run.grads2 = mt::all_grads(m, run.infos);
  for (int k : {1, 2}) {
    const float a = run.fb2[static_cast<std::size_t>(k - 1)], b = run.fb[static_cast<std::size_t>(k)];
    const std::string what = "batch " + std::to_string(k) + " at (iteration 8, microbatch " + (k == 1 ? "4" : "9") +
                             ") vs (7, " + std::to_string(k) + ")";
    if (c.dropout > 0) {
      mt::expect(a != b, what + ": different dropout masks, different losses", "different", mt::str(a) + " both");
    } else {
      mt::expect_bitwise(&a, &b, 1, what + ": the same loss without dropout");
    }
  }

  // Checks on this model alone.
  for (const ParamInfo& p : run.infos) {
    if (p.vocab_rows()) {
      mt::expect_zero(run.grads[p.name], static_cast<std::size_t>(c.vocab) * p.cols(), p.numel(),
                      "the padded rows of " + p.name + " have exactly zero gradient");
      mt::expect_zero(run.grads2[p.name], static_cast<std::size_t>(c.vocab) * p.cols(), p.numel(),
                      "the padded rows of " + p.name + " have exactly zero gradient (iteration 8)");
    }
    // Every parameter takes part: a gradient that is all zeros would hide a missing backward.
    const std::vector<float>& g = run.grads[p.name];
    mt::expect(std::any_of(g.begin(), g.end(), [](float x) { return x != 0.0f; }),
               "the gradient of " + p.name + " is not all zero");
  }
  for (int k = 0; k < kM; ++k) {
    const std::size_t kk = static_cast<std::size_t>(k);
    mt::expect_bitwise(&run.fwd_train[kk], &run.fb[kk], 1,
                       "forward(training 1) of microbatch " + std::to_string(k) + " = its forward_backward loss");
    mt::expect(std::isfinite(run.fb[kk]) && run.fb[kk] > 0.0f, "the loss is finite and positive", "> 0", mt::str(run.fb[kk]));
    if (c.dropout > 0) {
      mt::expect(run.fwd_eval[kk] != run.fwd_train[kk], "dropout on: forward(training 0) differs from training 1",
                 "different", mt::str(run.fwd_eval[kk]) + " both");
    } else {
      mt::expect_bitwise(&run.fwd_eval[kk], &run.fwd_train[kk], 1, "dropout off: training 0 and 1 give the same loss");
    }
  }
  // Batch 0 under keys (7,0) [run.fb[0]], (7,1), (8,0), (8,5).
  std::vector<float> keyed = {run.fb[0]};
  keyed.insert(keyed.end(), run.keyed.begin(), run.keyed.end());
  for (std::size_t i = 0; i < keyed.size(); ++i) {
    for (std::size_t j = i + 1; j < keyed.size(); ++j) {
      const std::string what = "batch 0 under dropout keys " + std::to_string(i) + " and " + std::to_string(j);
      if (c.dropout > 0) {
        mt::expect(keyed[i] != keyed[j], what + " gives different losses (masks keyed by iteration, microbatch)",
                   "different", mt::str(keyed[i]) + " both");
      } else {
        mt::expect_bitwise(&keyed[i], &keyed[j], 1, what + " gives the same loss without dropout");
      }
    }
  }
  CT_OK(ptdp_model_destroy(m));
  run.ok = true;
  return run;
}

/// `a` and `b` computed bitwise the same losses and gradients.
void expect_same_bits(const Run& a, const Run& b, const std::string& what) {
  mt::expect_bitwise(a.fb, b.fb, what + ": forward_backward losses");
  mt::expect_bitwise(a.fwd_train, b.fwd_train, what + ": forward losses (training)");
  mt::expect_bitwise(a.fwd_eval, b.fwd_eval, what + ": forward losses (eval)");
  mt::expect_bitwise(a.keyed, b.keyed, what + ": forward losses under other keys");
  mt::expect_bitwise(a.fb2, b.fb2, what + ": forward_backward losses (iteration 8)");
  for (const auto& [name, g] : b.grads) {
    auto it = a.grads.find(name);
    if (!mt::expect(it != a.grads.end(), what + ": has " + name)) continue;
    mt::expect_bitwise(it->second, g, what + ": gradient of " + name);
    mt::expect_bitwise(a.grads2.at(name), b.grads2.at(name), what + ": gradient of " + name + " (iteration 8)");
  }
}

/// The model under test (tensor size t) against the serial reference.
void compare_to_reference(const Run& tp, const Run& ref, const Case& c, Worst* loss_worst, Worst* grad_worst) {
  // Names, order, shapes, partition dims: the same, except the padded vocabulary rows.
  if (!mt::expect_eq(tp.infos.size(), ref.infos.size(), "number of parameters")) return;
  for (std::size_t i = 0; i < tp.infos.size(); ++i) {
    const ParamInfo& p = tp.infos[i];
    const ParamInfo& q = ref.infos[i];
    mt::expect(p.name == q.name, "parameter " + std::to_string(i) + " name", q.name, p.name);
    mt::expect_eq(p.ndim, q.ndim, p.name + " ndim");
    mt::expect_eq(p.partition_dim, q.partition_dim, p.name + " partition dim");
    mt::expect_eq(p.cols(), q.cols(), p.name + " columns");
    if (!p.vocab_rows()) mt::expect_eq(p.rows(), q.rows(), p.name + " rows");
    if (p.name != q.name || p.cols() != q.cols()) continue;

    // Initial values: exact on every row both have.
    const std::size_t common = static_cast<std::size_t>(std::min(p.rows(), q.rows()) * p.cols());
    mt::expect_bitwise(tp.init.at(p.name).data(), ref.init.at(q.name).data(), common,
                       "initial " + p.name + " equals the serial model's");

    // Gradients: the first vocab rows of the vocabulary-padded ones, all of the others.
    const std::size_t n = p.vocab_rows() ? static_cast<std::size_t>(c.vocab) * p.cols() : p.numel();
    mt::expect_close(tp.grads.at(p.name).data(), ref.grads.at(q.name).data(), n, kRel, kFloor,
                     "gradient of " + p.name + " equals the serial model's", grad_worst);
    mt::expect_close(tp.grads2.at(p.name).data(), ref.grads2.at(q.name).data(), n, kRel, kFloor,
                     "gradient of " + p.name + " equals the serial model's (iteration 8)", grad_worst);
  }
  mt::expect_close(tp.fb, ref.fb, kRel, 0, "forward_backward losses equal the serial model's", loss_worst);
  mt::expect_close(tp.fwd_train, ref.fwd_train, kRel, 0, "forward (training) losses equal the serial model's", loss_worst);
  mt::expect_close(tp.fwd_eval, ref.fwd_eval, kRel, 0, "forward (eval) losses equal the serial model's", loss_worst);
  mt::expect_close(tp.keyed, ref.keyed, kRel, 0, "losses under other dropout keys equal the serial model's", loss_worst);
  mt::expect_close(tp.fb2, ref.fb2, kRel, 0, "forward_backward losses (iteration 8) equal the serial model's", loss_worst);
}

}  // namespace

int main(int argc, char** argv) {
  int rank = 0, world = 1;
  ct::start(&argc, &argv, &rank, &world);
  std::vector<int> ts;
  for (int i = 1; i < argc; ++i) {
    const int t = std::atoi(argv[i]);
    if (t <= 0 || world % t != 0) {
      if (rank == 0) std::fprintf(stderr, "usage: %s T [T ...] with each T dividing the world size %d\n", argv[0], world);
      MPI_Finalize();
      return 2;
    }
    ts.push_back(t);
  }
  if (ts.empty()) ts.push_back(world);

  const double start = ct::now_s();
  const ptdp_runtime_options ro = ct::runtime_options();
  ptdp_runtime rt = nullptr;
  if (!CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    const int rc = ct::finish(argv[0]);
    MPI_Finalize();
    return rc;
  }

  ct::Layout serial;
  serial.W = world;
  const ptdp_parallel_options so = serial.options();
  ptdp_groups ref_groups = nullptr;
  CT_OK(ptdp_groups_create(rt, &so, &ref_groups));
  std::vector<ptdp_groups> tp_groups;
  for (int t : ts) {
    ct::Layout l;
    l.W = world;
    l.t = t;
    const ptdp_parallel_options po = l.options();
    ptdp_groups g = nullptr;
    CT_OK(ptdp_groups_create(rt, &po, &g));
    int32_t size = 0;
    CT_OK(ptdp_groups_size(g, PTDP_GROUP_TENSOR, &size));
    mt::expect_eq(size, t, "tensor group size");
    tp_groups.push_back(g);
  }

  for (const Case& c : kCases) {
    Run ref[3];
    for (int r = 0; r < 3; ++r) ref[r] = run_model(ref_groups, c, kRecomputes[r], 1, std::string("reference t=1, recompute ") + recompute_name(kRecomputes[r]));
    for (int r = 1; r < 3; ++r) {
      ct::context(c.name + ", reference t=1");
      if (ref[0].ok && ref[r].ok) expect_same_bits(ref[r], ref[0], std::string("recompute ") + recompute_name(kRecomputes[r]) + " vs none");
    }
    for (std::size_t ti = 0; ti < ts.size(); ++ti) {
      const int t = ts[ti];
      const std::string tag = "W=" + std::to_string(world) + " t=" + std::to_string(t);
      Run tp[3];
      for (int r = 0; r < 3; ++r) tp[r] = run_model(tp_groups[ti], c, kRecomputes[r], t, tag + ", recompute " + recompute_name(kRecomputes[r]));
      ct::context(c.name + ", " + tag);
      for (int r = 1; r < 3; ++r) {
        if (tp[0].ok && tp[r].ok) expect_same_bits(tp[r], tp[0], std::string("recompute ") + recompute_name(kRecomputes[r]) + " vs none");
      }
      Worst loss_worst, grad_worst;
      grad_worst.rel_min = kFloor / kRel;  // where the relative bound is the one that binds
      if (tp[0].ok && ref[0].ok) compare_to_reference(tp[0], ref[0], c, &loss_worst, &grad_worst);
      loss_worst.reduce();
      grad_worst.reduce();
      if (rank == 0) {
        std::printf("[%s, %s] vs serial: losses worst rel %.3g; gradients worst rel %.3g (entries >= %.3g), worst abs "
                    "%.3g, absolute floor needed beyond 1e-5 relative %.3g (allowed %.3g)\n",
                    c.name.c_str(), tag.c_str(), loss_worst.rel, grad_worst.rel, grad_worst.rel_min, grad_worst.abs, grad_worst.floor,
                    kFloor);
      }
    }
  }
  ct::context("teardown");
  for (ptdp_groups g : tp_groups) CT_OK(ptdp_groups_destroy(g));
  CT_OK(ptdp_groups_destroy(ref_groups));
  CT_OK(ptdp_runtime_destroy(rt));
  if (rank == 0) std::printf("elapsed %.2f s\n", ct::now_s() - start);
  const int rc = ct::finish(argv[0]);
  MPI_Finalize();
  return rc;
}
