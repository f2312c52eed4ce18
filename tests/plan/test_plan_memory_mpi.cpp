// Sequence parallelism's memory, measured against the planner: under mpiexec -n 4 a small GPT
// is trained through the C API at t = 2 (d = 2) and t = 4 (d = 1), with and without
// --sequence-parallel, without recomputation and with selective recomputation, in fp32 and bf16,
// and each rank's high-water mark (ptdp_memory_stats) is set beside ptdp_plan_create()'s estimate
// for the same layout: the planner's activation memory is Korthikanti et al.'s (2022) for 16-bit
// training (s b h (10 + 24/t) + 5 a s^2 b / t per layer, s b h 34/t + 5 a s^2 b / t with sequence
// parallelism, the attention term dropped by selective recomputation; with the fused kernel
// the attention's row statistics in its place) and the tensors the CPU engine keeps for fp32;
// the unfused path without and with selective recomputation, and the fused kernel. Checks: the
// estimate within 20% of the measured peak (the planner's promise, as test_plan_memory.cpp for
// one process); sequence parallelism lowers the measured activation memory by at least half of
// what the planner says it saves; the activation memory the engine measures (peak minus
// weights, gradients and optimizer state) within 25% of the planner's activation estimate.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "comm_test.h"

namespace {

using ct::expect;
using ct::str;

struct Case {
  int t;
  bool sp;
  ptdp_recompute recompute;
  ptdp_dtype precision;
  ptdp_attention attention;  // the engine's and the plan's
};

struct Variant {
  ptdp_attention attention;
  ptdp_recompute recompute;
};
constexpr Variant kVariants[] = {{PTDP_ATTENTION_UNFUSED, PTDP_RECOMPUTE_NONE},
                                 {PTDP_ATTENTION_UNFUSED, PTDP_RECOMPUTE_SELECTIVE},
                                 {PTDP_ATTENTION_FUSED, PTDP_RECOMPUTE_NONE}};

constexpr int kM = 4, kB = 4;  // microbatches (all in flight under GPipe) and their size

ptdp_gpt_options small_gpt(const Case& c) {
  ptdp_gpt_options o;
  ptdp_gpt_options_init(&o);
  o.num_layers = 4;
  o.hidden_size = 128;
  o.num_attention_heads = 4;
  o.seq_length = 128;
  o.vocab_size = 1000;
  o.make_vocab_size_divisible_by = 128;
  o.recompute_granularity = c.recompute;
  o.precision = c.precision;
  o.attention = c.attention;
  return o;
}

// The high-water mark of one rank above what was in use before, over two iterations.
double measured_peak(ptdp_runtime rt, const Case& c) {
  ptdp_parallel_options po;
  ptdp_parallel_options_init(&po);
  po.tensor_model_parallel_size = c.t;
  po.sequence_parallel = c.sp ? 1 : 0;
  ptdp_groups groups = nullptr;
  if (!CT_OK(ptdp_groups_create(rt, &po, &groups)).empty()) return 0.0;
  size_t before = 0, peak = 0;
  CT_OK(ptdp_memory_stats(&before, nullptr));
  CT_OK(ptdp_memory_reset_peak());
  const ptdp_gpt_options g = small_gpt(c);
  ptdp_model model = nullptr;
  ptdp_optimizer opt = nullptr;
  ptdp_schedule sched = nullptr;
  CT_OK(ptdp_model_create(groups, &g, &model));
  CT_OK(ptdp_optimizer_create(model, nullptr, &opt));
  CT_OK(ptdp_schedule_create(PTDP_SCHEDULE_GPIPE, 1, kM, 1, &sched));
  const std::size_t n = static_cast<std::size_t>(kM * kB * g.seq_length);
  std::vector<int32_t> tokens(n), labels(n);
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919u + 13u) % static_cast<std::size_t>(g.vocab_size));
    labels[i] = static_cast<int32_t>((i * 104729u + 7u) % static_cast<std::size_t>(g.vocab_size));
  }
  for (int64_t it = 0; it < 2; ++it) {
    CT_OK(ptdp_train_iteration(model, opt, sched, tokens.data(), labels.data(), kB, it, nullptr, nullptr));
  }
  CT_OK(ptdp_memory_stats(nullptr, &peak));
  ptdp_schedule_destroy(sched);
  ptdp_optimizer_destroy(opt);
  ptdp_model_destroy(model);
  ptdp_groups_destroy(groups);
  double mine = static_cast<double>(peak - before), worst = 0.0;
  MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

