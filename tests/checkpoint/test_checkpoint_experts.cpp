// Checkpoints of tables with expert parameters reshard across (t, etp, e, p, d), under mpiexec
// with 8 ranks. The tables are synthetic (core/checkpoint/checkpoint_shards.h), two decoder
// layers each with a router and E = 4 experts declared with ParamTable::set_expert (fc1 in
// SwiGLU's two blocks, fc2 split by columns, an etp-replicated bias), dense parameters around
// them, cut into p chunks.
//
// Every parameter starts as a pure function of (seed, name, global index) (ParamTable::
// initialize), and the optimizer's state is set to another such function, so the tensors of any
// layout are known. A checkpoint saved under one layout, loaded under another, must give the
// loading layout's slices of the same functions exactly, parameters and both Adam moments, and
// the counters. Saved under (t,c,d,p,e,etp) = (2,1,2,2,2,1) with the distributed optimizer and
// bf16 weights (masters sharded over each region's group), loaded at (1,1,8,1,4,1), (4,1,2,1,2,2)
// distributed, (2,2,2,1,1,2) (experts folded on the tensor group) and (1,1,8,1,1,1) (e = 1);
// saved under (4,1,2,1,2,2), loaded back at (2,1,2,2,2,1). Also: the files are the dense shards
// then model_tpTT_ppPP_epEE for every (pp, ep, etp), metadata.json records e and etp, and a
// table without experts writes exactly the dense shards and no expert fields.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_files.h"
#include "core/checkpoint/checkpoint_shards.h"
#include "core/comm/runtime.h"

