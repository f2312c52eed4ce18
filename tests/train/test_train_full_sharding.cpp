// The distributed optimizer with full sharding (fp32 master weights sharded over d as well as
// the Adam moments) and Megatron's --overlap-grad-reduce / --overlap-param-gather, under mpiexec
// with 8 ranks:
//
// 1. Memory. At (t, 1, d) = (8/d, 1, d) for d = 1, 2, 4, 8, bf16 and fp32, the allocator's bytes
//    in use for the model and its distributed optimizer (ptdp_memory_stats() before the model and
//    after the optimizer), per parameter this rank holds, against Megatron's 6 + 12/d (bf16:
//    2 weights + 4 gradients + 12/d masters and moments) and 8 + 8/d (fp32), and against the
//    planner's figure for the same layout ((weights + gradients + optimizer) / parameters per
//    GPU). The model's widths are multiples of 16 floats so the flat buffers' alignment adds
//    almost nothing; the measured figure may exceed the formula by the alignment and padding
//    (< 1 %). The plain optimizer's bf16 figure (18) is printed beside it.
// 2. Training at (t, p, d) = (2, 2, 2), dropout on, 10 iterations of AdamW with bucket 97 (bucket
//    and shard boundaries inside tensors), fp32 and bf16, three runs each:
//      plain   no distributed optimizer, no overlap
//      dist    distributed optimizer (full sharding), no overlap
//      overlap distributed optimizer, --overlap-grad-reduce and --overlap-param-gather
//    - overlap == dist bitwise: every loss, grad norm and final parameter (the overlap changes
//      when collectives run, not what they compute);
//    - dist == plain bitwise (losses and parameters): at d = 2 a reduce-scatter and an all-reduce
//      both add the same two numbers, and with clipping off (clip_grad 0) AdamW is elementwise,
//      so sharding the masters must change no bit; the grad norms (summed per shard with the
//      distributed optimizer) agree to 1e-6;
//    - dist vs the serial run (a world of one, the same global batch and dropout masks): fp32
//      loss and grad norm within 1e-4 relative every iteration and the parameters within 1e-4
//      relative L2 (test_train_equivalence's tolerances; measured 1.2e-7, 7e-8, 5.6e-6); bf16
//      within 1e-2 relative (loss, grad norm) and 1e-2 relative L2 (parameters; measured 1.5e-4,
//      2.3e-3, 1.6e-3): with 8-bit mantissas one rounding flip of a weight moves it by 2^-8
//      relative, and the parallel run's different summation orders flip some.
// 3. Checkpoints: the bf16 dist run's checkpoint loads into a (1, 2, 4) model with the
//    distributed optimizer (other t and d: masters resharded), whose save loads into a plain
//    (2, 2, 2) optimizer, whose save loads into full sharding with both overlap flags at
//    (2, 2, 2); every parameter read back equals the original bitwise, and one more iteration
//    from each load gives the loss of one more iteration of the original (bitwise for the
//    (2, 2, 2) loads, whose layout and reductions are the original's; parameters too for the last).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::str;

constexpr int kIters = 10;
constexpr int kVocab = 53;
constexpr int kSeq = 4;
constexpr int kMicro = 2;
constexpr int kLayers = 4;

ptdp_gpt_options gpt_options(ptdp_dtype precision) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = kLayers;
  o.hidden_size = 12;
  o.num_attention_heads = 4;
  o.vocab_size = kVocab;
  o.make_vocab_size_divisible_by = 4;
  o.seq_length = kSeq;
  o.hidden_dropout = 0.1f;
  o.attention_dropout = 0.1f;
  o.init_method_std = 0.1f;
  o.seed = 2024;
  o.precision = precision;
  return o;
}

