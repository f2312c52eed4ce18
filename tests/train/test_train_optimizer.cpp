// The optimizer of full PTD-P training under mpiexec (4 or 8 ranks), through the C API:
//
// 1. A non-finite gradient on one rank skips the step on every rank: a user model of four
//    tensors (registered with ptdp_optimizer_create_for_tensors, some PTDP_PARAM_REPLICATED /
//    PTDP_PARAM_NO_WEIGHT_DECAY), dynamic loss scaling with hysteresis 1 from 1024. One element
//    of one rank's gradient set to inf/nan (through the registered handle, which points into the
//    optimizer's flat buffer): every rank reports skipped = 1 and skipped_iterations = 1, the
//    parameters are bit-identical, the next step runs at loss scale 512, is not skipped, and is
//    AdamW's first step (the skipped one advanced neither the moments nor the bias correction).
//    Distributed optimizer on and off; t = 1 and t = 2; the bad element in a split or in a
//    replicated tensor (replicated ones count in the norm on tensor rank 0 only, but must still
//    be checked everywhere).
// 2. Data-parallel averaging of user tensors is exact: SGD (momentum 0, lr 1, clip 0) with
//    dyadic values gives p - mean over the data-parallel group of the gradients bit for bit
//    (weight decay 0; and 0.5 for tensors without PTDP_PARAM_NO_WEIGHT_DECAY), over two steps,
//    and grad_norm counts split tensors on every tensor rank and replicated ones once.
// 3. Optimizer state per rank with the distributed optimizer is the plain state / d: rank 0
//    prints "optimizer state bytes per rank: plain X, distributed Y, d = Z"; |Y d - X| is
//    within the padding (< d elements per bucket), and X covers this rank's parameters plus
//    fewer than d elements of padding per model chunk.
// 4. Bad arguments to the optimizer functions return PTDP_ERR_INVALID_ARGUMENT with a message
//    naming the argument and change nothing; ptdp_model_destroy of a model an optimizer uses
//    returns PTDP_ERR_INVALID_STATE.
#include <algorithm>
#include <cstring>
#include <limits>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::str;

// ---- a user's model: four tensors ----------------------------------------------------------

constexpr int kCount = 4;
constexpr int kNdim[kCount] = {2, 1, 1, 1};
constexpr int64_t kShape[kCount][2] = {{3, 5}, {7, 1}, {4, 1}, {5, 1}};  // 31 elements: pads for d = 2, 4, 8
constexpr int32_t kFlags[kCount] = {PTDP_PARAM_DEFAULT, PTDP_PARAM_NO_WEIGHT_DECAY,
                                    PTDP_PARAM_REPLICATED | PTDP_PARAM_NO_WEIGHT_DECAY, PTDP_PARAM_REPLICATED};

int64_t numel(int i) { return kShape[i][0] * kShape[i][1]; }
bool replicated(int i) { return (kFlags[i] & PTDP_PARAM_REPLICATED) != 0; }
bool decays(int i) { return (kFlags[i] & PTDP_PARAM_NO_WEIGHT_DECAY) == 0; }

// Dyadic values: sums of a few of them, and their halves, quarters and eighths, are exact in f32.
// Split tensors differ between tensor ranks; replicated ones are the same on every tensor rank.
float param_value(int tp, int i, int64_t k) {
  const int who = replicated(i) ? 0 : tp;
  return static_cast<float>(((k * 3 + i * 5 + who * 7) % 13) - 6) / 4.0f;
}

// Gradients differ on every rank (replicated tensors: the same on the tensor ranks of a replica).
float grad_value(const ct::Layout& L, int rank, int i, int64_t k, int step) {
  const int who = replicated(i) ? L.dp(rank) : rank;
  return static_cast<float>(((who * 5 + k * 3 + i * 11 + step * 7) % 17) - 8) / 8.0f;
}

// The mean of the gradient over `rank`'s data-parallel group (exact: d is a power of two).
double mean_grad(const ct::Layout& L, int rank, int i, int64_t k, int step) {
  const std::vector<int32_t> members = L.members(PTDP_GROUP_DATA, rank);
  double sum = 0;
  for (int32_t r : members) sum += grad_value(L, r, i, k, step);
  return sum / static_cast<double>(members.size());
}

// The global norm of the averaged gradients: split tensors on every tensor rank, replicated once.
double expected_norm(const ct::Layout& L, int step) {
  double sq = 0;
  for (int tp = 0; tp < L.t; ++tp) {
    for (int i = 0; i < kCount; ++i) {
      if (replicated(i) && tp > 0) continue;
      for (int64_t k = 0; k < numel(i); ++k) {
        const double g = mean_grad(L, L.rank_of(0, 0, tp), i, k, step);
        sq += g * g;
      }
    }
  }
  return std::sqrt(sq);
}

ptdp_tensor new_tensor(int i, const std::vector<float>& values) {
  ptdp_tensor t = nullptr;
  CT_OK(ptdp_tensor_create(nullptr, kNdim[i], kShape[i], values.data(), values.size() * sizeof(float), &t));
  return t;
}

std::vector<float> host(ptdp_tensor t) {
  int64_t n = 0;
  ptdp_tensor_numel(t, &n);
  std::vector<float> v(static_cast<std::size_t>(n));
  CT_OK(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float)));
  return v;
}

