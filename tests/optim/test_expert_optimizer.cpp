// Expert parameters in the data-parallel machinery, under mpiexec with 8 ranks. The engine's
// core API (bucket ranges and views are internal); the tables are synthetic: dense parameters
// and the experts of one MoE layer declared with ParamTable::set_expert, no MoE layer needed.
// Layouts: (t, c, d, p, e, etp) = (2,1,4,1,4,1), (2,1,2,2,2,2), (4,1,2,1,2,2), (1,2,2,2,4,1),
// (1,1,8,1,2,1), (2,2,2,1,2,1) (the expert-data-parallel group crosses the tensor ranks) and a
// dense-only table.
//
// 1. GradBuckets: no bucket straddles the dense/expert boundary; dense buckets are reduced over
//    the data+context group, expert buckets over the expert-data-parallel group; the reduced
//    values equal those computed here from every rank's gradients (dense: the mean over the
//    data+context ranks; experts: the sum over the expert-data-parallel ranks divided by d*c);
//    plain and distributed (each rank its shard), one bucket per region and small buckets.
// 2. SGD (lr 1, no momentum, decay or clipping) leaves p - g on every rank for the reduced
//    gradient g, plain and distributed, f32 and bf16 weights (fp32 masters sharded over each
//    region's own group, the 16-bit weights gathered over it), and its grad norm equals the
//    norm computed here counting every distinct gradient once: dense ones per tensor rank and
//    pipeline stage (tensor-replicated once), expert ones per (etp, ep, pp) (etp-replicated
//    once), never their data-parallel replicas.
// 3. AdamW with clipping: the distributed optimizer's parameters equal the plain optimizer's
//    over three steps, and its state read back whole (get_state) equals the plain one's.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/runtime.h"
#include "core/optim/grad_buckets.h"
#include "core/optim/optimizer.h"
#include "core/parallel/groups.h"
#include "core/params/params.h"

namespace {

using ptdp::GroupKind;
using ptdp::ParamTable;

int g_failed = 0, g_passed = 0, g_rank = 0;
std::string g_context;

bool expect(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return true;
  }
  ++g_failed;
  std::fprintf(stderr, "[rank %d] FAIL %s: %s\n", g_rank, g_context.c_str(), what.c_str());
  return false;
}

bool close(double a, double b, double tol = 1e-6) { return std::fabs(a - b) <= tol * (1.0 + std::fabs(b)); }

struct Spec {
  int t, c, d, p, e, etp;
  std::string str() const {
    return "t=" + std::to_string(t) + " c=" + std::to_string(c) + " d=" + std::to_string(d) + " p=" +
           std::to_string(p) + " e=" + std::to_string(e) + " etp=" + std::to_string(etp);
  }
};

constexpr int kExperts = 4;  // E, the routed experts of the layer

// A stage's table for the rank at `k`: dense parameters before and after the experts in
// declaration order (allocate() lays the experts after all of them), E/e local experts named by
// their global index, with fc1 in SwiGLU's two blocks. `experts` false: a dense model.
ParamTable make_table(const ptdp::Layout& L, const ptdp::RankCoords& k, bool experts) {
  ParamTable t(k.tp, L.tensor());
  t.add("decoder.layers.0.self_attention.linear_qkv.weight", {8, 4}, 0, ptdp::ParamInit::Normal, 0.5f);
  t.add("decoder.layers.0.self_attention.linear_qkv.bias", {5}, -1, ptdp::ParamInit::Normal, 0.5f, false);
  if (experts) {
    const int local = kExperts / L.expert_model();
    for (int j = 0; j < local; ++j) {
      const std::string J = std::to_string(k.ep * local + j);
      const std::string base = "decoder.layers.0.mlp.experts.";
      t.set_expert(t.add(base + "linear_fc1.weight" + J, {8, 4}, 0, ptdp::ParamInit::Normal, 0.5f, true, 2), k.etp,
                   L.expert_tensor());
      t.set_expert(t.add(base + "linear_fc2.weight" + J, {4, 8}, 1, ptdp::ParamInit::Normal, 0.5f), k.etp,
                   L.expert_tensor());
      t.set_expert(t.add(base + "linear_fc2.bias" + J, {3}, -1, ptdp::ParamInit::Normal, 0.5f, false), k.etp,
                   L.expert_tensor());
    }
  }
  t.add("decoder.layers.0.mlp.router.weight", {kExperts, 4}, -1, ptdp::ParamInit::Normal, 0.5f);
  t.add("decoder.final_layernorm.weight", {7}, -1, ptdp::ParamInit::Ones, 0.0f, false);
  return t;
}

