// The planner with Megatron's uneven first and last pipeline stages: per-stage parameters equal
// what GptModel allocates for the uneven chunks, the stage times follow the real layer counts
// (the last stage carries the logits layer and the loss), the search keeps an uneven split when
// it balances the stages (and says why), pinned counts are honoured, and bad pins are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/model/gpt.h"
#include "core/plan/planner.h"

namespace {

using namespace ptdp;
using namespace ptdp::plan;

PipelineSplit split(int p, int v, int first, int last) {
  return PipelineSplit{p, v, first, last, {}};
}

// A small model with a large vocabulary: its logits layer costs about as much as 6 layers, so an
// even split of 8 layers over 4 stages leaves the last stage 4 times as busy as the others.
PlanRequest big_vocab_request() {
  PlanRequest q;
  q.model.num_layers = 8;
  q.model.hidden_size = 512;
  q.model.num_attention_heads = 8;
  q.model.vocab_size = 50257;
  q.model.seq_length = 1024;
  q.global_batch_size = 32;  // m = 32 microbatches: the slowest stage's pace matters more than the bubble
  q.precision = Precision::Bf16;
  q.num_gpus = 4;
  q.tensor = 1;
  q.pipeline = 4;
  return q;
}

Cluster one_node() {
  Cluster c = cluster_preset("dgx-a100");
  c.nodes = 1;
  return c;
}

}  // namespace

TEST_CASE("per-stage parameters of uneven splits equal what the model allocates", "[plan][uneven]") {
  GptConfig g;
  g.num_layers = 8;
  g.hidden_size = 32;
  g.num_attention_heads = 4;
  g.vocab_size = 300;
  g.make_vocab_size_divisible_by = 16;
  g.seq_length = 16;
  for (bool tie : {true, false}) {
    g.tie_embeddings = tie;
    for (const PipelineSplit& s : {split(2, 1, 3, 0), split(2, 1, 0, 1), split(4, 1, 1, 3), split(3, 1, 0, 2),
                                   split(2, 2, 2, 6), split(4, 2, 2, 2)}) {
      for (int t : {1, 2}) {
        for (int stage = 0; stage < s.pipeline; ++stage) {
          int64_t laid_out = 0;
          for (int c = stage; c < s.pipeline * s.virtual_stages; c += s.pipeline) {
            const GptModel chunk(g, TensorParallel{nullptr, 0, t}, Device{}, GptStage::chunk_of(g, s, c), false);
            for (int i = 0; i < chunk.params().size(); ++i) laid_out += chunk.params().info(i).local_shape.numel();
          }
          INFO("tie " << tie << " t " << t << " " << s.str() << " stage " << stage);
          CHECK(stage_parameters(g, t, s, stage) == laid_out);
        }
      }
    }
  }
}

TEST_CASE("stage times follow the real layer counts, the last stage's logits included", "[plan][uneven]") {
  const PlanRequest q = big_vocab_request();
  const Cluster cl = one_node();
  plan::Layout L;
  L.t = 1;
  L.p = 4;
  L.d = 1;
  L.b = 1;
  L.m = 32;
  const std::vector<double> even = stage_microbatch_seconds(q, cl, L);
  REQUIRE(even.size() == 4);
  const double layer = even[1] / 2;  // a middle stage: 2 layers, nothing else
  CHECK(even[2] == Approx(even[1]));
  CHECK(even[0] >= even[1]);                   // + the embedding's all-reduce (none at t = 1)
  // + the logits layer: 6 layers' worth of FLOPs, about 4 layers' worth of time once each layer's
  // memory-bound kernels (its softmax over s = 1024) and GEMM shapes are priced.
  CHECK(even[3] > even[1] + 3 * layer);
  CHECK(even[3] < even[1] + 8 * layer);
  L.first = 1;
  L.last = 1;  // stages 1, 3, 3, 1
  const std::vector<double> uneven = stage_microbatch_seconds(q, cl, L);
  CHECK(uneven[0] == Approx(even[0] - layer));
  CHECK(uneven[1] == Approx(3 * layer));
  CHECK(uneven[3] == Approx(even[3] - layer));
  CHECK(*std::max_element(uneven.begin(), uneven.end()) < *std::max_element(even.begin(), even.end()));
  // The estimate runs at the slowest stage's pace and holds the most loaded stage's memory.
  const Estimate a = estimate(q, cl, L, true), b = estimate(q, cl, [&] {
    plan::Layout e = L;
    e.first = e.last = 0;
    return e;
  }(), true);
  CHECK(a.iteration < b.iteration);
  CHECK(a.costs.forward + a.costs.backward == Approx(uneven[3]));
  CHECK(a.layout.str() == "t=1 p=4 first=1 last=1 d=1 b=1 m=32 1f1b recompute=none");
  L.first = 2;
  L.last = 3;  // 2 + 3 leave 3 layers for 2 middle stages
  CHECK_THROWS_WITH(estimate(q, cl, L, false),
                    "layout t=1 p=4 first=2 last=3 d=1 b=1 m=32 1f1b recompute=none: number of layers at middle "
                    "stage: 3 must be divisible by the middle pipeline model parallel size 2");
}