struct UserModel {
  std::vector<ptdp_tensor> params, grads;
  UserModel(int tp) {
    for (int i = 0; i < kCount; ++i) {
      std::vector<float> p(static_cast<std::size_t>(numel(i)));
      for (int64_t k = 0; k < numel(i); ++k) p[static_cast<std::size_t>(k)] = param_value(tp, i, k);
      params.push_back(new_tensor(i, p));
      grads.push_back(new_tensor(i, std::vector<float>(p.size(), 0.0f)));
    }
  }
  ~UserModel() {
    for (ptdp_tensor t : params) ptdp_tensor_destroy(t);
    for (ptdp_tensor t : grads) ptdp_tensor_destroy(t);
  }
  UserModel(const UserModel&) = delete;
  UserModel& operator=(const UserModel&) = delete;

  // Writes this rank's gradients of `step`, times `scale`, through the registered handles.
  void set_grads(const ct::Layout& L, int rank, int step, float scale) {
    for (int i = 0; i < kCount; ++i) {
      std::vector<float> g(static_cast<std::size_t>(numel(i)));
      for (int64_t k = 0; k < numel(i); ++k) g[static_cast<std::size_t>(k)] = grad_value(L, rank, i, k, step) * scale;
      CT_OK(ptdp_tensor_copy_from_host(grads[static_cast<std::size_t>(i)], g.data(), g.size() * sizeof(float)));
    }
  }
  std::vector<std::vector<float>> values() const {
    std::vector<std::vector<float>> v;
    for (ptdp_tensor t : params) v.push_back(host(t));
    return v;
  }
};

ptdp_groups make_groups(ptdp_runtime rt, int t, int p = 1, int v = 1) {
  ptdp_parallel_options po;
  ptdp_parallel_options_init(&po);
  po.tensor_model_parallel_size = t;
  po.pipeline_model_parallel_size = p;
  po.virtual_pipeline_model_parallel_size = v;
  ptdp_groups g = nullptr;
  CT_OK(ptdp_groups_create(rt, &po, &g));
  return g;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}

// ---- 1. a non-finite gradient skips the step everywhere ------------------------------------

struct Injection {
  int rank, tensor;
  int64_t element;
  float value;
};

void skip_on_overflow(ptdp_runtime rt, int W, int t, int dist, int64_t bucket, Injection bad, Injection bad2) {
  const ct::Layout L{W, t, 1, 1};
  ct::context("overflow: t=" + str(t) + " d=" + str(L.d()) + " dist=" + str(dist) + " bucket=" + str(bucket) +
              ", " + str(bad.value) + " on rank " + str(bad.rank) + " in tensor " + str(bad.tensor));
  ptdp_groups g = make_groups(rt, t);
  if (!g) return;
  const int me = ct::g_rank, tp = L.tp(me);
  {
    UserModel um(tp);
    ptdp_optimizer_options oo;
    ptdp_optimizer_options_init(&oo);
    oo.lr = 1e-2;
    oo.weight_decay = 0.1f;
    oo.clip_grad = 0;
    oo.dynamic_loss_scale = 1;
    oo.initial_loss_scale = 1024;
    oo.hysteresis = 1;
    oo.use_distributed_optimizer = dist;
    oo.ddp_bucket_size = bucket;
    ptdp_optimizer opt = nullptr;
    if (CT_OK(ptdp_optimizer_create_for_tensors(g, &oo, um.params.data(), um.grads.data(), kFlags, kCount, &opt)).empty()) {
      const std::vector<std::vector<float>> p0 = um.values();
      auto inject = [&](const Injection& x) {
        if (me != x.rank) return;
        std::vector<float> gr = host(um.grads[static_cast<std::size_t>(x.tensor)]);
        gr[static_cast<std::size_t>(x.element)] = x.value;
        CT_OK(ptdp_tensor_copy_from_host(um.grads[static_cast<std::size_t>(x.tensor)], gr.data(), gr.size() * sizeof(float)));
      };
      // Step 0: gradients scaled by 1024, one bad element on one rank.
      um.set_grads(L, me, 0, 1024.0f);
      inject(bad);
      ptdp_iteration_result r{};
      CT_OK(ptdp_optimizer_reduce_gradients(opt));
      CT_OK(ptdp_optimizer_step(opt, 0, &r));
      expect(r.skipped == 1 && r.skipped_iterations == 1, "step 0 skipped on every rank", "skipped 1, skipped_iterations 1",
             "skipped " + str(r.skipped) + ", skipped_iterations " + str(r.skipped_iterations));
      expect(std::isinf(r.grad_norm), "skipped step reports grad_norm inf", "inf", str(r.grad_norm));
      expect(r.loss_scale == 1024.0f, "step 0 ran at loss scale 1024", "1024", str(r.loss_scale));
      expect(r.learning_rate == 1e-2, "step 0 learning rate", "0.01", str(r.learning_rate));
      expect(same_bits(um.values(), p0), "parameters bit-identical after the skipped step");

      // Step 1: clean gradients, scaled by the halved scale 512: AdamW's first step.
      um.set_grads(L, me, 1, 512.0f);
      CT_OK(ptdp_optimizer_step(opt, 1, &r));  // reduces first by itself
      expect(r.skipped == 0 && r.skipped_iterations == 1, "clean step 1 not skipped", "skipped 0, skipped_iterations 1",
             "skipped " + str(r.skipped) + ", skipped_iterations " + str(r.skipped_iterations));
      expect(r.loss_scale == 512.0f, "step 1 ran at the halved loss scale", "512", str(r.loss_scale));
      const double norm = expected_norm(L, 1);
      expect(std::fabs(r.grad_norm - norm) <= 1e-6 * norm, "step 1 grad_norm (unscaled, averaged)", str(norm),
             str(r.grad_norm));
      const std::vector<std::vector<float>> p1 = um.values();
      std::size_t off = 0, bad_elems = 0;
      double worst = 0;
      for (int i = 0; i < kCount; ++i) {
        for (int64_t k = 0; k < numel(i); ++k) {
          // AdamW's first step (bias-corrected m = g, v = g^2): p (1 - lr wd) - lr g / (|g| + eps).
          const double gm = mean_grad(L, me, i, k, 1);
          const double want = p0[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] * (1.0 - 1e-2 * (decays(i) ? 0.1 : 0.0)) -
                              1e-2 * gm / (std::fabs(gm) + 1e-8);
          const double e = std::fabs(p1[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] - want);
          worst = std::max(worst, e);
          if (!(e <= 1e-6)) ++bad_elems;
        }
        off += static_cast<std::size_t>(numel(i));
      }
      expect(bad_elems == 0, "step 1 is AdamW's first step from the untouched parameters", "all within 1e-6",
             str(bad_elems) + " of " + str(off) + " off, worst " + str(worst));

      // Step 2: another bad element elsewhere: skipped at 512, the scale halves again.
      um.set_grads(L, me, 2, 512.0f);
      inject(bad2);
      CT_OK(ptdp_optimizer_step(opt, 2, &r));
      expect(r.skipped == 1 && r.skipped_iterations == 2 && r.loss_scale == 512.0f, "step 2 skipped at scale 512",
             "1, 2, 512", str(r.skipped) + ", " + str(r.skipped_iterations) + ", " + str(r.loss_scale));
      expect(same_bits(um.values(), p1), "parameters bit-identical after the second skipped step");
      um.set_grads(L, me, 3, 256.0f);
      CT_OK(ptdp_optimizer_step(opt, 3, &r));
      expect(r.skipped == 0 && r.skipped_iterations == 2 && r.loss_scale == 256.0f, "step 3 clean at scale 256",
             "0, 2, 256", str(r.skipped) + ", " + str(r.skipped_iterations) + ", " + str(r.loss_scale));
      expect(!same_bits(um.values(), p1), "step 3 changed the parameters");
    }
    CT_OK(ptdp_optimizer_destroy(opt));
  }
  CT_OK(ptdp_groups_destroy(g));
}