ptdp_optimizer_options optimizer_options(int dist, int overlap) {
  ptdp_optimizer_options o;
  ptdp_optimizer_options_init(&o);
  o.optimizer = PTDP_OPTIMIZER_ADAM;
  o.use_distributed_optimizer = dist;
  o.overlap_grad_reduce = overlap;
  o.overlap_param_gather = overlap;
  o.ddp_bucket_size = 97;
  o.clip_grad = 0.0f;  // see the header: the norm's summation order differs with and without dist
  o.weight_decay = 0.1f;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.lr_warmup_iters = 2;
  o.lr_decay_iters = 8;
  o.lr_decay_style = PTDP_LR_COSINE;
  return o;
}

void global_batch(int it, int samples, std::vector<int32_t>& tokens, std::vector<int32_t>& labels) {
  tokens.resize(static_cast<std::size_t>(samples * kSeq));
  labels.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(it) * 40503u + 12345u;
    tokens[i] = static_cast<int32_t>((h >> 7) % kVocab);
    labels[i] = static_cast<int32_t>((h >> 17) % kVocab);
  }
}

using Params = ct::ModelParams;
Params read_params(ptdp_model m) { return ct::read_model_params(m, kVocab); }

struct Run {
  std::vector<ptdp_iteration_result> results;
  Params params;
};

ptdp_groups make_groups(ptdp_runtime rt, int t, int p) {
  ptdp_parallel_options po;
  ptdp_parallel_options_init(&po);
  po.tensor_model_parallel_size = t;
  po.pipeline_model_parallel_size = p;
  ptdp_groups g = nullptr;
  CT_OK(ptdp_groups_create(rt, &po, &g));
  return g;
}

/// Trains `iters` iterations from `first` at (t, p, W/(t p)); `load` / `save`: a checkpoint
/// directory to start from / to write at the end.
Run train(ptdp_groups g, int d, int p, int m, ptdp_dtype precision, int dist, int overlap, int first, int iters,
          const std::string& load = "", const std::string& save = "") {
  Run r;
  int32_t dp = 0;
  CT_OK(ptdp_groups_rank(g, PTDP_GROUP_DATA, &dp));
  const ptdp_gpt_options o = gpt_options(precision);
  const ptdp_optimizer_options oo = optimizer_options(dist, overlap);
  ptdp_model model = nullptr;
  ptdp_optimizer opt = nullptr;
  ptdp_schedule s = nullptr;
  if (CT_OK(ptdp_model_create(g, &o, &model)).empty() && CT_OK(ptdp_optimizer_create(model, &oo, &opt)).empty() &&
      CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_1F1B, p, m, 1, &s)).empty()) {
    if (!load.empty()) {
      ptdp_checkpoint_state st;
      ptdp_checkpoint_state_init(&st);
      CT_OK(ptdp_checkpoint_load(load.c_str(), model, opt, &st));
    }
    std::vector<int32_t> tok, lab;
    const std::size_t off = static_cast<std::size_t>(dp) * m * kMicro * kSeq;
    for (int it = first; it < first + iters; ++it) {
      global_batch(it, d * m * kMicro, tok, lab);
      ptdp_iteration_result res{};
      if (!CT_OK(ptdp_train_iteration(model, opt, s, tok.data() + off, lab.data() + off, kMicro, it, nullptr, &res))
               .empty())
        break;
      r.results.push_back(res);
    }
    r.params = read_params(model);
    if (!save.empty()) {
      ptdp_checkpoint_state st;
      ptdp_checkpoint_state_init(&st);
      st.iteration = first + iters;
      CT_OK(ptdp_checkpoint_save(save.c_str(), model, opt, nullptr, &st));
    }
  }
  ptdp_schedule_destroy(s);
  CT_OK(ptdp_optimizer_destroy(opt));
  CT_OK(ptdp_model_destroy(model));
  return r;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// Every loss, grad norm (unless `norms` is false) and parameter bitwise equal; runs without