// The rank whose gradient rank `r` holds for parameter `p`: replicas of a replicated slice hold
// the same gradient (a tensor-replicated one the same on every tensor rank, an etp-replicated
// expert one the same on every expert-tensor rank), as a real backward gives them.
int source_rank(const ptdp::Layout& L, int r, const ptdp::ParamInfo& p) {
  ptdp::RankCoords k = L.coords(r);
  if (p.partition_dim >= 0) return r;
  if (p.expert) return L.expert_rank_of(k.pp, 0, k.ep, k.edp);
  k.tp = 0;
  return L.rank_of(k);
}

// This iteration's gradient of element `x` of parameter `i` on rank `r` (before reduction).
float grad_value(const ptdp::Layout& L, const ParamTable& table, int r, int i, int64_t x, int step) {
  const int src = source_rank(L, r, table.info(i));
  return static_cast<float>(((src * 7 + i * 5 + x * 3 + step * 11) % 19) - 9) / 8.0f;
}

// The reduced gradient rank `r` should see: the data+context mean for dense parameters, the
// expert-data-parallel sum over d*c for expert ones. Computed from the layout, not the buckets.
double expected_grad(const ptdp::Layout& L, const ParamTable& table, int r, int i, int64_t x, int step) {
  const bool expert = table.info(i).expert;
  const std::vector<int> members = L.members(expert ? GroupKind::ExpertData : GroupKind::DataContext, r);
  double sum = 0;
  for (int m : members) sum += grad_value(L, table, m, i, x, step);
  return expert ? sum / (L.data() * L.context()) : sum / static_cast<double>(members.size());
}

// The global gradient norm counting each distinct gradient once, over every rank's table.
double expected_norm(const ptdp::Layout& L, bool experts, int step) {
  double sq = 0;
  for (int r = 0; r < L.world(); ++r) {
    const ptdp::RankCoords k = L.coords(r);
    const ParamTable table = make_table(L, k, experts);
    for (int i = 0; i < table.size(); ++i) {
      const ptdp::ParamInfo& p = table.info(i);
      const bool first_replica = p.expert ? k.edp == 0 : (k.dp == 0 && k.cp == 0);
      const int split_rank = p.expert ? k.etp : k.tp;
      if (!first_replica || (p.partition_dim < 0 && split_rank != 0)) continue;
      for (int64_t x = 0; x < p.local_shape.numel(); ++x) {
        const double g = expected_grad(L, table, r, i, x, step);
        sq += g * g;
      }
    }
  }
  return std::sqrt(sq);
}

void set_grads(const ptdp::Layout& L, ParamTable& table, int step) {
  for (int i = 0; i < table.size(); ++i) {
    const ptdp::ParamInfo& p = table.info(i);
    std::vector<float> g(static_cast<std::size_t>(p.local_shape.numel()));
    for (int64_t x = 0; x < p.local_shape.numel(); ++x) g[static_cast<std::size_t>(x)] = grad_value(L, table, g_rank, i, x, step);
    table.grad(i).copy_from_host(g.data(), g.size() * sizeof(float));
  }
}

ptdp::ParallelConfig config_of(const Spec& s, int world) {
  ptdp::ParallelConfig c{world, s.t, s.p, 1};
  c.context = s.c;
  c.expert_model = s.e;
  c.expert_tensor = s.etp;
  return c;
}