// ---- 2. exact data-parallel averaging --------------------------------------------------------

void exact_average(ptdp_runtime rt, int W, int t, int dist, int64_t bucket, float weight_decay) {
  const ct::Layout L{W, t, 1, 1};
  ct::context("SGD average: t=" + str(t) + " d=" + str(L.d()) + " dist=" + str(dist) + " bucket=" + str(bucket) +
              " weight_decay=" + str(weight_decay));
  ptdp_groups g = make_groups(rt, t);
  if (!g) return;
  const int me = ct::g_rank, tp = L.tp(me);
  {
    UserModel um(tp);
    const std::vector<std::vector<float>> before = um.values();
    ptdp_optimizer_options oo;
    ptdp_optimizer_options_init(&oo);
    oo.optimizer = PTDP_OPTIMIZER_SGD;
    oo.sgd_momentum = 0;
    oo.weight_decay = weight_decay;
    oo.lr = 1;
    oo.clip_grad = 0;
    oo.use_distributed_optimizer = dist;
    oo.ddp_bucket_size = bucket;
    ptdp_optimizer opt = nullptr;
    if (CT_OK(ptdp_optimizer_create_for_tensors(g, &oo, um.params.data(), um.grads.data(), kFlags, kCount, &opt)).empty()) {
      expect(same_bits(um.values(), before), "registering keeps the parameter values");
      size_t bytes = 1;
      CT_OK(ptdp_optimizer_state_bytes(opt, &bytes));
      expect(bytes == 0, "SGD without momentum keeps no state", "0", str(bytes));
      std::vector<std::vector<float>> p = before;
      for (int step = 0; step < 2; ++step) {
        um.set_grads(L, me, step, 1.0f);
        ptdp_iteration_result r{};
        CT_OK(ptdp_optimizer_reduce_gradients(opt));
        CT_OK(ptdp_optimizer_step(opt, step, &r));
        const std::string at = "step " + str(step);
        expect(r.skipped == 0 && r.learning_rate == 1.0 && r.loss_scale == 1.0f, at + ": not skipped, lr 1, scale 1");
        const double norm = expected_norm(L, step);
        expect(std::fabs(r.grad_norm - norm) <= 1e-6 * norm, at + ": grad_norm (split tensors per tensor rank, "
               "replicated once)", str(norm), str(r.grad_norm));
        const std::vector<std::vector<float>> got = um.values();
        std::size_t bad = 0;
        std::string first;
        for (int i = 0; i < kCount; ++i) {
          for (int64_t k = 0; k < numel(i); ++k) {
            float& x = p[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
            const float wd = decays(i) ? weight_decay : 0.0f;
            const float want = x - static_cast<float>(mean_grad(L, me, i, k, step) + wd * x);  // exact
            const float have = got[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
            if (have != want && bad++ == 0)
              first = "tensor " + str(i) + "[" + str(k) + "]: want " + str(want) + ", got " + str(have);
            x = want;
          }
        }
        expect(bad == 0, at + ": p - (mean gradient + weight decay) exactly", "every element", str(bad) + " off; " + first);
      }
    }
    CT_OK(ptdp_optimizer_destroy(opt));
  }
  CT_OK(ptdp_groups_destroy(g));
}

// ---- 3. optimizer state bytes ----------------------------------------------------------------

constexpr int kVocab = 53;

ptdp_gpt_options gpt_options(int layers) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = layers;
  o.hidden_size = 12;  // no parameter count is a multiple of d
  o.num_attention_heads = 4;
  o.vocab_size = kVocab;
  o.make_vocab_size_divisible_by = 4;
  o.seq_length = 4;
  o.init_method_std = 0.1f;
  o.seed = 7;
  return o;
}

size_t state_bytes(ptdp_model m, ptdp_optimizer_kind kind, float momentum, int dist, int64_t bucket) {
  ptdp_optimizer_options oo;
  ptdp_optimizer_options_init(&oo);
  oo.optimizer = kind;
  oo.sgd_momentum = momentum;
  oo.use_distributed_optimizer = dist;
  oo.ddp_bucket_size = bucket;
  ptdp_optimizer opt = nullptr;
  size_t bytes = 0;
  if (CT_OK(ptdp_optimizer_create(m, &oo, &opt)).empty()) CT_OK(ptdp_optimizer_state_bytes(opt, &bytes));
  CT_OK(ptdp_optimizer_destroy(opt));
  return bytes;
}

void state_size(ptdp_runtime rt, int W, int t, int p, int v, int64_t bucket) {
  const ct::Layout L{W, t, p, v};
  const int d = L.d();
  ct::context("state bytes: t=" + str(t) + " p=" + str(p) + " v=" + str(v) + " d=" + str(d) + " bucket=" + str(bucket));
  ptdp_groups g = make_groups(rt, t, p, v);
  if (!g) return;
  const ptdp_gpt_options o = gpt_options(2 * p * v);
  ptdp_model m = nullptr;
  if (CT_OK(ptdp_model_create(g, &o, &m)).empty()) {
    const size_t X = state_bytes(m, PTDP_OPTIMIZER_ADAM, 0, 0, bucket);
    const size_t Y = state_bytes(m, PTDP_OPTIMIZER_ADAM, 0, 1, bucket);
    if (ct::g_rank == 0) {
      std::printf("optimizer state bytes per rank: plain %zu, distributed %zu, d = %d (t=%d p=%d v=%d, rank 0, bucket %lld)\n",
                  X, Y, d, t, p, v, static_cast<long long>(bucket));
      std::fflush(stdout);
    }
    // Adam keeps 2 floats per element; each bucket is padded to a multiple of d, so the shards
    // of Y and the buckets of X differ by fewer than d elements per bucket.
    const size_t per_elem = 8;
    const size_t buckets = static_cast<size_t>(v) * (bucket > 0 ? X / per_elem / static_cast<size_t>(bucket) + 2 : 1);
    const size_t bound = per_elem * static_cast<size_t>(d) * buckets;
    const size_t diff = Y * static_cast<size_t>(d) > X ? Y * static_cast<size_t>(d) - X : X - Y * static_cast<size_t>(d);
    expect(X > 0 && diff <= bound, "distributed state * d equals the plain state up to padding", "|Y d - X| <= " + str(bound),
           "X " + str(X) + ", Y " + str(Y) + ", |Y d - X| " + str(diff));
    expect(d == 1 || Y < X, "the distributed optimizer keeps less state", "< " + str(X), str(Y));
    // SGD keeps one float per element with momentum, none without.
    expect(state_bytes(m, PTDP_OPTIMIZER_SGD, 0.9f, 0, bucket) * 2 == X, "SGD with momentum: half of Adam's state");
    expect(state_bytes(m, PTDP_OPTIMIZER_SGD, 0.0f, 1, bucket) == 0, "SGD without momentum: no state");
    if (p == 1) {
      // Every rank holds every parameter, split ones by 1/t. X covers them, plus the alignment
      // of each parameter in the flat buffer (< 16 floats each) and the padding (< d per bucket).
      int32_t n = 0;
      int64_t local = 0;
      CT_OK(ptdp_model_num_params(m, &n));
      for (int32_t i = 0; i < n; ++i) {
        char name[160];
        int32_t nd = 0, pd = -1;
        int64_t shape[2] = {1, 1};
        CT_OK(ptdp_model_param_info(m, i, name, sizeof name, &nd, shape, &pd));
        local += shape[0] * (nd == 2 ? shape[1] : 1) / (pd >= 0 ? t : 1);
      }
      const size_t lo = per_elem * static_cast<size_t>(local);
      const size_t hi = lo + per_elem * (16 * static_cast<size_t>(n) + static_cast<size_t>(d) * buckets);
      expect(X >= lo && X < hi, "plain state covers this rank's parameters plus alignment and padding",
             "[" + str(lo) + ", " + str(hi) + ")", str(X));
    }
  }
  CT_OK(ptdp_model_destroy(m));
  CT_OK(ptdp_groups_destroy(g));
}

// ---- 4. bad arguments ------------------------------------------------------------------------

std::vector<std::vector<float>> model_params(ptdp_model m) { return ct::read_model_params(m).values; }

void bad_options(ptdp_model m) {
  ct::context("bad optimizer options");
  struct Case {
    const char* what;
    void (*change)(ptdp_optimizer_options&);
    std::vector<std::string> names;  // the message names the argument
  };
  const Case cases[] = {
      {"lr < 0", [](ptdp_optimizer_options& o) { o.lr = -1e-3; }, {"lr", "-0.001"}},
      {"lr nan", [](ptdp_optimizer_options& o) { o.lr = std::numeric_limits<double>::quiet_NaN(); }, {"lr"}},
      {"min_lr > lr", [](ptdp_optimizer_options& o) { o.min_lr = 2 * o.lr; }, {"min_lr"}},
      {"beta1 = 1", [](ptdp_optimizer_options& o) { o.adam_beta1 = 1.0f; }, {"beta1"}},
      {"beta1 > 1", [](ptdp_optimizer_options& o) { o.adam_beta1 = 1.5f; }, {"beta1"}},
      {"beta2 = 1", [](ptdp_optimizer_options& o) { o.adam_beta2 = 1.0f; }, {"beta2"}},
      {"eps = 0", [](ptdp_optimizer_options& o) { o.adam_eps = 0.0f; }, {"eps"}},
      {"unknown optimizer", [](ptdp_optimizer_options& o) { o.optimizer = static_cast<ptdp_optimizer_kind>(7); },
       {"optimizer", "7"}},
      {"unknown lr_decay_style", [](ptdp_optimizer_options& o) { o.lr_decay_style = static_cast<ptdp_lr_decay_style>(9); },
       {"lr_decay_style", "9"}},
      {"negative lr_decay_style", [](ptdp_optimizer_options& o) { o.lr_decay_style = static_cast<ptdp_lr_decay_style>(-1); },
       {"lr_decay_style"}},
      {"struct_size 0", [](ptdp_optimizer_options& o) { o.struct_size = 0; }, {"struct_size"}},
      {"weight_decay < 0", [](ptdp_optimizer_options& o) { o.weight_decay = -0.1f; }, {"options->weight_decay = -0.1"}},
      {"clip_grad < 0", [](ptdp_optimizer_options& o) { o.clip_grad = -1.0f; }, {"clip"}},
      {"sgd_momentum < 0", [](ptdp_optimizer_options& o) { o.sgd_momentum = -0.5f; }, {"momentum"}},
      {"dynamic_loss_scale 2", [](ptdp_optimizer_options& o) { o.dynamic_loss_scale = 2; }, {"dynamic_loss_scale"}},
      {"use_distributed_optimizer 2", [](ptdp_optimizer_options& o) { o.use_distributed_optimizer = 2; },
       {"use_distributed_optimizer"}},
      {"ddp_bucket_size < 0", [](ptdp_optimizer_options& o) { o.ddp_bucket_size = -5; }, {"bucket"}},
      {"overlap_grad_reduce 2", [](ptdp_optimizer_options& o) { o.overlap_grad_reduce = 2; },
       {"options->overlap_grad_reduce = 2"}},
      {"overlap_param_gather 3", [](ptdp_optimizer_options& o) { o.overlap_param_gather = 3; },
       {"options->overlap_param_gather = 3"}},
      {"overlap_param_gather without the distributed optimizer", [](ptdp_optimizer_options& o) {
         o.overlap_grad_reduce = 1;
         o.overlap_param_gather = 1;
       }, {"options->overlap_param_gather = 1", "use_distributed_optimizer"}},
      {"overlap_param_gather without overlap_grad_reduce", [](ptdp_optimizer_options& o) {
         o.use_distributed_optimizer = 1;
         o.overlap_param_gather = 1;
       }, {"options->overlap_param_gather = 1", "overlap_grad_reduce"}},
      {"initial_loss_scale 0", [](ptdp_optimizer_options& o) { o.initial_loss_scale = 0.0f; }, {"options->initial_loss_scale = 0"}},
      {"min_loss_scale > initial", [](ptdp_optimizer_options& o) { o.min_loss_scale = 2 * o.initial_loss_scale; },
       {"options->min_loss_scale = 2"}},
      {"hysteresis 0", [](ptdp_optimizer_options& o) { o.hysteresis = 0; }, {"hysteresis"}},
      {"loss_scale_window 0", [](ptdp_optimizer_options& o) { o.loss_scale_window = 0; }, {"options->loss_scale_window = 0"}},
      {"lr_warmup_iters < 0", [](ptdp_optimizer_options& o) { o.lr_warmup_iters = -1; }, {"warmup"}},
      {"cosine decay ending before the warm-up", [](ptdp_optimizer_options& o) {
         o.lr_decay_style = PTDP_LR_COSINE;
         o.lr_warmup_iters = 10;
         o.lr_decay_iters = 5;
       }, {"decay iters", "warmup"}},
  };
  int dummy = 0;
  ptdp_optimizer sentinel = reinterpret_cast<ptdp_optimizer>(&dummy);
  for (const Case& c : cases) {
    ptdp_optimizer_options o;
    ptdp_optimizer_options_init(&o);
    c.change(o);
    ptdp_optimizer out = sentinel;
    const std::string msg = CT_STATUS(ptdp_optimizer_create(m, &o, &out), PTDP_ERR_INVALID_ARGUMENT);
    expect(out == sentinel, std::string(c.what) + ": out unchanged");
    expect(msg.find("ptdp_optimizer_create") != std::string::npos, std::string(c.what) + ": message names the function",
           "ptdp_optimizer_create", msg);
    for (const std::string& n : c.names)
      expect(msg.find(n) != std::string::npos, std::string(c.what) + ": message names the argument", "\"" + n + "\"",
             "\"" + msg + "\"");
  }
  ptdp_optimizer out = sentinel;
  ct::expect_message(CT_STATUS(ptdp_optimizer_create(m, nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"out"}, "NULL out");
  ct::expect_message(CT_STATUS(ptdp_optimizer_create(nullptr, nullptr, &out), PTDP_ERR_INVALID_ARGUMENT), {"model"},
                     "NULL model");
  expect(out == sentinel, "NULL model: out unchanged");
  CT_STATUS(ptdp_optimizer_options_init(nullptr), PTDP_ERR_INVALID_ARGUMENT);
  CT_OK(ptdp_optimizer_destroy(nullptr));
}

void bad_tensors(ptdp_groups g) {
  ct::context("bad create_for_tensors");
  UserModel um(0);
  const std::vector<std::vector<float>> before = um.values();
  std::vector<float> ones(15, 1.0f);
  ptdp_tensor wrong_shape = nullptr, as_i32 = nullptr;
  {
    const int64_t shape[2] = {5, 3};  // the transpose of params[0]
    CT_OK(ptdp_tensor_create(nullptr, 2, shape, ones.data(), ones.size() * sizeof(float), &wrong_shape));
    ptdp_tensor_options io;
    ptdp_tensor_options_init(&io);
    io.dtype = PTDP_DTYPE_I32;
    const std::vector<int32_t> ints(7, 1);
    CT_OK(ptdp_tensor_create(&io, 1, kShape[1], ints.data(), ints.size() * sizeof(int32_t), &as_i32));
  }
  int dummy = 0;
  ptdp_optimizer sentinel = reinterpret_cast<ptdp_optimizer>(&dummy);
  auto attempt = [&](const std::string& what, std::vector<ptdp_tensor> p, std::vector<ptdp_tensor> gr,
                     std::vector<int32_t> flags, int32_t count, const ptdp_optimizer_options* o,
                     std::initializer_list<std::string> names) {
    ptdp_optimizer out = sentinel;
    const std::string msg =
        CT_STATUS(ptdp_optimizer_create_for_tensors(g, o, p.empty() ? nullptr : p.data(), gr.empty() ? nullptr : gr.data(),
                                                    flags.empty() ? nullptr : flags.data(), count, &out),
                  PTDP_ERR_INVALID_ARGUMENT);
    ct::expect_message(msg, names, what);
    expect(out == sentinel, what + ": out unchanged");
    expect(same_bits(um.values(), before), what + ": the tensors keep their values");
  };
  const std::vector<int32_t> flags(kFlags, kFlags + kCount);
  std::vector<ptdp_tensor> P = um.params, G = um.grads;
  {
    std::vector<ptdp_tensor> g2 = G;
    g2[0] = wrong_shape;
    attempt("grad shape mismatch", P, g2, flags, kCount, nullptr, {"grads[0]"});
  }
  {
    std::vector<ptdp_tensor> p2 = P;
    p2[1] = as_i32;
    attempt("an i32 parameter", p2, G, flags, kCount, nullptr, {"params[1]", "f32"});
    std::vector<ptdp_tensor> g2 = G;
    g2[1] = as_i32;
    attempt("an i32 gradient", P, g2, flags, kCount, nullptr, {"grads[1]"});
  }
  {
    // Spare tensors of the shape of tensor 1, so that only the repetition is wrong.
    const std::vector<float> zeros(static_cast<std::size_t>(numel(1)), 0.0f);
    ptdp_tensor sa = new_tensor(1, zeros), sb = new_tensor(1, zeros), sc = new_tensor(1, zeros);
    attempt("a parameter registered twice", {P[1], sa, P[1]}, {G[1], sb, sc}, {0, 0, 0}, 3, nullptr,
            {"params[2]", "twice"});
    attempt("a gradient registered twice", {P[1], sa}, {G[1], G[1]}, {0, 0}, 2, nullptr, {"grads[1]", "twice"});
    attempt("a parameter given as a gradient", {P[1], sa}, {G[1], P[1]}, {0, 0}, 2, nullptr, {"grads[1]", "twice"});
    attempt("a tensor as its own gradient", {sa}, {sa}, {0}, 1, nullptr, {"twice"});
    ptdp_tensor_destroy(sa);
    ptdp_tensor_destroy(sb);
    ptdp_tensor_destroy(sc);
  }
  {
    std::vector<int32_t> f2 = flags;
    f2[2] = 4;
    attempt("flags 4", P, G, f2, kCount, nullptr, {"flags[2]", "4"});
    f2[2] = -1;
    attempt("flags -1", P, G, f2, kCount, nullptr, {"flags[2]"});
  }
  attempt("count 0", P, G, flags, 0, nullptr, {"count"});
  attempt("count -3", P, G, flags, -3, nullptr, {"count"});
  attempt("NULL params", {}, G, flags, kCount, nullptr, {"params"});
  attempt("NULL grads", P, {}, flags, kCount, nullptr, {"grads"});
  {
    std::vector<ptdp_tensor> p2 = P;
    p2[2] = nullptr;
    attempt("a NULL parameter", p2, G, flags, kCount, nullptr, {"params[2]"});
  }
  {
    ptdp_optimizer_options o;
    ptdp_optimizer_options_init(&o);
    o.lr = -1;
    attempt("bad options", P, G, flags, kCount, &o, {"lr"});
  }
  {
    ptdp_optimizer out = sentinel;
    ct::expect_message(CT_STATUS(ptdp_optimizer_create_for_tensors(nullptr, nullptr, P.data(), G.data(), flags.data(),
                                                                   kCount, &out),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"groups"}, "NULL groups");
    ct::expect_message(CT_STATUS(ptdp_optimizer_create_for_tensors(g, nullptr, P.data(), G.data(), flags.data(), kCount,
                                                                   nullptr),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"out"}, "NULL out");
  }
  // After all that, the same tensors register fine; the optimizer keeps the groups alive.
  ptdp_optimizer opt = nullptr;
  if (CT_OK(ptdp_optimizer_create_for_tensors(g, nullptr, P.data(), G.data(), flags.data(), kCount, &opt)).empty()) {
    expect(same_bits(um.values(), before), "registered after the failures: values kept");
    size_t bytes = 0;
    ct::expect_message(CT_STATUS(ptdp_optimizer_state_bytes(opt, nullptr), PTDP_ERR_INVALID_ARGUMENT), {"bytes"},
                       "state_bytes NULL output");
    ct::expect_message(CT_STATUS(ptdp_optimizer_state_bytes(nullptr, &bytes), PTDP_ERR_INVALID_ARGUMENT), {"optimizer"},
                       "state_bytes NULL optimizer");
    ptdp_iteration_result r{};
    r.skipped = 42;
    ct::expect_message(CT_STATUS(ptdp_optimizer_step(opt, -1, &r), PTDP_ERR_INVALID_ARGUMENT), {"iteration", "-1"},
                       "step with a negative iteration");
    expect(r.skipped == 42, "failed step leaves the result untouched");
    expect(same_bits(um.values(), before), "failed step leaves the parameters untouched");
    ct::expect_message(CT_STATUS(ptdp_optimizer_step(nullptr, 0, &r), PTDP_ERR_INVALID_ARGUMENT), {"optimizer"},
                       "step without an optimizer");
    ct::expect_message(CT_STATUS(ptdp_optimizer_reduce_gradients(nullptr), PTDP_ERR_INVALID_ARGUMENT), {"optimizer"},
                       "reduce_gradients without an optimizer");
    ct::expect_message(CT_STATUS(ptdp_groups_destroy(g), PTDP_ERR_INVALID_STATE), {"destroy them first"},
                       "groups destroyed under an optimizer");
  }
  CT_OK(ptdp_optimizer_destroy(opt));
  ptdp_tensor_destroy(wrong_shape);
  ptdp_tensor_destroy(as_i32);
}

void bad_training(ptdp_groups g, int W) {
  ct::context("bad train_iteration");
  const ptdp_gpt_options o = gpt_options(2);
  ptdp_model a = nullptr, b = nullptr;
  ptdp_optimizer oa = nullptr, ob = nullptr, ot = nullptr;
  ptdp_schedule s = nullptr;
  UserModel um(0);
  if (CT_OK(ptdp_model_create(g, &o, &a)).empty() && CT_OK(ptdp_model_create(g, &o, &b)).empty() &&
      CT_OK(ptdp_optimizer_create(a, nullptr, &oa)).empty() && CT_OK(ptdp_optimizer_create(b, nullptr, &ob)).empty() &&
      CT_OK(ptdp_optimizer_create_for_tensors(g, nullptr, um.params.data(), um.grads.data(), kFlags, kCount, &ot)).empty() &&
      CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, 1, 2, 1, &s)).empty()) {
    bad_options(a);  // every refused create leaves the model's optimizer count at one
    ct::context("bad train_iteration");
    std::vector<int32_t> tok(static_cast<std::size_t>(2 * 2 * o.seq_length)), lab(tok.size());
    for (std::size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<int32_t>((i * 7 + static_cast<std::size_t>(ct::g_rank)) % kVocab);
      lab[i] = static_cast<int32_t>((i * 5 + 1) % kVocab);
    }
    const std::vector<std::vector<float>> pa = model_params(a);
    ptdp_iteration_result r{};
    r.skipped = 42;
    ct::expect_message(CT_STATUS(ptdp_train_iteration(a, ob, s, tok.data(), lab.data(), 2, 0, nullptr, &r),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"optimizer"}, "an optimizer of another model");
    ct::expect_message(CT_STATUS(ptdp_train_iteration(a, ot, s, tok.data(), lab.data(), 2, 0, nullptr, &r),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"optimizer"}, "an optimizer of user tensors");
    ct::expect_message(CT_STATUS(ptdp_train_iteration(a, oa, s, tok.data(), lab.data(), 2, -1, nullptr, &r),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"iteration", "-1"}, "a negative iteration");
    ct::expect_message(CT_STATUS(ptdp_train_iteration(a, oa, s, tok.data(), lab.data(), 0, 0, nullptr, &r),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"micro_batch_size"}, "micro_batch_size 0");
    ct::expect_message(CT_STATUS(ptdp_train_iteration(a, oa, s, nullptr, lab.data(), 2, 0, nullptr, &r),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"tokens"}, "NULL tokens");
    ct::expect_message(CT_STATUS(ptdp_train_iteration(a, nullptr, s, tok.data(), lab.data(), 2, 0, nullptr, &r),
                                 PTDP_ERR_INVALID_ARGUMENT),
                       {"optimizer"}, "NULL optimizer");
    ct::expect_message(CT_STATUS(ptdp_optimizer_step(oa, -2, &r), PTDP_ERR_INVALID_ARGUMENT), {"iteration", "-2"},
                       "optimizer_step with a negative iteration");
    const std::string msg = CT_STATUS(ptdp_model_destroy(a), PTDP_ERR_INVALID_STATE);
    ct::expect_message(msg, {"1 ptdp_optimizer"}, "model destroyed under its optimizer (and refused creates counted none)");
    expect(r.skipped == 42, "failed calls leave the result untouched");
    expect(same_bits(model_params(a), pa), "failed calls leave the model's parameters untouched");
    // Nothing the failed calls touched shows: model a (after them) and model b (fresh) train
    // to bit-identical results. A data-parallel group of W ranks runs it.
    ptdp_iteration_result ra{}, rb{};
    CT_OK(ptdp_train_iteration(a, oa, s, tok.data(), lab.data(), 2, 0, nullptr, &ra));
    CT_OK(ptdp_train_iteration(b, ob, s, tok.data(), lab.data(), 2, 0, nullptr, &rb));
    expect(ra.loss == rb.loss && ra.grad_norm == rb.grad_norm && ra.loss_scale == rb.loss_scale && ra.skipped == 0 &&
               rb.skipped == 0,
           "the model of the failed calls trains like a fresh one", str(rb.loss) + " / " + str(rb.grad_norm),
           str(ra.loss) + " / " + str(ra.grad_norm));
    expect(same_bits(model_params(a), model_params(b)), "and ends with bit-identical parameters");
    expect(!same_bits(model_params(a), pa), "training changed the parameters");
    expect(W > 0, "world");
  }
  ptdp_schedule_destroy(s);
  CT_OK(ptdp_optimizer_destroy(ot));
  CT_OK(ptdp_optimizer_destroy(oa));
  CT_OK(ptdp_optimizer_destroy(ob));
  CT_OK(ptdp_model_destroy(a));  // now allowed
  CT_OK(ptdp_model_destroy(b));
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  ptdp_runtime rt = nullptr;
  ptdp_runtime_options ro = ct::runtime_options();
  if (expect(W == 4 || W == 8, "run with 4 or 8 ranks", "4 or 8", str(W)) && CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // 1. Overflow: (rank, tensor, element, value) of the bad gradient, then a second one.
    skip_on_overflow(rt, W, 1, 0, 0, {W - 1, 0, 2, inf}, {0, 1, 6, -inf});
    skip_on_overflow(rt, W, 1, 1, 5, {W - 1, 0, 0, inf}, {1, 3, 4, nan});  // element 0: another rank's shard
    skip_on_overflow(rt, W, 2, 1, 0, {W - 1, 3, 4, nan}, {W - 2, 0, 14, inf});  // replicated tensor on tensor rank 1
    skip_on_overflow(rt, W, 2, 0, 7, {1, 2, 3, -inf}, {0, 2, 0, inf});
    // 2. Exact data-parallel averaging.
    for (int t : {1, 2})
      for (int dist : {0, 1}) {
        exact_average(rt, W, t, dist, dist ? 5 : 0, 0.0f);
        exact_average(rt, W, t, dist, dist ? 0 : 9, 0.5f);
      }
    // 3. Optimizer state.
    if (W == 8) {
      state_size(rt, W, 1, 1, 1, 0);
      state_size(rt, W, 2, 1, 1, 97);
      state_size(rt, W, 2, 2, 2, 0);
      state_size(rt, W, 1, 2, 1, 97);
    } else {
      state_size(rt, W, 1, 1, 1, 0);
      state_size(rt, W, 2, 1, 1, 0);
      state_size(rt, W, 1, 2, 2, 97);
    }
    // 4. Bad arguments (on a data-parallel layout of W ranks).
    ptdp_groups g = make_groups(rt, 1);
    if (g) {
      bad_tensors(g);
      bad_training(g, W);
      CT_OK(ptdp_groups_destroy(g));
    }
    CT_OK(ptdp_runtime_destroy(rt));
  }
  const int code = ct::finish("test_train_optimizer");
  MPI_Finalize();
  return code;
}
