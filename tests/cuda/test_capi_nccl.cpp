// GPU tensors through the communication C API in a world of one process without MPI (label
// gpu): with use_nccl = 1 every collective and a send/receive to itself runs on NCCL (created
// for each group on first use) and gives the closed-form result; with use_nccl = 0 the same call
// is refused as unsupported, naming the group and the device. Skipped without a GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

#define OK(call)                                \
  do {                                          \
    const ptdp_status rc_ = (call);             \
    INFO(#call << ": " << ptdp_last_error());   \
    REQUIRE(rc_ == PTDP_SUCCESS);               \
  } while (0)

/// The single-process world, or the skip code without a GPU or without NCCL in the build.
struct World : sp::World {
  explicit World(int32_t use_nccl) : sp::World(use_nccl) {
    int32_t nccl = 0;
    OK(ptdp_has_feature(PTDP_FEATURE_NCCL, &nccl));
    if (gpu < 0 || !nccl) {
      WARN((gpu < 0 ? "no CUDA device" : "this build has no NCCL") << ": skipping");
      std::exit(77);
    }
  }
};

struct GpuTensor {
  ptdp_tensor t = nullptr;
  explicit GpuTensor(const std::vector<float>& v) {
    ptdp_tensor_options o;
    OK(ptdp_tensor_options_init(&o));
    o.device = PTDP_DEVICE_CUDA;
    const int64_t n = static_cast<int64_t>(v.size());
    OK(ptdp_tensor_create(&o, 1, &n, v.data(), v.size() * sizeof(float), &t));
  }
  ~GpuTensor() { ptdp_tensor_destroy(t); }
  std::vector<float> read() const {
    int64_t n = 0;
    REQUIRE(ptdp_tensor_numel(t, &n) == PTDP_SUCCESS);
    std::vector<float> v(static_cast<std::size_t>(n));
    REQUIRE(ptdp_tensor_copy_to_host(t, v.data(), v.size() * sizeof(float)) == PTDP_SUCCESS);
    return v;
  }
};

}  // namespace

TEST_CASE("GPU tensors in a world of one go through NCCL and give the closed-form results", "[gpu][nccl][capi]") {
  World w(1);
  const std::vector<float> x = {1.5f, -2.0f, 3.25f, 4.0f};
  GpuTensor a(x), b({0, 0, 0, 0});
  OK(ptdp_all_reduce(w.groups, PTDP_GROUP_TENSOR, a.t, PTDP_REDUCE_SUM, nullptr));
  CHECK(a.read() == x);
  OK(ptdp_all_reduce(w.groups, PTDP_GROUP_DATA, a.t, PTDP_REDUCE_AVG, nullptr));
  CHECK(a.read() == x);
  OK(ptdp_all_gather(w.groups, PTDP_GROUP_WORLD, a.t, b.t, nullptr));
  CHECK(b.read() == x);
  GpuTensor c({0, 0, 0, 0});
  OK(ptdp_reduce_scatter(w.groups, PTDP_GROUP_PIPELINE, a.t, c.t, PTDP_REDUCE_MAX, nullptr));
  CHECK(c.read() == x);
  OK(ptdp_broadcast(w.groups, PTDP_GROUP_MODEL, a.t, 0, nullptr));
  CHECK(a.read() == x);
  GpuTensor d({0, 0, 0, 0});
  const ptdp_p2p_op ops[2] = {{PTDP_P2P_SEND, a.t, 0, 3}, {PTDP_P2P_RECV, d.t, 0, 3}};
  ptdp_work work = nullptr;
  OK(ptdp_batch_send_recv(w.groups, PTDP_GROUP_PIPELINE, ops, 2, &work));
  OK(ptdp_work_wait(work));
  OK(ptdp_work_destroy(work));
  CHECK(d.read() == x);
  OK(ptdp_barrier(w.groups, PTDP_GROUP_TENSOR, nullptr));
}

TEST_CASE("Without NCCL a GPU tensor collective is refused, naming the group and the device", "[gpu][nccl][capi]") {
  World w(0);
  GpuTensor a({1, 2});
  CHECK(ptdp_all_reduce(w.groups, PTDP_GROUP_TENSOR, a.t, PTDP_REDUCE_SUM, nullptr) == PTDP_ERR_UNSUPPORTED);
  const std::string msg = ptdp_last_error();
  INFO(msg);
  CHECK(msg.find("tensor group") != std::string::npos);
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(msg.find("use_nccl = 0") != std::string::npos);
}