// 1. The buckets and their reduced values.
void check_buckets(ptdp::ProcessGroups& groups, bool experts, bool distributed, int64_t bucket_elements) {
  const ptdp::Layout& L = groups.layout();
  ParamTable table = make_table(L, L.coords(g_rank), experts);
  table.allocate(ptdp::Device{});
  ptdp::GradBuckets buckets(table, bucket_elements, distributed, groups, true);
  expect(table.has_experts() == experts, "the table has expert parameters iff declared");
  const int dc = groups.size(GroupKind::DataContext), edp = groups.size(GroupKind::ExpertData);
  if (experts)
    expect(table.expert_begin() % dc == 0 && table.expert_begin() >= table.dense_numel(),
           "the expert region starts at a multiple of d*c after the dense parameters");
  int64_t covered = 0;
  for (const ptdp::GradBucket& b : buckets.buckets()) {
    const bool expert_side = b.lo >= table.expert_begin() && experts;
    expect(!experts || b.hi <= table.expert_begin() || b.lo >= table.expert_begin(),
           "bucket [" + std::to_string(b.lo) + ", " + std::to_string(b.hi) + ") does not straddle the expert region at " +
               std::to_string(table.expert_begin()));
    expect(b.group == (expert_side ? GroupKind::ExpertData : GroupKind::DataContext), "the bucket's group is its region's");
    expect((b.hi - b.lo) % (expert_side ? edp : dc) == 0, "the bucket divides over its group");
    expect(b.sharded == (distributed && groups.size(b.group) > 1), "sharded iff distributed over a group of several");
    covered += b.hi - b.lo;
  }
  expect(covered == table.capacity(), "the buckets cover the buffer");
  for (int step = 0; step < 2; ++step) {
    table.zero_grads();
    set_grads(L, table, step);
    // Parameters become ready from the last declared, as a backward reports them.
    for (int i = table.size() - 1; i >= 0; --i) buckets.params_ready(i, i + 1);
    buckets.finish_grad_sync();
    buckets.finish_grad_sync();  // a second call changes nothing (the expert scale is applied once)
    int bad = 0;
    for (int i = 0; i < table.size(); ++i) {
      const ptdp::ParamInfo& p = table.info(i);
      for (const ptdp::GradBucket& b : buckets.buckets()) {
        for (int64_t x = 0; x < p.local_shape.numel(); ++x) {
          const int64_t e = p.offset + x;
          if (e < b.shard_lo || e >= b.shard_hi) continue;
          const double want = expected_grad(L, table, g_rank, i, x, step);
          if (!close(*buckets.reduced_grad(b, e), want) && bad++ < 3)
            expect(false, p.name + "[" + std::to_string(x) + "] reduced to " + std::to_string(*buckets.reduced_grad(b, e)) +
                              ", want " + std::to_string(want));
        }
      }
    }
    expect(bad == 0, "every reduced gradient of this rank's shards (step " + std::to_string(step) + ")");
    buckets.start_next_iteration();
  }
}

ptdp::OptimizerConfig sgd_config(bool distributed) {
  ptdp::OptimizerConfig c;
  c.kind = ptdp::OptimizerKind::Sgd;
  c.lr.lr = 1.0;
  c.momentum = 0.0f;
  c.weight_decay = 0.0f;
  c.clip_grad = 0.0f;
  c.distributed = distributed;
  c.bucket_elements = 40;
  c.overlap_grad_reduce = true;
  return c;
}

// 2. SGD leaves p - g, and the norm counts each gradient once.
void check_sgd(ptdp::ProcessGroups& groups, bool experts, bool distributed, ptdp::DType dtype) {
  const ptdp::Layout& L = groups.layout();
  ParamTable table = make_table(L, L.coords(g_rank), experts);
  table.allocate(ptdp::Device{}, dtype);
  table.initialize(1234);
  ptdp::Optimizer opt({&table}, {}, sgd_config(distributed), groups);
  expect(table.masters_sharded() == (distributed && dtype != ptdp::DType::F32 &&
                                     (groups.size(GroupKind::DataContext) > 1 || (experts && groups.size(GroupKind::ExpertData) > 1))),
         "the fp32 masters are sharded with the distributed optimizer and 16-bit weights");
  for (int step = 0; step < 2; ++step) {
    const std::vector<float> before = table.masters_to_host();
    table.zero_grads();
    set_grads(L, table, step);
    for (int i = table.size() - 1; i >= 0; --i) opt.params_ready(0, i, i + 1);
    const ptdp::OptimizerStepResult res = opt.step(step);
    const double want_norm = expected_norm(L, experts, step);
    expect(close(res.grad_norm, want_norm, 1e-5),
           "grad norm " + std::to_string(res.grad_norm) + ", counted by hand " + std::to_string(want_norm));
    const std::vector<float> after = table.masters_to_host();
    std::vector<float> weights(static_cast<std::size_t>(table.capacity()));
    table.flat_weights().to(ptdp::DType::F32).copy_to_host(weights.data(), weights.size() * sizeof(float));
    const std::vector<float> rounded = [&] {
      std::vector<float> r(after.size());
      ptdp::Tensor::from_host(after.data(), {static_cast<int64_t>(after.size())}, ptdp::DType::F32)
          .to(dtype)
          .to(ptdp::DType::F32)
          .copy_to_host(r.data(), r.size() * sizeof(float));
      return r;
    }();
    int bad = 0;
    for (int i = 0; i < table.size(); ++i) {
      const ptdp::ParamInfo& p = table.info(i);
      for (int64_t x = 0; x < p.local_shape.numel(); ++x) {
        const auto e = static_cast<std::size_t>(p.offset + x);
        const double want = before[e] - expected_grad(L, table, g_rank, i, x, step);
        if ((!close(after[e], want) || weights[e] != rounded[e]) && bad++ < 3)
          expect(false, p.name + "[" + std::to_string(x) + "] = " + std::to_string(after[e]) + " (weight " +
                            std::to_string(weights[e]) + "), want " + std::to_string(want));
      }
    }
    expect(bad == 0, "every parameter is p - g and its model weight the rounded master (step " + std::to_string(step) + ")");
  }
}

