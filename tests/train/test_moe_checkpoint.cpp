// A mixture-of-experts checkpoint continues the same trajectory under other expert layouts
// (core API, under mpiexec with 8 ranks): a tiny GPT whose MLPs route over E = 4 experts (top-2,
// sigmoid scores with the expert bias of aux-loss-free balancing, aux loss, dropout on) trains 6 iterations at (t, p, e, etp) = (2, 1, 4, 1), d = 4 with the
// distributed optimizer, for the reference trajectory; the same run saves at iteration 3, and
// the checkpoint is loaded and trained on to iteration 6 at
//   (2, 1, 4, 1) distributed     the saving layout: bit-identical losses and grad norms
//   (2, 1, 1, 2) plain           e = 1 (every expert on every rank, split like the dense MLP)
//   (2, 1, 2, 1) distributed     e = 2
//   (4, 1, 2, 2) distributed     another t and etp (d = 2)
//   (1, 2, 2, 1) distributed     t = 1 with two pipeline stages (1F1B, d = 4)
// The global batch is the same 8 microbatches of 2 samples everywhere (m = 8 / d per replica).
// Losses and grad norms of iterations 3-5 must be the reference's to 1e-4 relative (float32,
// the layouts differ in summation order only), bit for bit at the saving layout.
// With a second argument "mtp" the model has a multi-token prediction module (RoPE, D = 1) whose
// layer is MoE like the decoder's last: its experts (mtp.layers.0.transformer_layer.mlp.experts.*)
// are saved and resharded as the decoder's, and its MTP loss continues the trajectory too.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/comm/runtime.h"
#include "core/model/gpt_pipeline.h"
#include "core/train/trainer.h"

using namespace ptdp;

namespace {

int g_rank = 0, g_failed = 0, g_passed = 0;

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "[rank %d] FAIL %s\n", g_rank, what.c_str());
}

bool g_mtp = false;

constexpr int kMicro = 2, kMicrobatches = 8, kSeq = 8, kVocab = 53, kSaveAt = 3, kIters = 6;

struct Spec {
  int t, p, e, etp;
  bool distributed;
  std::string str() const {
    return "(t " + std::to_string(t) + ", p " + std::to_string(p) + ", e " + std::to_string(e) + ", etp " +
           std::to_string(etp) + (distributed ? ", distributed)" : ")");
  }
};

GptConfig config() {
  GptConfig g;
  g.num_layers = 2;
  g.hidden_size = 16;
  g.num_attention_heads = 4;
  g.seq_length = kSeq;
  g.vocab_size = kVocab;
  g.make_vocab_size_divisible_by = 4;
  g.hidden_dropout = 0.1f;
  g.attention_dropout = 0.1f;
  g.init_method_std = 0.1f;
  g.seed = 2024;
  g.moe.num_experts = 4;
  g.moe.router_topk = 2;
  g.moe.ffn_hidden_size = 8;
  g.moe.aux_loss_coeff = 0.01f;
  // Aux-loss-free balancing too: the expert bias moves every iteration, so a checkpoint that
  // lost it (or a load that dropped it) would route differently after the resume.
  g.moe.score_function = MoeScoreFunction::Sigmoid;
  g.moe.enable_expert_bias = true;
  g.moe.bias_update_rate = 0.01f;
  if (g_mtp) {
    g.position_embedding = PositionEmbedding::Rope;
    g.mtp_num_layers = 1;
    g.mtp_loss_scaling_factor = 0.3f;
  }
  return g;
}

struct Trajectory {
  std::vector<float> loss, mtp;  // mtp: the MTP loss (with "mtp")
  std::vector<double> norm;
};