// The planner's estimate for the case's layout on `world` GPUs.
bool estimated(const Case& c, int world, ptdp_plan_layout* out) {
  const ptdp_gpt_options g = small_gpt(c);
  ptdp_plan_options o;
  ptdp_plan_options_init(&o);
  o.num_layers = g.num_layers;
  o.hidden_size = g.hidden_size;
  o.num_attention_heads = g.num_attention_heads;
  o.seq_length = g.seq_length;
  o.vocab_size = g.vocab_size;
  o.make_vocab_size_divisible_by = g.make_vocab_size_divisible_by;
  o.attention_dropout = g.attention_dropout;
  o.global_batch_size = kM * kB * (world / c.t);
  o.precision = c.precision;
  o.attention = c.attention;
  o.recompute_granularity = c.recompute;
  o.num_gpus = world;
  o.tensor_model_parallel_size = c.t;
  o.pipeline_model_parallel_size = 1;
  o.micro_batch_size = kB;
  o.pipeline_schedule = PTDP_SCHEDULE_GPIPE;
  o.sequence_parallel = c.sp ? 1 : 0;
  ptdp_cluster cluster;
  ptdp_cluster_init(&cluster);
  ptdp_plan plan = nullptr;
  if (!CT_OK(ptdp_plan_create(&o, &cluster, &plan)).empty()) return false;
  int32_t count = 0;
  CT_OK(ptdp_plan_num_layouts(plan, &count));
  bool found = false;
  for (int32_t i = 0; i < count && !found; ++i) {
    ptdp_plan_layout layout;
    layout.struct_size = sizeof layout;
    CT_OK(ptdp_plan_get_layout(plan, i, &layout));
    if ((layout.sequence_parallel == 1) == c.sp && layout.t == c.t) {
      *out = layout;
      found = true;
    }
  }
  ptdp_plan_destroy(plan);
  return expect(found, "the plan lists t=" + str(c.t) + (c.sp ? " with" : " without") + " sequence parallelism");
}

}  // namespace

int main(int argc, char** argv) {
  int me = 0, W = 1;
  ct::start(&argc, &argv, &me, &W);
  ptdp_runtime rt = nullptr;
  ptdp_runtime_options ro = ct::runtime_options(120.0);
  if (CT_OK(ptdp_runtime_create(&ro, &rt)).empty()) {
    for (const int t : {2, 4}) {
      for (const ptdp_dtype precision : {PTDP_DTYPE_F32, PTDP_DTYPE_BF16}) {
        // The unfused path without and with selective recomputation (which drops its s x s
        // probabilities), and the fused kernel (the CPU's auto), which keeps none to drop.
        for (const Variant& variant : kVariants) {
          const ptdp_recompute recompute = variant.recompute;
          double act[2] = {0.0, 0.0}, est_act[2] = {0.0, 0.0};
          for (const bool sp : {false, true}) {
            const Case c{t, sp, recompute, precision, variant.attention};
            const std::string what = "t=" + str(t) + " d=" + str(W / t) + (sp ? " sp" : "") +
                                     (precision == PTDP_DTYPE_F32 ? " fp32" : " bf16") +
                                     (recompute == PTDP_RECOMPUTE_SELECTIVE ? " selective" : "") +
                                     (variant.attention == PTDP_ATTENTION_FUSED ? " fused" : "");
            ct::context(what);
            const double measured = measured_peak(rt, c);
            ptdp_plan_layout e;
            if (!estimated(c, W, &e)) continue;
            const double state = e.memory_weights + e.memory_gradients + e.memory_optimizer;
            act[sp] = measured - state;
            est_act[sp] = e.memory_activations;
            if (me == 0) {
              std::printf("%-26s estimate %6.2f MiB (activations %6.2f, state %5.2f), measured peak %6.2f MiB "
                          "(activations %6.2f), ratio %.3f\n",
                          what.c_str(), e.memory_total / 1048576.0, e.memory_activations / 1048576.0,
                          state / 1048576.0, measured / 1048576.0, act[sp] / 1048576.0, e.memory_total / measured);
            }
            expect(std::abs(e.memory_total - measured) <= 0.20 * measured, "estimate within 20% of the peak",
                   str(measured), str(e.memory_total));
            expect(std::abs(est_act[sp] - act[sp]) <= 0.25 * act[sp], "activation estimate within 25% of measured",
                   str(act[sp]), str(est_act[sp]));
          }
          const double saved = act[0] - act[1], predicted = est_act[0] - est_act[1];
          if (me == 0) {
            std::printf("  sequence parallelism saves %.2f MiB of activations per rank (planner: %.2f)\n",
                        saved / 1048576.0, predicted / 1048576.0);
          }
          expect(predicted > 0 && saved >= 0.5 * predicted, "sequence parallelism lowers the measured activations",
                 ">= " + str(0.5 * predicted), str(saved));
        }
      }
    }
  }
  CT_OK(ptdp_runtime_destroy(rt));
  const int code = ct::finish("test_plan_memory_mpi");
  MPI_Finalize();
  return code;
}