namespace {

using ptdp::GroupKind;
using ptdp::ParamInfo;
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

struct Spec {
  int t, c, d, p, e, etp;
  bool distributed;
  ptdp::DType dtype;
  std::string str() const {
    return "t=" + std::to_string(t) + " c=" + std::to_string(c) + " d=" + std::to_string(d) + " p=" +
           std::to_string(p) + " e=" + std::to_string(e) + " etp=" + std::to_string(etp) +
           (distributed ? " distributed" : "") + " " + ptdp::dtype_name(dtype);
  }
};

constexpr int kLayers = 2, kExperts = 4;
constexpr uint64_t kSeed = 7;

// Chunk `chunk` of `chunks` as the rank at `k` declares it.
ParamTable make_table(const ptdp::Layout& L, const ptdp::RankCoords& k, int chunk, int chunks, bool experts) {
  ParamTable t(k.tp, L.tensor());
  const auto normal = ptdp::ParamInit::Normal;
  if (chunk == 0) t.add("embedding.word_embeddings.weight", {16, 4}, 0, normal, 1.0f);
  for (int layer = chunk * kLayers / chunks; layer < (chunk + 1) * kLayers / chunks; ++layer) {
    const std::string pre = "decoder.layers." + std::to_string(layer) + ".";
    t.add(pre + "self_attention.linear_qkv.weight", {8, 4}, 0, normal, 1.0f);
    t.add(pre + "mlp.router.weight", {kExperts, 4}, -1, normal, 1.0f);
    if (!experts) continue;
    const int local = kExperts / L.expert_model();
    for (int j = 0; j < local; ++j) {
      const std::string J = std::to_string(k.ep * local + j), x = pre + "mlp.experts.";
      t.set_expert(t.add(x + "linear_fc1.weight" + J, {8, 4}, 0, normal, 1.0f, true, 2), k.etp, L.expert_tensor());
      t.set_expert(t.add(x + "linear_fc2.weight" + J, {4, 8}, 1, normal, 1.0f), k.etp, L.expert_tensor());
      t.set_expert(t.add(x + "linear_fc2.bias" + J, {3}, -1, normal, 1.0f, false), k.etp, L.expert_tensor());
    }
  }
  if (chunk == chunks - 1) t.add("decoder.final_layernorm.weight", {4}, -1, normal, 1.0f, false);
  return t;
}

ptdp::CheckpointShards shards_of(ptdp::ProcessGroups& groups, ParamTable& table, bool experts) {
  const ptdp::Layout& L = groups.layout();
  ptdp::CheckpointShards s;
  s.groups = &groups;
  s.tables = {&table};
  s.unsaved = {-1};
  s.chunks = L.pipeline();
  s.rank_of_chunk = [](int c) { return c; };
  s.saved_params = [&L, experts](int c, int world_rank) {
    const ParamTable t = make_table(L, L.coords(world_rank), c, L.pipeline(), experts);
    std::vector<ParamInfo> out;
    for (int i = 0; i < t.size(); ++i) out.push_back(t.info(i));
    return out;
  };
  return s;
}

// The known global function behind optimizer state k of parameter `p`, on p's slice.
std::vector<float> state_values(const ParamInfo& p, int k) {
  ParamInfo q = p;
  q.name = "state" + std::to_string(k) + "." + p.name;
  q.init = ptdp::ParamInit::Normal;
  q.init_std = 1.0f;
  std::vector<float> v(static_cast<std::size_t>(p.local_shape.numel()));
  ptdp::init_param_slice(q, kSeed, v.data());
  return v;
}

ptdp::ParallelConfig config_of(const Spec& s, int world) {
  ptdp::ParallelConfig c{world, s.t, s.p, 1};
  c.context = s.c;
  c.expert_model = s.e;
  c.expert_tensor = s.etp;
  return c;
}

ptdp::OptimizerConfig adam(bool distributed) {
  ptdp::OptimizerConfig c;
  c.distributed = distributed;
  c.bucket_elements = 40;
  return c;
}

// One rank's tables and optimizer under `s`.
struct Run {
  std::unique_ptr<ptdp::ProcessGroups> groups;
  std::unique_ptr<ParamTable> table;
  std::unique_ptr<ptdp::Optimizer> optimizer;
  Run(std::shared_ptr<ptdp::Runtime> rt, const Spec& s, bool experts) {
    groups = std::make_unique<ptdp::ProcessGroups>(rt, config_of(s, rt->world_size()));
    const ptdp::Layout& L = groups->layout();
    const ptdp::RankCoords k = L.coords(g_rank);
    table = std::make_unique<ParamTable>(make_table(L, k, k.pp, L.pipeline(), experts));
    table->allocate(ptdp::Device{}, s.dtype);
    optimizer = std::make_unique<ptdp::Optimizer>(std::vector<ParamTable*>{table.get()},
                                                  std::vector<std::vector<int>>{}, adam(s.distributed), *groups);
  }
};

void save(std::shared_ptr<ptdp::Runtime> rt, const Spec& s, const std::string& dir, bool experts) {
  Run run(rt, s, experts);
  run.table->initialize(kSeed);
  for (int k = 0; k < 2; ++k) {
    std::vector<float> whole(static_cast<std::size_t>(run.table->capacity()), 0.0f);
    for (int i = 0; i < run.table->size(); ++i) {
      const ParamInfo& p = run.table->info(i);
      const std::vector<float> v = state_values(p, k);
      std::copy(v.begin(), v.end(), whole.begin() + p.offset);
    }
    run.optimizer->set_state(0, k, whole.data());
  }
  ptdp::Optimizer::Counters c;
  c.steps = 5;
  run.optimizer->restore(c);
  ptdp::CheckpointState state;
  state.iteration = 5;
  nlohmann::json extra;
  extra["model"] = {{"synthetic", true}};
  ptdp::save_checkpoint_shards(dir, shards_of(*run.groups, *run.table, experts), run.optimizer.get(), extra, state);
}

void check_load(std::shared_ptr<ptdp::Runtime> rt, const Spec& s, const std::string& dir, bool experts) {
  Run run(rt, s, experts);
  bool model_checked = false;
  const ptdp::CheckpointState state = ptdp::load_checkpoint_shards(
      dir, shards_of(*run.groups, *run.table, experts), run.optimizer.get(),
      [&](const nlohmann::json& md, const std::string&) { model_checked = md.at("model").at("synthetic") == true; });
  expect(model_checked && state.iteration == 5 && run.optimizer->counters().steps == 5,
         "the model entry was handed to the check, iteration and counters restored");
  const std::vector<float> params = run.table->masters_to_host();
  const std::vector<float> m = run.optimizer->get_state(0, 0), v = run.optimizer->get_state(0, 1);
  int bad = 0;
  for (int i = 0; i < run.table->size(); ++i) {
    const ParamInfo& p = run.table->info(i);
    std::vector<float> want(static_cast<std::size_t>(p.local_shape.numel()));
    ptdp::init_param_slice(p, kSeed, want.data());
    const std::vector<float> want_m = state_values(p, 0), want_v = state_values(p, 1);
    for (std::size_t x = 0; x < want.size(); ++x) {
      const std::size_t e = static_cast<std::size_t>(p.offset) + x;
      if ((params[e] != want[x] || m[e] != want_m[x] || v[e] != want_v[x]) && bad++ < 3)
        expect(false, p.name + "[" + std::to_string(x) + "]: parameter " + std::to_string(params[e]) + " (want " +
                          std::to_string(want[x]) + "), exp_avg " + std::to_string(m[e]) + " (want " +
                          std::to_string(want_m[x]) + "), exp_avg_sq " + std::to_string(v[e]) + " (want " +
                          std::to_string(want_v[x]) + ")");
    }
  }
  expect(bad == 0, "every parameter and moment is the saved global tensor's slice");
}

// The files and the layout entry of the checkpoint saved under `s`.
void check_files(const Spec& s, const std::string& dir, bool experts) {
  const std::string iter = ptdp::checkpoint_iter_dir(dir, 5);
  std::ifstream in(iter + "/metadata.json");
  const nlohmann::json md = nlohmann::json::parse(in);
  const nlohmann::json& l = md.at("layout");
  expect(l.contains("expert_model_parallel_size") == experts && l.contains("expert_tensor_parallel_size") == experts,
         "metadata records e and etp exactly when there are experts");
  if (experts)
    expect(l.at("expert_model_parallel_size") == s.e && l.at("expert_tensor_parallel_size") == s.etp,
           "e and etp recorded");
  std::vector<std::string> want;
  for (int pr = 0; pr < s.p; ++pr)
    for (int tr = 0; tr < s.t; ++tr) want.push_back(ptdp::checkpoint_shard_name(tr, pr));
  for (int pr = 0; pr < s.p && experts; ++pr)
    for (int er = 0; er < s.e; ++er)
      for (int xr = 0; xr < s.etp; ++xr) want.push_back(ptdp::checkpoint_expert_shard_name(xr, pr, er));
  expect(md.at("files") == nlohmann::json(want), "files " + md.at("files").dump());
  for (const std::string& f : want) expect(std::filesystem::exists(iter + "/" + f), f + " was written");
  expect(!experts || ptdp::checkpoint_expert_shard_name(1, 0, 3) == "model_tp01_pp00_ep03.safetensors",
         "expert shard names");
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_checkpoint_experts WORK_DIR\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const std::string work = argv[1];
  {
    ptdp::RuntimeOptions o;
    o.timeout_s = 120;
    auto rt = ptdp::Runtime::create(o);
    g_rank = rt->world_rank();
    if (rt->world_size() != 8) {
      std::fprintf(stderr, "run with 8 ranks\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (g_rank == 0) std::filesystem::remove_all(work);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto bf16 = ptdp::DType::BF16, f32 = ptdp::DType::F32;
    const Spec a{2, 1, 2, 2, 2, 1, true, bf16}, b{1, 1, 8, 1, 4, 1, false, f32}, c{4, 1, 2, 1, 2, 2, true, f32},
        d{2, 2, 2, 1, 1, 2, false, bf16}, e1{1, 1, 8, 1, 1, 1, true, bf16};
    g_context = "saved at " + a.str();
    save(rt, a, work + "/a", true);
    if (g_rank == 0) check_files(a, work + "/a", true);
    for (const Spec& to : {a, b, c, d, e1}) {
      g_context = "saved at " + a.str() + ", loaded at " + to.str();
      check_load(rt, to, work + "/a", true);
    }
    g_context = "saved at " + c.str();
    save(rt, c, work + "/c", true);
    if (g_rank == 0) check_files(c, work + "/c", true);
    g_context = "saved at " + c.str() + ", loaded at " + a.str();
    check_load(rt, a, work + "/c", true);
    g_context = "dense tables saved at " + a.str();
    save(rt, a, work + "/dense", false);
    if (g_rank == 0) check_files(a, work + "/dense", false);
    g_context = "dense tables saved at " + a.str() + ", loaded at " + b.str();
    check_load(rt, b, work + "/dense", false);
  }
  int counts[2] = {g_failed, g_passed}, total[2] = {0, 0};
  MPI_Allreduce(counts, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%d passed, %d failed\n", total[1], total[0]);
  MPI_Finalize();
  return total[0] == 0 && total[1] > 0 ? 0 : 1;
}