/// iterations compare their parameters only.
void expect_bitwise(const Run& a, const Run& b, const std::string& what, bool norms = true) {
  bool ok = a.results.size() == b.results.size();
  std::string first;
  for (std::size_t i = 0; ok && i < a.results.size(); ++i) {
    if (!same_bits(a.results[i].loss, b.results[i].loss) ||
        (norms && !same_bits(a.results[i].grad_norm, b.results[i].grad_norm))) {
      ok = false;
      first = "iteration " + str(i) + ": loss " + str(a.results[i].loss) + " vs " + str(b.results[i].loss) +
              ", grad norm " + str(a.results[i].grad_norm) + " vs " + str(b.results[i].grad_norm);
    }
  }
  expect(ok, what + (norms ? ": losses and grad norms bitwise equal" : ": losses bitwise equal"), "equal", first);
  std::size_t differing = 0, total = 0;
  ok = a.params.names == b.params.names;
  for (std::size_t i = 0; ok && i < a.params.values.size(); ++i) {
    const auto& x = a.params.values[i];
    const auto& y = b.params.values[i];
    if (x.size() != y.size()) ok = false;
    for (std::size_t k = 0; ok && k < x.size(); ++k) differing += same_bits(x[k], y[k]) ? 0 : 1;
    total += x.size();
  }
  expect(ok && differing == 0 && total > 0, what + ": every parameter bitwise equal", "0 differ of " + str(total),
         str(differing) + " differ");
}

double rel(double a, double b) { return a == b ? 0.0 : std::fabs(a - b) / std::max(std::fabs(a), std::fabs(b)); }

/// dist vs serial: worst relative loss / grad norm differences and the parameters' relative L2.
void expect_close(const Run& serial, const Run& got, double tol_scalar, double tol_params, const std::string& what) {
  double wl = 0, wn = 0;
  const std::size_t n = std::min(serial.results.size(), got.results.size());
  expect(n == static_cast<std::size_t>(kIters), what + ": both runs trained", str(kIters), str(n));
  for (std::size_t i = 0; i < n; ++i) {
    wl = std::max(wl, rel(serial.results[i].loss, got.results[i].loss));
    wn = std::max(wn, rel(serial.results[i].grad_norm, got.results[i].grad_norm));
  }
  double num = 0, den = 0;
  const bool names = serial.params.names == got.params.names;
  for (std::size_t i = 0; names && i < got.params.values.size(); ++i)
    for (std::size_t k = 0; k < got.params.values[i].size(); ++k) {
      const double x = serial.params.values[i][k], y = got.params.values[i][k];
      num += (x - y) * (x - y);
      den += x * x;
    }
  const double l2 = den > 0 ? std::sqrt(num / den) : 1.0;
  expect(names, what + ": parameter names");
  expect(wl <= tol_scalar, what + ": loss equals the serial run's", "<= " + str(tol_scalar), str(wl));
  expect(wn <= tol_scalar, what + ": grad norm equals the serial run's", "<= " + str(tol_scalar), str(wn));
  expect(l2 <= tol_params, what + ": parameters equal the serial run's (relative L2)", "<= " + str(tol_params), str(l2));
  if (ct::g_rank == 0) {
    std::printf("%-34s vs serial: worst rel loss %.1e, grad norm %.1e; params rel L2 %.1e\n", what.c_str(), wl, wn, l2);
    std::fflush(stdout);
  }
}

// ---- 1. memory -------------------------------------------------------------------------------