// 3. AdamW with clipping: distributed == plain, state included.
void check_adam(ptdp::ProcessGroups& groups) {
  const ptdp::Layout& L = groups.layout();
  ParamTable plain = make_table(L, L.coords(g_rank), true), dist = make_table(L, L.coords(g_rank), true);
  plain.allocate(ptdp::Device{}, ptdp::DType::BF16);
  dist.allocate(ptdp::Device{}, ptdp::DType::BF16);
  plain.initialize(99);
  dist.initialize(99);
  ptdp::OptimizerConfig c;
  c.lr.lr = 0.01;
  c.clip_grad = 0.5f;  // below the norm: clipping acts
  c.bucket_elements = 24;
  ptdp::Optimizer a({&plain}, {}, c, groups);
  c.distributed = true;
  ptdp::Optimizer b({&dist}, {}, c, groups);
  for (int step = 0; step < 3; ++step) {
    for (ParamTable* t : {&plain, &dist}) {
      t->zero_grads();
      set_grads(L, *t, step);
    }
    const double na = a.step(step).grad_norm, nb = b.step(step).grad_norm;
    expect(close(na, nb, 1e-5) && na > 0.5, "the same grad norm, above the clipping threshold");
  }
  expect(plain.capacity() == dist.capacity(), "the same layout");
  const std::vector<float> pa = plain.masters_to_host(), pb = dist.masters_to_host();
  int bad = 0;
  for (std::size_t e = 0; e < pa.size(); ++e) bad += close(pa[e], pb[e], 1e-5) ? 0 : 1;
  expect(bad == 0, std::to_string(bad) + " parameters differ between the plain and the distributed optimizer");
  for (int k = 0; k < 2; ++k) {
    const std::vector<float> sa = a.get_state(0, k), sb = b.get_state(0, k);
    bad = 0;
    for (std::size_t e = 0; e < sa.size(); ++e) bad += close(sa[e], sb[e], 1e-5) ? 0 : 1;
    expect(bad == 0, "optimizer state " + std::to_string(k) + " read back whole is the plain optimizer's");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  {
    ptdp::RuntimeOptions o;
    o.timeout_s = 120;
    auto rt = ptdp::Runtime::create(o);
    const int world = rt->world_size();
    g_rank = rt->world_rank();
    const Spec specs[] = {{2, 1, 4, 1, 4, 1}, {2, 1, 2, 2, 2, 2}, {4, 1, 2, 1, 2, 2},
                          {1, 2, 2, 2, 4, 1}, {1, 1, 8, 1, 2, 1}, {2, 2, 2, 1, 2, 1}};
    for (const Spec& s : specs) {
      if (s.t * s.c * s.d * s.p != world) continue;
      ptdp::ProcessGroups groups(rt, config_of(s, world));
      for (const bool experts : {true, false}) {
        for (const bool distributed : {false, true}) {
          for (const int64_t bucket : {int64_t{0}, int64_t{24}}) {
            g_context = s.str() + (experts ? "" : " dense") + (distributed ? " distributed" : "") + " bucket " +
                        std::to_string(bucket) + ": buckets";
            check_buckets(groups, experts, distributed, bucket);
          }
          for (const ptdp::DType dtype : {ptdp::DType::F32, ptdp::DType::BF16}) {
            g_context = s.str() + (experts ? "" : " dense") + (distributed ? " distributed" : "") + " " +
                        ptdp::dtype_name(dtype) + ": sgd";
            check_sgd(groups, experts, distributed, dtype);
          }
        }
      }
      g_context = s.str() + ": adam";
      check_adam(groups);
    }
  }
  int counts[2] = {g_failed, g_passed}, total[2] = {0, 0};
  MPI_Allreduce(counts, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%d passed, %d failed\n", total[1], total[0]);
  MPI_Finalize();
  return total[0] == 0 && total[1] > 0 ? 0 : 1;
}
