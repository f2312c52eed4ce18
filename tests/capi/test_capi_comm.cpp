// Runtime, groups and collectives through the C API in one process: the Megatron layout
// example, a world of one, and bad inputs (the multi-rank behaviour is tested under mpiexec in
// tests/comm).
#include <catch2/catch.hpp>

#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ptdp/ptdp.h"

namespace {

std::vector<int32_t> layout(int32_t w, int32_t t, int32_t p, int32_t rank, ptdp_group_kind kind) {
  ptdp_parallel_options o;
  ptdp_parallel_options_init(&o);
  o.tensor_model_parallel_size = t;
  o.pipeline_model_parallel_size = p;
  std::vector<int32_t> out(64, -7);
  int32_t n = -1;
  REQUIRE(ptdp_layout_members(&o, w, rank, kind, out.data(), 64, &n) == PTDP_SUCCESS);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::string err() { return ptdp_last_error(); }

}  // namespace

TEST_CASE("ptdp_layout_members reproduces Megatron's 16-rank example", "[capi][layout]") {
  using V = std::vector<int32_t>;
  for (int32_t r = 0; r < 16; ++r) {
    const int32_t tp0 = r / 2 * 2;
    CHECK(layout(16, 2, 4, r, PTDP_GROUP_TENSOR) == V{tp0, tp0 + 1});
  }
  CHECK(layout(16, 2, 4, 0, PTDP_GROUP_PIPELINE) == V{0, 4, 8, 12});
  CHECK(layout(16, 2, 4, 13, PTDP_GROUP_PIPELINE) == V{1, 5, 9, 13});
  CHECK(layout(16, 2, 4, 6, PTDP_GROUP_PIPELINE) == V{2, 6, 10, 14});
  CHECK(layout(16, 2, 4, 15, PTDP_GROUP_PIPELINE) == V{3, 7, 11, 15});
  const V data[] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
  for (const V& g : data)
    for (int32_t r : g) CHECK(layout(16, 2, 4, r, PTDP_GROUP_DATA) == g);
  CHECK(layout(16, 2, 4, 3, PTDP_GROUP_EMBEDDING) == V{3, 15});
  CHECK(layout(16, 2, 4, 7, PTDP_GROUP_EMBEDDING).empty());
  CHECK(layout(16, 2, 4, 7, PTDP_GROUP_WORLD).size() == 16);
  CHECK(layout(16, 2, 4, 7, PTDP_GROUP_MODEL) == V{2, 3, 6, 7, 10, 11, 14, 15});
}

TEST_CASE("ptdp_layout_members: the V placement's embedding group is the first stage alone", "[capi][layout]") {
  ptdp_parallel_options o;
  ptdp_parallel_options_init(&o);
  CHECK(o.pipeline_chunk_placement == PTDP_CHUNK_PLACEMENT_ROUND_ROBIN);
  o.tensor_model_parallel_size = 2;
  o.pipeline_model_parallel_size = 4;
  o.virtual_pipeline_model_parallel_size = 2;
  o.pipeline_chunk_placement = PTDP_CHUNK_PLACEMENT_V;
  int32_t buf[16], n = -1;
  // Rank 3 is on the first stage (pp 0): the first and last chunk both live there.
  REQUIRE(ptdp_layout_members(&o, 16, 3, PTDP_GROUP_EMBEDDING, buf, 16, &n) == PTDP_SUCCESS);
  CHECK(std::vector<int32_t>(buf, buf + n) == std::vector<int32_t>{3});
  REQUIRE(ptdp_layout_members(&o, 16, 15, PTDP_GROUP_EMBEDDING, buf, 16, &n) == PTDP_SUCCESS);
  CHECK(n == 0);
  o.virtual_pipeline_model_parallel_size = 3;
  CHECK(ptdp_layout_members(&o, 16, 3, PTDP_GROUP_EMBEDDING, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("the V chunk placement holds 2 model chunks per pipeline rank, got virtual pipeline size 3") !=
        std::string::npos);
}

TEST_CASE("invalid layouts name the numbers", "[capi][layout][errors]") {
  ptdp_parallel_options o;
  ptdp_parallel_options_init(&o);
  int32_t buf[16], n = -1;
  o.tensor_model_parallel_size = 3;
  CHECK(ptdp_layout_members(&o, 8, 0, PTDP_GROUP_TENSOR, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("world size 8 is not divisible by tensor size 3 x pipeline size 1 = 3") != std::string::npos);
  o.tensor_model_parallel_size = 1;
  o.virtual_pipeline_model_parallel_size = 2;
  CHECK(ptdp_layout_members(&o, 8, 0, PTDP_GROUP_TENSOR, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("virtual pipeline size 2 needs pipeline parallel size > 1") != std::string::npos);
  o.virtual_pipeline_model_parallel_size = 1;
  o.pipeline_model_parallel_size = 0;
  CHECK(ptdp_layout_members(&o, 8, 0, PTDP_GROUP_TENSOR, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("options->pipeline_model_parallel_size = 0 is not > 0") != std::string::npos);
  CHECK(ptdp_layout_members(nullptr, 8, 8, PTDP_GROUP_TENSOR, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("world_rank = 8") != std::string::npos);
  CHECK(ptdp_layout_members(nullptr, 8, 0, static_cast<ptdp_group_kind>(13), buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("kind = 13") != std::string::npos);
  CHECK(ptdp_layout_members(nullptr, 8, 0, PTDP_GROUP_WORLD, buf, 4, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("capacity = 4") != std::string::npos);
  CHECK(ptdp_layout_members(nullptr, 8, 0, PTDP_GROUP_WORLD, buf, 16, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("count is NULL") != std::string::npos);
  CHECK(n == -1);  // never written by a failing call
}

TEST_CASE("ptdp_layout_chunk_layers follows pipeline_model_parallel_layout, and refuses a bad one by name",
          "[capi][layout]") {
  ptdp_parallel_options o;
  REQUIRE(ptdp_parallel_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.pipeline_model_parallel_layout == nullptr);
  o.pipeline_model_parallel_size = 2;
  o.pipeline_model_parallel_layout = "Et*3|(tt|)*2,tL";  // v = 2 from its 4 entries
  std::vector<std::pair<int32_t, int32_t>> got;
  for (int32_t j = 0; j < 2; ++j) {
    for (int32_t r = 0; r < 2; ++r) {
      int32_t first = -1, count = -1;
      REQUIRE(ptdp_layout_chunk_layers(&o, 8, r, j, &first, &count) == PTDP_SUCCESS);
      got.emplace_back(first, count);
    }
  }
  CHECK(got == std::vector<std::pair<int32_t, int32_t>>{{0, 3}, {3, 2}, {5, 2}, {7, 1}});
  int32_t first = -1, count = -1;
  CHECK(ptdp_layout_chunk_layers(&o, 9, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: Number of decoder layers 8 must match num_layers 9 "
                 "(pipeline_model_parallel_layout \"Et*3|(tt|)*2,tL\")");
  o.pipeline_model_parallel_layout = "Ett|tt|L";
  CHECK(ptdp_layout_chunk_layers(&o, 4, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().rfind("ptdp_layout_chunk_layers: options->pipeline_model_parallel_layout: "
                    "pipeline_model_parallel_layout must be divisible by pipeline_model_parallel_size (3 stages",
                    0) == 0);
  o.pipeline_model_parallel_layout = "Ett|ttL";
  o.virtual_pipeline_model_parallel_size = 2;  // disagrees with the layout's v = 1
  CHECK(ptdp_layout_chunk_layers(&o, 4, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: pipeline_model_parallel_layout \"Ett|ttL\" has 2 stages, 1 per pipeline "
                 "rank, but the virtual pipeline size is 2");
  CHECK(first == -1);
  CHECK(count == -1);
}

TEST_CASE("ptdp_layout_chunk_layers gives Megatron-Core's uneven pipeline offsets", "[capi][layout]") {
  ptdp_parallel_options o;
  REQUIRE(ptdp_parallel_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.decoder_first_pipeline_num_layers == 0);
  CHECK(o.decoder_last_pipeline_num_layers == 0);
  o.pipeline_model_parallel_size = 4;
  o.virtual_pipeline_model_parallel_size = 2;
  const auto chunks = [&o](int32_t layers) {
    std::vector<std::pair<int32_t, int32_t>> out;  // (first layer, count) of (rank, stage) in stage-major order
    for (int32_t j = 0; j < 2; ++j) {
      for (int32_t r = 0; r < 4; ++r) {
        int32_t first = -1, count = -1;
        REQUIRE(ptdp_layout_chunk_layers(&o, layers, r, j, &first, &count) == PTDP_SUCCESS);
        out.emplace_back(first, count);
      }
    }
    return out;
  };
  using Chunks = std::vector<std::pair<int32_t, int32_t>>;
  // Megatron-Core's test_get_layer_offset_parametrized: 30 layers as 8 + 6 + 6 + 10.
  o.decoder_first_pipeline_num_layers = 8;
  o.decoder_last_pipeline_num_layers = 10;
  CHECK(chunks(30) == Chunks{{0, 4}, {4, 3}, {7, 3}, {10, 5}, {15, 4}, {19, 3}, {22, 3}, {25, 5}});
  // 26 layers, 8 on the first stage.
  o.decoder_last_pipeline_num_layers = 0;
  CHECK(chunks(26) == Chunks{{0, 4}, {4, 3}, {7, 3}, {10, 3}, {13, 4}, {17, 3}, {20, 3}, {23, 3}});
  // Even: 24 layers.
  o.decoder_first_pipeline_num_layers = 0;
  CHECK(chunks(24) == Chunks{{0, 3}, {3, 3}, {6, 3}, {9, 3}, {12, 3}, {15, 3}, {18, 3}, {21, 3}});
  // Outputs may be NULL.
  CHECK(ptdp_layout_chunk_layers(&o, 24, 3, 1, nullptr, nullptr) == PTDP_SUCCESS);
  CHECK(ptdp_layout_chunk_layers(nullptr, 5, 0, 0, nullptr, nullptr) == PTDP_SUCCESS);

  // Refusals name the numbers, Megatron's words for uneven splits; nothing is written.
  int32_t first = -1, count = -1;
  o.decoder_first_pipeline_num_layers = 7;
  CHECK(ptdp_layout_chunk_layers(&o, 30, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: number of layers at first stage: 7 must be divisible by virtual "
                 "pipeline parallel degree 2");
  o.decoder_first_pipeline_num_layers = 8;
  o.decoder_last_pipeline_num_layers = 10;
  CHECK(ptdp_layout_chunk_layers(&o, 31, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: number of layers at middle stage: 13 must be divisible by the middle "
                 "pipeline model parallel size 2");
  o.decoder_last_pipeline_num_layers = 12;
  CHECK(ptdp_layout_chunk_layers(&o, 30, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: number of layers on each middle pipeline rank: 5 must be divisible by "
                 "virtual pipeline parallel degree 2");
  o.decoder_last_pipeline_num_layers = 10;
  CHECK(ptdp_layout_chunk_layers(&o, 30, 4, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: pipeline_rank = 4 is outside [0, 4)");
  CHECK(ptdp_layout_chunk_layers(&o, 30, 0, 2, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: virtual_stage = 2 is outside [0, 2)");
  CHECK(ptdp_layout_chunk_layers(&o, 0, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: num_layers = 0 is not > 0");
  o.decoder_first_pipeline_num_layers = -8;
  CHECK(ptdp_layout_chunk_layers(&o, 30, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: options->decoder_first_pipeline_num_layers = -8 is not a layer count "
                 "(>= 0; 0: an even split)");
  o.decoder_first_pipeline_num_layers = 0;
  o.decoder_last_pipeline_num_layers = 0;
  CHECK(ptdp_layout_chunk_layers(&o, 30, 0, 0, &first, &count) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_layout_chunk_layers: num_layers 30 cannot be split evenly over p=4 x v=2 = 8 model chunks");
  CHECK(first == -1);
  CHECK(count == -1);
}

TEST_CASE("a world of one without MPI runs every collective as a local operation", "[capi][comm]") {
  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.use_mpi = 0;
  ptdp_runtime rt = nullptr;
  REQUIRE(ptdp_runtime_create(&ro, &rt) == PTDP_SUCCESS);
  int32_t rank = -1, size = -1, gpu = -2;
  REQUIRE(ptdp_runtime_world(rt, &rank, &size) == PTDP_SUCCESS);
  CHECK((rank == 0 && size == 1));
  REQUIRE(ptdp_runtime_gpu(rt, &gpu) == PTDP_SUCCESS);
  CHECK(gpu >= -1);
  ptdp_groups g = nullptr;
  REQUIRE(ptdp_groups_create(rt, nullptr, &g) == PTDP_SUCCESS);
  for (ptdp_group_kind k : {PTDP_GROUP_WORLD, PTDP_GROUP_TENSOR, PTDP_GROUP_PIPELINE, PTDP_GROUP_DATA,
                            PTDP_GROUP_MODEL, PTDP_GROUP_EMBEDDING}) {
    int32_t r = -1, s = -1, n = -1, m[4] = {-1, -1, -1, -1};
    REQUIRE(ptdp_groups_rank(g, k, &r) == PTDP_SUCCESS);
    REQUIRE(ptdp_groups_size(g, k, &s) == PTDP_SUCCESS);
    REQUIRE(ptdp_groups_members(g, k, m, 4, &n) == PTDP_SUCCESS);
    CHECK((r == 0 && s == 1 && n == 1 && m[0] == 0));
  }
  const float in[4] = {1, 2, 3, 4};
  const int64_t four = 4, two = 2;
  ptdp_tensor t = nullptr, out = nullptr;
  REQUIRE(ptdp_tensor_create(nullptr, 1, &four, in, sizeof in, &t) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_create(nullptr, 1, &four, nullptr, 0, &out) == PTDP_SUCCESS);
  REQUIRE(ptdp_all_reduce(g, PTDP_GROUP_DATA, t, PTDP_REDUCE_AVG, nullptr) == PTDP_SUCCESS);
  REQUIRE(ptdp_all_gather(g, PTDP_GROUP_TENSOR, t, out, nullptr) == PTDP_SUCCESS);
  float back[4];
  REQUIRE(ptdp_tensor_copy_to_host(out, back, sizeof back) == PTDP_SUCCESS);
  CHECK(std::vector<float>(back, back + 4) == std::vector<float>{1, 2, 3, 4});
  // A send to oneself meets its receive in the same batch.
  ptdp_tensor half = nullptr;
  REQUIRE(ptdp_tensor_create(nullptr, 1, &two, nullptr, 0, &half) == PTDP_SUCCESS);
  ptdp_tensor recv = nullptr;
  REQUIRE(ptdp_tensor_create(nullptr, 1, &four, nullptr, 0, &recv) == PTDP_SUCCESS);
  ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, t, 0, 3}, {PTDP_P2P_RECV, recv, 0, 3}};
  ptdp_work w = nullptr;
  REQUIRE(ptdp_batch_send_recv(g, PTDP_GROUP_PIPELINE, ops, 2, &w) == PTDP_SUCCESS);
  int32_t done = 0;
  REQUIRE(ptdp_work_test(w, &done) == PTDP_SUCCESS);
  CHECK(done == 1);
  REQUIRE(ptdp_work_wait(w) == PTDP_SUCCESS);
  // Groups with live work cannot be destroyed; the runtime with live groups neither.
  CHECK(ptdp_groups_destroy(g) == PTDP_ERR_INVALID_STATE);
  CHECK(err().find("ptdp_work") != std::string::npos);
  CHECK(ptdp_runtime_destroy(rt) == PTDP_ERR_INVALID_STATE);
  CHECK(err().find("ptdp_groups") != std::string::npos);
  REQUIRE(ptdp_work_destroy(w) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_copy_to_host(recv, back, sizeof back) == PTDP_SUCCESS);
  CHECK(std::vector<float>(back, back + 4) == std::vector<float>{1, 2, 3, 4});
  // An unmatched send to oneself would never complete: refused up front.
  CHECK(ptdp_send(g, PTDP_GROUP_PIPELINE, t, 0, 0, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("no matching receive") != std::string::npos);

  // Bad inputs name the argument.
  CHECK(ptdp_all_reduce(g, PTDP_GROUP_DATA, t, static_cast<ptdp_reduce_op>(7), nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("op = 7") != std::string::npos);
  CHECK(ptdp_all_reduce(g, static_cast<ptdp_group_kind>(-1), t, PTDP_REDUCE_SUM, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("kind = -1") != std::string::npos);
  CHECK(ptdp_all_reduce(nullptr, PTDP_GROUP_DATA, t, PTDP_REDUCE_SUM, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("groups is NULL") != std::string::npos);
  CHECK(ptdp_all_gather(g, PTDP_GROUP_DATA, t, half, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("group size 1 x 4") != std::string::npos);
  CHECK(ptdp_broadcast(g, PTDP_GROUP_DATA, t, 1, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("root = 1") != std::string::npos);
  CHECK(ptdp_send(g, PTDP_GROUP_DATA, t, 0, -1, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("tag = -1") != std::string::npos);
  ptdp_p2p_op bad[1] = {{static_cast<ptdp_p2p_kind>(5), t, 0, 0}};
  CHECK(ptdp_batch_send_recv(g, PTDP_GROUP_DATA, bad, 1, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("ops[0].kind = 5") != std::string::npos);
  CHECK(ptdp_batch_send_recv(g, PTDP_GROUP_DATA, nullptr, 1, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("ops is NULL") != std::string::npos);
  ptdp_tensor ints = nullptr;
  ptdp_tensor_options io;
  ptdp_tensor_options_init(&io);
  io.dtype = PTDP_DTYPE_I32;
  REQUIRE(ptdp_tensor_create(&io, 1, &four, nullptr, 0, &ints) == PTDP_SUCCESS);
  CHECK(ptdp_all_reduce(g, PTDP_GROUP_DATA, ints, PTDP_REDUCE_AVG, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("avg needs a floating tensor") != std::string::npos);
  ptdp_work never = reinterpret_cast<ptdp_work>(0x1);
  ptdp_work keep = never;
  CHECK(ptdp_all_reduce(g, PTDP_GROUP_DATA, nullptr, PTDP_REDUCE_SUM, &keep) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(keep == never);  // outputs untouched on error

  for (ptdp_tensor x : {t, out, half, recv, ints}) REQUIRE(ptdp_tensor_destroy(x) == PTDP_SUCCESS);
  REQUIRE(ptdp_groups_destroy(g) == PTDP_SUCCESS);
  REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
}

TEST_CASE("runtime options are validated", "[capi][comm][errors]") {
  ptdp_runtime rt = nullptr;
  ptdp_runtime_options ro;
  ptdp_runtime_options_init(&ro);
  ro.use_mpi = 0;
  ro.verify_collectives = 3;
  CHECK(ptdp_runtime_create(&ro, &rt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("options->verify_collectives = 3") != std::string::npos);
  ro.verify_collectives = 1;
  ro.use_mpi = 2;
  CHECK(ptdp_runtime_create(&ro, &rt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("options->use_mpi = 2") != std::string::npos);
  std::memset(&ro, 0, sizeof ro);
  CHECK(ptdp_runtime_create(&ro, &rt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("ptdp_runtime_options_init") != std::string::npos);
  CHECK(ptdp_runtime_create(nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("out is NULL") != std::string::npos);
  CHECK(rt == nullptr);
  CHECK(ptdp_runtime_world(nullptr, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_groups_create(nullptr, nullptr, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("runtime is NULL") != std::string::npos);
}

TEST_CASE("the CPU engine's threads: cpu_threads, OMP_NUM_THREADS, this process's CPUs", "[capi][comm]") {
  ptdp_runtime_options ro;
  REQUIRE(ptdp_runtime_options_init(&ro) == PTDP_SUCCESS);
  CHECK(ro.cpu_threads == 0);
  CHECK(ro.reserved0 == 0);
  ro.use_mpi = 0;
  auto threads_of = [&](const ptdp_runtime_options& o) {
    ptdp_runtime rt = nullptr;
    REQUIRE(ptdp_runtime_create(&o, &rt) == PTDP_SUCCESS);
    int32_t n = -7;
    REQUIRE(ptdp_runtime_cpu_threads(rt, &n) == PTDP_SUCCESS);
    REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
    return n;
  };
  for (int32_t want : {1, 5, 2}) {
    ro.cpu_threads = want;
    CHECK(threads_of(ro) == want);
  }
  // The default: OMP_NUM_THREADS when set, else every CPU of the affinity mask (a world of one
  // shares them with nobody). The last runtime leaves the process at its default.
  ro.cpu_threads = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  const char* env = std::getenv("OMP_NUM_THREADS");
  CHECK(threads_of(ro) == (env != nullptr && *env != '\0' ? std::atoi(env) : CPU_COUNT(&set)));

  ro.cpu_threads = -1;
  ptdp_runtime rt = nullptr;
  CHECK(ptdp_runtime_create(&ro, &rt) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_runtime_create: options->cpu_threads = -1 is negative (0: OMP_NUM_THREADS, else the "
                 "node's CPUs over its ranks)");
  CHECK(rt == nullptr);
  CHECK(ptdp_runtime_create_from_fortran(&ro, 0, &rt) == PTDP_ERR_INVALID_ARGUMENT);  // before the communicator
  CHECK(err().find("options->cpu_threads = -1") != std::string::npos);

  ro.cpu_threads = 0;
  REQUIRE(ptdp_runtime_create(&ro, &rt) == PTDP_SUCCESS);
  CHECK(ptdp_runtime_cpu_threads(rt, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err() == "ptdp_runtime_cpu_threads: threads is NULL");
  int32_t n = -7;
  CHECK(ptdp_runtime_cpu_threads(nullptr, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("runtime is NULL") != std::string::npos);
  CHECK(n == -7);
  REQUIRE(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
}

TEST_CASE("ptdp_layout_members: context parallelism in Megatron's tp-cp-dp-pp order", "[capi][layout]") {
  using V = std::vector<int32_t>;
  ptdp_parallel_options o;
  ptdp_parallel_options_init(&o);
  CHECK(o.context_parallel_size == 1);  // the default
  o.tensor_model_parallel_size = 2;
  o.pipeline_model_parallel_size = 2;
  o.context_parallel_size = 2;
  const auto members = [&o](int32_t rank, ptdp_group_kind kind) {
    std::vector<int32_t> out(16, -7);
    int32_t n = -1;
    REQUIRE(ptdp_layout_members(&o, 16, rank, kind, out.data(), 16, &n) == PTDP_SUCCESS);
    out.resize(static_cast<std::size_t>(n));
    return out;
  };
  // rank = ((pp * d + dp) * c + cp) * t + tp with t = c = d = p = 2.
  CHECK(members(5, PTDP_GROUP_TENSOR) == V{4, 5});
  CHECK(members(5, PTDP_GROUP_CONTEXT) == V{5, 7});
  CHECK(members(5, PTDP_GROUP_DATA) == V{1, 5});
  CHECK(members(5, PTDP_GROUP_DATA_CONTEXT) == V{1, 3, 5, 7});
  CHECK(members(5, PTDP_GROUP_PIPELINE) == V{5, 13});
  CHECK(members(5, PTDP_GROUP_MODEL) == V{4, 5, 12, 13});
  o.context_parallel_size = 1;  // the context group is the rank alone, data+context the data group
  CHECK(members(5, PTDP_GROUP_CONTEXT) == V{5});
  CHECK(members(5, PTDP_GROUP_DATA_CONTEXT) == members(5, PTDP_GROUP_DATA));
  int32_t buf[16], n = -1;
  o.context_parallel_size = 0;
  CHECK(ptdp_layout_members(&o, 16, 0, PTDP_GROUP_TENSOR, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("options->context_parallel_size = 0") != std::string::npos);
  o.context_parallel_size = 3;
  CHECK(ptdp_layout_members(&o, 16, 0, PTDP_GROUP_TENSOR, buf, 16, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(err().find("context parallel size 3") != std::string::npos);
  CHECK(n == -1);
}