double planner_bytes_per_param(int t, int d, ptdp_dtype precision, const ptdp_gpt_options& o) {
  ptdp_plan_options po;
  ptdp_plan_options_init(&po);
  po.num_layers = o.num_layers;
  po.hidden_size = o.hidden_size;
  po.num_attention_heads = o.num_attention_heads;
  po.vocab_size = o.vocab_size;
  po.make_vocab_size_divisible_by = o.make_vocab_size_divisible_by;
  po.seq_length = o.seq_length;
  po.global_batch_size = 8 * d;
  po.precision = precision;
  po.use_distributed_optimizer = 1;
  po.num_gpus = 8;
  po.tensor_model_parallel_size = t;
  po.pipeline_model_parallel_size = 1;
  po.top = 50;
  ptdp_plan plan = nullptr;
  double best = -1;
  if (CT_OK(ptdp_plan_create(&po, nullptr, &plan)).empty()) {
    int32_t n = 0;
    CT_OK(ptdp_plan_num_layouts(plan, &n));
    for (int32_t i = 0; i < n; ++i) {
      ptdp_plan_layout L;
      L.struct_size = sizeof L;
      CT_OK(ptdp_plan_get_layout(plan, i, &L));
      // At d = 1 the planner offers no distributed optimizer (nothing to shard): the same figure.
      if (L.d == d && L.t == t && (L.distributed_optimizer == 1 || d == 1) && L.parameters_per_gpu > 0) {
        best = (L.memory_weights + L.memory_gradients + L.memory_optimizer) / static_cast<double>(L.parameters_per_gpu);
        break;
      }
    }
  }
  ptdp_plan_destroy(plan);
  return best;
}