// Trains iterations [first, last) under `s`, loading `load` first and saving into `save` at the
// end when they are not empty.
Trajectory train(std::shared_ptr<Runtime> rt, const Spec& s, int first, int last, const std::string& load,
                 const std::string& save) {
  ParallelConfig pc{rt->world_size(), s.t, s.p, 1};
  pc.expert_model = s.e;
  pc.expert_tensor = s.etp;
  pc.sequence_parallel = s.t > 1;  // MoE with t > 1 needs it, as Megatron
  ProcessGroups groups(rt, pc);
  GptPipeline model(config(), groups);
  OptimizerConfig oc;
  oc.lr.lr = 1e-2;
  oc.clip_grad = 1.0f;
  oc.distributed = s.distributed;
  std::unique_ptr<Optimizer> opt = make_optimizer(model, groups, oc);
  if (!load.empty()) {
    const CheckpointState st = load_checkpoint(load, model, opt.get());
    expect(st.iteration == first, s.str() + ": the checkpoint's iteration is " + std::to_string(st.iteration));
  }
  const int d = groups.size(GroupKind::Data), m = kMicrobatches / d;
  const Schedule sched = make_schedule(ScheduleKind::OneFOneB, s.p, m, 1);
  const std::size_t n = static_cast<std::size_t>(kMicrobatches * kMicro * kSeq);
  std::vector<int32_t> tokens(n), labels(n);
  std::mt19937 gen(99);
  std::uniform_int_distribution<int> u(0, kVocab - 1);
  for (std::size_t i = 0; i < n; ++i) {
    tokens[i] = u(gen);
    labels[i] = u(gen);
  }
  const std::size_t off = static_cast<std::size_t>(groups.rank(GroupKind::Data) * m * kMicro * kSeq);
  Trajectory out;
  for (int it = first; it < last; ++it) {
    const IterationOutcome r = train_iteration(model, *opt, groups, sched, tokens.data() + off, labels.data() + off,
                                               kMicro, it);
    out.loss.push_back(r.loss);
    out.norm.push_back(r.step.grad_norm);
    if (g_mtp) out.mtp.push_back(r.mtp_losses.size() == 1 ? r.mtp_losses[0] : -1.0f);
  }
  if (!save.empty()) {
    CheckpointState st;
    st.iteration = last;
    save_checkpoint(save, model, opt.get(), nullptr, st);
  }
  return out;
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "mtp")) {
    std::fprintf(stderr, "usage: test_moe_checkpoint WORK_DIR [mtp]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  g_mtp = argc == 3;
  const std::string work = argv[1];
  {
    RuntimeOptions o;
    o.timeout_s = 120;
    auto rt = Runtime::create(o);
    g_rank = rt->world_rank();
    if (rt->world_size() != 8) {
      std::fprintf(stderr, "run with 8 ranks\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (g_rank == 0) std::filesystem::remove_all(work);
    MPI_Barrier(MPI_COMM_WORLD);
    const Spec saving{2, 1, 4, 1, true};
    const Trajectory ref = train(rt, saving, 0, kIters, "", "");
    train(rt, saving, 0, kSaveAt, "", work + "/e4");
    const Spec targets[] = {saving, {2, 1, 1, 2, false}, {2, 1, 2, 1, true}, {4, 1, 2, 2, true}, {1, 2, 2, 1, true}};
    for (const Spec& s : targets) {
      const std::string tag = "saved at " + saving.str() + ", continued at " + s.str();
      try {
        const Trajectory got = train(rt, s, kSaveAt, kIters, work + "/e4", "");
        double worst = 0;
        for (int k = 0; k < kIters - kSaveAt; ++k) {
          const std::size_t j = static_cast<std::size_t>(kSaveAt + k), i = static_cast<std::size_t>(k);
          const double dl = std::max(rel(got.loss[i], ref.loss[j]),
                                     g_mtp ? rel(got.mtp[i], ref.mtp[j]) : 0.0),
                       dn = rel(got.norm[i], ref.norm[j]);
          worst = std::max({worst, dl, dn});
          const bool same_layout = &s == &targets[0];
          expect(same_layout ? dl == 0 && dn == 0 : dl <= 1e-4 && dn <= 1e-4,
                 tag + ": iteration " + std::to_string(j) + " loss " + std::to_string(got.loss[i]) + " (reference " +
                     std::to_string(ref.loss[j]) + "), grad norm " + std::to_string(got.norm[i]) + " (reference " +
                     std::to_string(ref.norm[j]) + ")" +
                     (g_mtp ? ", mtp loss " + std::to_string(got.mtp[i]) + " (reference " +
                                  std::to_string(ref.mtp[j]) + ")"
                            : std::string()));
        }
        if (g_rank == 0) std::printf("%s: worst relative difference %.2e\n", tag.c_str(), worst);
      } catch (const std::exception& e) {
        expect(false, tag + ": " + e.what());
      }
    }
  }
  int counts[2] = {g_failed, g_passed}, total[2] = {0, 0};
  MPI_Allreduce(counts, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%d passed, %d failed\n", total[1], total[0]);
  MPI_Finalize();
  return total[0] == 0 && total[1] > 0 ? 0 : 1;
}