TEST_CASE("the planner keeps uneven stages that balance the pipeline, and says why", "[plan][uneven]") {
  const PlanRequest q = big_vocab_request();
  const PlanResult r = make_plan(q, one_node());
  REQUIRE(r.feasible);
  const Estimate& best = r.layouts.front();
  INFO(plan_report(r));
  CHECK(best.layout.p == 4);
  CHECK(best.layout.last == 1);  // the logits layer's stage gets the fewest layers
  CHECK(best.layout.first > 0);  // 7 layers do not split over the other 3 stages
  CHECK(r.why.front().find("uneven stages (Megatron's --decoder-first-pipeline-num-layers") != std::string::npos);
  CHECK(r.why.front().find("the last stage also runs the logits layer and the loss") != std::string::npos);
  CHECK(plan_report(r).find("first/last") != std::string::npos);
  const nlohmann::json j = plan_to_json(r);
  CHECK(j["layouts"][0]["decoder_last_pipeline_num_layers"] == 1);
  CHECK(j["layouts"][0]["stage_layers"].size() == 4);
  // The same layout with an even split is slower.
  plan::Layout even = best.layout;
  even.first = even.last = 0;
  CHECK(estimate(q, one_node(), even, true).iteration > best.iteration);

  // A balanced model (small vocabulary) keeps the even split.
  PlanRequest small = q;
  small.model.vocab_size = 256;
  small.model.hidden_size = 2048;
  small.model.num_attention_heads = 16;
  const PlanResult s = make_plan(small, one_node());
  REQUIRE(s.feasible);
  CHECK(s.layouts.front().layout.first == 0);
  CHECK(s.layouts.front().layout.last == 0);
}

TEST_CASE("pinned first and last stage layers are honoured or refused", "[plan][uneven]") {
  PlanRequest q = big_vocab_request();
  q.first_stage_layers = 3;
  q.last_stage_layers = 1;
  const PlanResult r = make_plan(q, one_node());
  REQUIRE(r.feasible);
  for (const Estimate& e : r.layouts) {
    CHECK(e.layout.first == 3);
    CHECK(e.layout.last == 1);
  }
  // p need not divide the layers: 8 over p = 3 as 2 + 2 + 4, searched when p is not pinned.
  q.pipeline = 0;
  q.first_stage_layers = 0;
  q.last_stage_layers = 4;
  q.num_gpus = 3;
  const PlanResult three = make_plan(q, one_node());
  REQUIRE(three.feasible);
  for (const Estimate& e : three.layouts) CHECK((e.layout.p == 3 || e.layout.p == 1 || e.layout.p == 5));
  // A split no p allows with the GPUs given: infeasible, with the reason.
  q.last_stage_layers = 9;
  const PlanResult none = make_plan(q, one_node());
  CHECK_FALSE(none.feasible);
  CHECK(none.reason.find("pinned first and last stage layers") != std::string::npos);
  // Bad pins.
  q.last_stage_layers = -1;
  CHECK_THROWS_WITH(make_plan(q, one_node()),
                    "pinned first and last stage layers must be >= 0 (0: search), got 0 and -1");
  q.last_stage_layers = 2;
  q.layers_per_virtual_stage = 1;
  CHECK_THROWS_WITH(make_plan(q, one_node()), Catch::Contains("cannot be pinned with first or last stage layers"));
}

TEST_CASE("the planner searches ZB-V, DualPipeV and interleaved zero bubble, and pins them", "[plan][schedule]") {
  PlanRequest q = big_vocab_request();
  q.pipeline = 2;
  q.num_gpus = 2;
  q.global_batch_size = 16;
  q.top = 200;  // room for every schedule (bf16 with head dim 64 plans the fused attention: more b fit)
  const PlanResult r = make_plan(q, one_node());
  REQUIRE(r.feasible);
  INFO(plan_report(r));
  bool zbv = false, dualpipev = false, izb = false;
  for (const Estimate& e : r.layouts) {
    zbv = zbv || e.layout.schedule == ScheduleKind::ZeroBubbleV;
    dualpipev = dualpipev || e.layout.schedule == ScheduleKind::DualPipeV;
    izb = izb || e.layout.schedule == ScheduleKind::InterleavedZeroBubble;
    if (e.layout.schedule == ScheduleKind::ZeroBubbleV || e.layout.schedule == ScheduleKind::DualPipeV) {
      CHECK(e.layout.v == 2);  // two chunks per rank in a V
      CHECK(e.layout.first == 0);  // an even split
      CHECK(e.layout.last == 0);
      CHECK(e.simulated);
    }
    if (e.layout.schedule == ScheduleKind::DualPipeV) CHECK(e.layout.m >= 2 * e.layout.p);
  }
  CHECK(zbv);
  CHECK(dualpipev);
  CHECK(izb);
  // Pinned, only that schedule, and the reasons compare it with the best.
  q.schedule = static_cast<int>(ScheduleKind::ZeroBubbleV);
  const PlanResult pinned = make_plan(q, one_node());
  REQUIRE(pinned.feasible);
  for (const Estimate& e : pinned.layouts) CHECK(e.layout.schedule == ScheduleKind::ZeroBubbleV);
  CHECK(plan_report(pinned).find("zb-v") != std::string::npos);
}
