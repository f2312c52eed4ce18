// Multi-token prediction training equals serial training (core API, under mpiexec): a tiny
// RoPE GPT with D MTP modules (core/model/mtp.h), trained for a few iterations through the real
// training loop with dropout on, reports every iteration the loss, each depth's MTP loss and the
// gradient norm of the single-process run of the same seed and global batch, and ends with its
// parameters (the MTP modules' included).
//
// Usage: test_mtp_equivalence SPEC...   SPEC = "t,p,v,c,schedule,dist,D[,extras]" with schedule
// 1f1b, interleaved, zbv; d = world / (t p c). Extras ('+'-joined): untied (a separate
// output_layer: the last stage holds its own copy of the word embedding for the modules), sp
// (sequence parallelism), full (full recomputation), docs (packed documents: positions and
// document starts reset at position 3 of each sample, and ignored labels), swiglu (Llama's
// RMSNorm and SwiGLU).
//
// Every rank runs the serial reference itself (a world of one) on the whole global batch, d * m
// microbatches through 1F1B; the parallel run gives replica r the samples [r m b, (r+1) m b).
// Tolerances as test_moe_equivalence.cpp's: loss, MTP losses and grad norm 1e-4 relative every
// iteration; parameters ||x - y|| <= 1e-4 ||x|| per tensor, but linear_qkv's bias (AdamW's bound
// per element, as test_train_equivalence.cpp explains).
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

constexpr int kIters = 3, kMicro = 2, kM = 2, kVocab = 53, kSeq = 8;

struct Spec {
  int t = 1, p = 1, v = 1, c = 1, depth = 1;
  ScheduleKind kind = ScheduleKind::OneFOneB;
  bool dist = false;
  std::string extras, text;
  bool has(const std::string& w) const { return ("+" + extras + "+").find("+" + w + "+") != std::string::npos; }
};

bool parse(const char* s, Spec* out) {
  Spec x;
  char sched[32] = {0}, extra[128] = {0};
  int dist = 0;
  const int n = std::sscanf(s, "%d,%d,%d,%d,%31[^,],%d,%d,%127s", &x.t, &x.p, &x.v, &x.c, sched, &dist, &x.depth,
                            extra);
  if (n != 7 && n != 8) return false;
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
  g.seq_length = kSeq;
  g.vocab_size = kVocab;
  g.make_vocab_size_divisible_by = 4;
  g.hidden_dropout = 0.1f;
  g.attention_dropout = 0.1f;
  g.init_method_std = 0.1f;
  g.ffn_hidden_size = 32;
  g.seed = 2025;
  g.position_embedding = PositionEmbedding::Rope;
  g.tie_embeddings = !s.has("untied");
  if (s.has("swiglu")) {
    g.swiglu = true;
    g.normalization = Normalization::RMSNorm;
  }
  if (s.has("full")) g.recompute = Recompute::Full;
  g.mtp_num_layers = s.depth;
  g.mtp_loss_scaling_factor = 0.3f;
  return g;
}

OptimizerConfig optimizer_config(bool dist) {
  OptimizerConfig o;
  o.lr.lr = 1e-3;
  o.clip_grad = 1.0f;
  o.distributed = dist;
  return o;
}

struct Batch {
  std::vector<int32_t> tokens, labels, positions, starts;
  DocumentLayout at(std::size_t off) const {
    if (positions.empty()) return {};
    return {positions.data() + off, starts.data() + off};
  }
};

// d * m microbatches of kMicro samples; with docs, each sample two documents (positions 0..2,
// then 3..) and some labels ignored.
Batch batch(int d, bool docs) {
  Batch x;
  const std::size_t n = static_cast<std::size_t>(d * kM * kMicro * kSeq);
  std::mt19937 g(7);
  std::uniform_int_distribution<int> u(0, kVocab - 1);
  x.tokens.resize(n);
  x.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    x.tokens[i] = u(g);
    x.labels[i] = u(g);
    if (docs && i % 5 == 2) x.labels[i] = -100;
  }
  if (docs) {
    x.positions.resize(n);
    x.starts.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const int si = static_cast<int>(i % kSeq), start = si < 3 ? 0 : 3;
      x.starts[i] = start;
      x.positions[i] = si - start;
    }
  }
  return x;
}

struct Run {
  std::vector<float> loss;
  std::vector<std::vector<float>> mtp;
  std::vector<double> norm;
  std::map<std::string, std::vector<float>> params;  // serial: global values
};

Run reference(const Spec& s, int d) {
  RuntimeOptions o;
  auto rt = Runtime::create_self(o);
  ParallelConfig pc;
  pc.world = 1;
  ProcessGroups groups(rt, pc);
  GptPipeline model(config(s), groups);
  auto opt = make_optimizer(model, groups, optimizer_config(false));
  const Schedule sched = make_schedule(ScheduleKind::OneFOneB, 1, d * kM, 1);
  const Batch x = batch(d, s.has("docs"));
  Run r;
  for (int it = 0; it < kIters; ++it) {
    const IterationOutcome out = train_iteration(model, *opt, groups, sched, x.tokens.data(), x.labels.data(), kMicro,
                                                 it, {}, x.at(0));
    r.loss.push_back(out.loss);
    r.mtp.push_back(out.mtp_losses);
    r.norm.push_back(out.step.grad_norm);
  }
  const ParamTable& t = model.chunks()[0]->params();
  for (int i = 0; i < t.size(); ++i) r.params[t.info(i).name] = host(t.param(i));
  return r;
}