void memory(ptdp_runtime rt) {
  for (const ptdp_dtype precision : {PTDP_DTYPE_BF16, PTDP_DTYPE_F32}) {
    const bool bf16 = precision == PTDP_DTYPE_BF16;
    for (const int d : {1, 2, 4, 8}) {
      const int t = 8 / d;
      ct::context(std::string("memory ") + (bf16 ? "bf16" : "fp32") + " t=" + str(t) + " d=" + str(d));
      ptdp_groups g = make_groups(rt, t, 1);
      if (!g) continue;
      ptdp_gpt_options o = gpt_options(precision);
      o.num_layers = 2;
      o.hidden_size = 128;  // every tensor's slice a multiple of 16 floats at t <= 8
      o.num_attention_heads = 8;
      o.vocab_size = 1024;
      o.make_vocab_size_divisible_by = 128;
      o.seq_length = 16;
      double measured[2] = {0, 0};  // plain, distributed
      int64_t local = 0;
      for (int dist = 0; dist < 2; ++dist) {
        size_t before = 0, after = 0, peak = 0;
        ptdp_model m = nullptr;
        ptdp_optimizer opt = nullptr;
        ptdp_optimizer_options oo = optimizer_options(dist, 0);
        oo.ddp_bucket_size = 0;
        CT_OK(ptdp_memory_stats(&before, &peak));
        if (CT_OK(ptdp_model_create(g, &o, &m)).empty() && CT_OK(ptdp_optimizer_create(m, &oo, &opt)).empty()) {
          CT_OK(ptdp_memory_stats(&after, &peak));
          int32_t n = 0;
          local = 0;
          CT_OK(ptdp_model_num_params(m, &n));
          for (int32_t i = 0; i < n; ++i) {
            char name[160];
            int32_t nd = 0, pd = -1;
            int64_t shape[2] = {1, 1};
            CT_OK(ptdp_model_param_info(m, i, name, sizeof name, &nd, shape, &pd));
            local += shape[0] * (nd == 2 ? shape[1] : 1) / (pd >= 0 ? t : 1);
          }
          measured[dist] = static_cast<double>(after - before) / static_cast<double>(local);
        }
        CT_OK(ptdp_optimizer_destroy(opt));
        CT_OK(ptdp_model_destroy(m));
      }
      const double formula = bf16 ? 6.0 + 12.0 / d : 8.0 + 8.0 / d;
      const double plain = bf16 ? 18.0 : 16.0;
      const double planned = planner_bytes_per_param(t, d, precision, o);
      // The most measured bytes per rank, against the formula.
      double worst = measured[1];
      MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (ct::g_rank == 0) {
        std::printf("memory %s d=%d (t=%d, %lld params/rank): distributed optimizer measured %.3f bytes/param "
                    "(most of any rank %.3f), formula %.3f, planner %.3f | plain optimizer measured %.3f (formula %.0f)\n",
                    bf16 ? "bf16" : "fp32", d, t, static_cast<long long>(local), measured[1], worst, formula, planned,
                    measured[0], plain);
        std::fflush(stdout);
      }
      expect(worst >= formula && worst <= formula * 1.01, "measured bytes per parameter = formula (+ < 1 % padding)",
             str(formula), str(worst));
      expect(measured[0] >= plain && measured[0] <= plain * 1.01, "plain optimizer: measured = " + str(plain),
             str(plain), str(measured[0]));
      expect(std::fabs(planned - formula) <= 1e-9 * formula, "the planner predicts the formula", str(formula),
             str(planned));
      CT_OK(ptdp_groups_destroy(g));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  expect(W == 8, "8 ranks", "8", str(W));
  ptdp_runtime rt = nullptr, serial_rt = nullptr;
  ptdp_runtime_options ro = ct::runtime_options(120.0);
  ptdp_runtime_options so = ct::runtime_options();
  so.use_mpi = 0;
  if (W == 8 && CT_OK(ptdp_runtime_create(&ro, &rt)).empty() && CT_OK(ptdp_runtime_create(&so, &serial_rt)).empty()) {
    memory(rt);

    const std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                            "/ptdp_full_sharding_" + str(static_cast<long long>(getppid()));
    ptdp_groups g1 = nullptr;
    CT_OK(ptdp_groups_create(serial_rt, nullptr, &g1));
    ptdp_groups g222 = make_groups(rt, 2, 2);
    // The serial runs, 1F1B over the d * m = 8 microbatches of the global batch: fp32 on rank 0,
    // bf16 on rank 1, each broadcast (8 ranks share CI's 2 cores).
    const ptdp_dtype precisions[2] = {PTDP_DTYPE_F32, PTDP_DTYPE_BF16};
    Run serials[2];
    std::vector<char> bytes[2];
    for (int k = 0; k < 2; ++k) {
      if (me != k) continue;
      const Run r = train(g1, 1, 1, 8, precisions[k], 0, 0, 0, kIters);
      ct::put_results(bytes[k], r.results);
      ct::put_params(bytes[k], r.params);
    }
    for (int k = 0; k < 2; ++k) {
      ct::bcast_bytes(bytes[k], k);
      std::size_t at = 0;
      serials[k].results = ct::take_results(bytes[k], at);
      serials[k].params = ct::take_params(bytes[k], at);
    }
    for (const ptdp_dtype precision : precisions) {
      const bool bf16 = precision == PTDP_DTYPE_BF16;
      const std::string tag = bf16 ? "bf16" : "fp32";
      ct::context("(2,2,2) " + tag);
      const Run& serial = serials[bf16 ? 1 : 0];
      const Run plain = train(g222, 2, 2, 4, precision, 0, 0, 0, kIters);
      const Run dist = train(g222, 2, 2, 4, precision, 1, 0, 0, kIters, "", bf16 ? dir + "_a" : "");
      const Run overlap = train(g222, 2, 2, 4, precision, 1, 1, 0, kIters);
      expect_bitwise(dist, overlap, tag + " (2,2,2) overlap on vs off");
      // The grad norm sums its squares per shard with the distributed optimizer: last bits differ.
      expect_bitwise(plain, dist, tag + " (2,2,2) full sharding vs plain optimizer", false);
      double norm_rel = 0;
      for (std::size_t i = 0; i < std::min(plain.results.size(), dist.results.size()); ++i)
        norm_rel = std::max(norm_rel, rel(plain.results[i].grad_norm, dist.results[i].grad_norm));
      expect(norm_rel <= 1e-6, tag + ": grad norms of the plain and distributed optimizer agree", "<= 1e-6",
             str(norm_rel));
      expect_close(serial, dist, bf16 ? 1e-2 : 1e-4, bf16 ? 1e-2 : 1e-4, tag + " (2,2,2) full sharding");
      if (ct::g_rank == 0) {
        std::printf("%s (2,2,2) dropout, bucket 97, %d iterations: overlap on vs off and full sharding vs plain "
                    "compared bitwise (see the checks); plain vs full sharding grad norm %.1e rel; last loss %.6f\n",
                    tag.c_str(), kIters, norm_rel, dist.results.empty() ? 0.0 : dist.results.back().loss);
        std::fflush(stdout);
      }
      if (!bf16) continue;
      // Checkpoints across layouts and optimizers (see the header).
      ct::context("checkpoints bf16");
      const Run more = train(g222, 2, 2, 4, precision, 1, 0, kIters, 1, dir + "_a");
      ptdp_groups g124 = make_groups(rt, 1, 2);
      const Run at4 = train(g124, 4, 2, 2, precision, 1, 1, kIters, 0, dir + "_a", dir + "_b");
      expect_bitwise(Run{{}, dist.params}, Run{{}, at4.params}, "checkpoint (2,2,2) dist -> (1,2,4) dist");
      const Run back = train(g222, 2, 2, 4, precision, 0, 0, kIters, 0, dir + "_b", dir + "_c");
      expect_bitwise(Run{{}, dist.params}, Run{{}, back.params}, "checkpoint (1,2,4) dist -> (2,2,2) plain");
      // And from the plain optimizer's save into full sharding with the overlap flags: the same
      // continuation as the original run's, bit for bit.
      const Run again = train(g222, 2, 2, 4, precision, 1, 1, kIters, 1, dir + "_c");
      expect(!more.results.empty() && !again.results.empty() && same_bits(more.results[0].loss, again.results[0].loss),
             "checkpoint (2,2,2) plain -> (2,2,2) full sharding + overlap: the next loss bitwise equal",
             more.results.empty() ? "" : str(more.results[0].loss), again.results.empty() ? "" : str(again.results[0].loss));
      expect_bitwise(Run{{}, more.params}, Run{{}, again.params}, "checkpoint (2,2,2) plain -> full sharding + overlap, one iteration");
      const Run back_more = train(g222, 2, 2, 4, precision, 0, 0, kIters, 1, dir + "_b");
      const Run at4_more = train(g124, 4, 2, 2, precision, 1, 0, kIters, 1, dir + "_a");
      expect(!more.results.empty() && !back_more.results.empty() &&
                 same_bits(more.results[0].loss, back_more.results[0].loss),
             "one more iteration after the round trip: the loss bitwise equal", more.results.empty() ? "" : str(more.results[0].loss),
             back_more.results.empty() ? "" : str(back_more.results[0].loss));
      expect(!at4_more.results.empty() && rel(more.results[0].loss, at4_more.results[0].loss) <= 2e-2,
             "one more iteration at (1,2,4): the loss within bf16 round-off", str(more.results[0].loss),
             at4_more.results.empty() ? "" : str(at4_more.results[0].loss));
      CT_OK(ptdp_groups_destroy(g124));
      if (ct::g_rank == 0) {
        std::printf("checkpoint bf16: (2,2,2) full sharding -> (1,2,4) full sharding -> (2,2,2) plain -> (2,2,2) full "
                    "sharding + overlap: parameters compared bitwise; next loss %.6f (original) / %.6f / %.6f / %.6f\n",
                    more.results.empty() ? 0.0 : more.results[0].loss,
                    at4_more.results.empty() ? 0.0 : at4_more.results[0].loss,
                    back_more.results.empty() ? 0.0 : back_more.results[0].loss,
                    again.results.empty() ? 0.0 : again.results[0].loss);
        std::fflush(stdout);
        std::system(("rm -rf '" + dir + "_a' '" + dir + "_b' '" + dir + "_c'").c_str());
      }
    }
    CT_OK(ptdp_groups_destroy(g222));
    CT_OK(ptdp_groups_destroy(g1));
  }
  if (serial_rt) CT_OK(ptdp_runtime_destroy(serial_rt));
  if (rt) CT_OK(ptdp_runtime_destroy(rt));
  const int code = ct::finish("test_train_full_sharding");
  MPI_Finalize();
  return code;
}