bool close(double got, double want) { return std::abs(got - want) <= 1e-4 * std::max(std::abs(want), 1e-12); }

void compare_params(const Spec& s, GptPipeline& model, const Run& ref, double* worst_param) {
  int mtp_params = 0;
  for (auto& chunk : model.chunks()) {
    ParamTable& t = chunk->params();
    for (int i = 0; i < t.size(); ++i) {
      const ParamInfo& info = t.info(i);
      // The vocabulary tables hold padded rows.
      if (info.name == "embedding.word_embeddings.weight" || info.name == "output_layer.weight") continue;
      if (info.name.rfind("mtp.layers.", 0) == 0) ++mtp_params;
      const auto it = ref.params.find(info.name);
      if (it == ref.params.end()) {
        expect(false, s.text + ": " + info.name + " is not in the serial model");
        continue;
      }
      const std::vector<float> want = slice_of(info, it->second);
      const std::vector<float> got = host(t.gather_param(i));
      double num = 0, den = 0, worst = 0;
      for (std::size_t k = 0; k < want.size(); ++k) {
        num += (got[k] - want[k]) * (got[k] - want[k]);
        den += want[k] * want[k];
        worst = std::max(worst, static_cast<double>(std::abs(got[k] - want[k])));
      }
      if (info.name.find("linear_qkv.bias") != std::string::npos) {
        expect(worst <= 2.0 * kIters * 1e-3 * 1.05, s.text + ": parameter " + info.name + " differs by " +
                                                        std::to_string(worst));
        continue;
      }
      const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-12);
      *worst_param = std::max(*worst_param, rel);
      expect(rel <= 1e-4, s.text + ": parameter " + info.name + " differs by " + std::to_string(rel));
    }
  }
  // The last stage's ranks hold the modules: enorm, hnorm, eh_proj, the layer, final_layernorm.
  int total = 0;
  MPI_Allreduce(&mtp_params, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  expect(total > 0, s.text + ": no rank holds an MTP parameter");
}

void run_spec(const Spec& s, int world) {
  const int d = world / (s.t * s.p * s.c);
  const Run ref = reference(s, d);
  RuntimeOptions o;
  auto rt = Runtime::create(o);
  ParallelConfig pc;
  pc.world = world;
  pc.tensor = s.t;
  pc.pipeline = s.p;
  pc.virtual_stages = s.v;
  pc.context = s.c;
  pc.sequence_parallel = s.has("sp");
  pc.chunk_placement = static_cast<int>(placement_of(s.kind));
  ProcessGroups groups(rt, pc);
  GptConfig cfg = config(s);
  cfg.sequence_parallel = s.has("sp");
  GptPipeline model(cfg, groups);
  auto opt = make_optimizer(model, groups, optimizer_config(s.dist));
  const Schedule sched = make_schedule(s.kind, s.p, kM, s.v);
  const Batch x = batch(d, s.has("docs"));
  const std::size_t off = static_cast<std::size_t>(groups.rank(GroupKind::Data) * kM * kMicro * kSeq);
  double worst_loss = 0, worst_norm = 0, worst_param = 0;
  for (int it = 0; it < kIters; ++it) {
    const IterationOutcome out = train_iteration(model, *opt, groups, sched, x.tokens.data() + off,
                                                 x.labels.data() + off, kMicro, it, {}, x.at(off));
    const std::size_t i = static_cast<std::size_t>(it);
    const std::string at = s.text + " iteration " + std::to_string(it) + ": ";
    worst_loss = std::max(worst_loss, std::abs(double{out.loss} - ref.loss[i]) / std::abs(ref.loss[i]));
    worst_norm = std::max(worst_norm, std::abs(out.step.grad_norm - ref.norm[i]) / ref.norm[i]);
    expect(close(out.loss, ref.loss[i]),
           at + "loss " + std::to_string(out.loss) + " vs " + std::to_string(ref.loss[i]));
    expect(close(out.step.grad_norm, ref.norm[i]),
           at + "grad norm " + std::to_string(out.step.grad_norm) + " vs " + std::to_string(ref.norm[i]));
    expect(out.mtp_losses.size() == static_cast<std::size_t>(s.depth) && ref.mtp[i].size() == out.mtp_losses.size(),
           at + std::to_string(out.mtp_losses.size()) + " MTP losses for D = " + std::to_string(s.depth));
    for (std::size_t k = 0; k < std::min(out.mtp_losses.size(), ref.mtp[i].size()); ++k) {
      worst_loss = std::max(worst_loss, std::abs(double{out.mtp_losses[k]} - ref.mtp[i][k]) / std::abs(ref.mtp[i][k]));
      expect(ref.mtp[i][k] > 0.0f && close(out.mtp_losses[k], ref.mtp[i][k]),
             at + "mtp_" + std::to_string(k + 1) + " loss " + std::to_string(out.mtp_losses[k]) + " vs " +
                 std::to_string(ref.mtp[i][k]));
    }
  }
  compare_params(s, model, ref, &worst_param);
  if (g_rank == 0)
    std::printf("%s: worst loss %.2e, grad norm %.2e, parameter %.2e\n", s.text.c_str(), worst_loss, worst_norm,
                worst_param);
}

}  // namespace

int main(int argc, char** argv) { return ptdp::spec_harness::run_specs<Spec>(argc, argv, parse, run_spec); }
