// NCCL communicators on the GPU: every collective and a self send/receive on borrowed device
// memory, checked against closed-form values (one rank: one GPU is all a test machine has).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "core/comm/nccl/nccl_communicator.h"
#include "core/comm/runtime.h"
#include "core/parallel/groups.h"
#include "kernels/cuda/cuda_probe.h"

namespace {

void require_gpu() {
  if (ptdp::cuda::device_count() == 0) {
    WARN("no CUDA device: skipping");
    std::exit(77);
  }
}

struct DeviceBuffer {
  float* p = nullptr;
  explicit DeviceBuffer(std::size_t n) { REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  void upload(const std::vector<float>& v) { REQUIRE(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess); }
  std::vector<float> download(std::size_t n) const {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

}  // namespace

TEST_CASE("NCCL collectives on one GPU give the closed-form results", "[gpu][nccl]") {
  require_gpu();
  INFO("NCCL " << ptdp::nccl_version() << " on " << ptdp::cuda::device_description(0));
  // A world of one without MPI (the GPU machine has no Open MPI): NCCL serves its own GPU.
  auto rt = ptdp::Runtime::create_self(ptdp::RuntimeOptions{});
  REQUIRE_FALSE(rt->uses_mpi());
  REQUIRE(rt->gpu() == 0);
  REQUIRE(rt->nccl_enabled());
  ptdp::ProcessGroups groups(rt, ptdp::ParallelConfig{0, 1, 1, 1});
  const ptdp::Device gpu{ptdp::DeviceType::CUDA, 0};
  ptdp::Communicator& c = groups.comm_for(ptdp::GroupKind::Tensor, gpu);
  CHECK(c.name().find("nccl") != std::string::npos);

  const std::vector<float> x = {1, 2, 3, 4};
  DeviceBuffer a(4), b(4);
  a.upload(x);
  auto ta = ptdp::Tensor::borrow(a.p, {4}, ptdp::DType::F32, gpu);
  auto tb = ptdp::Tensor::borrow(b.p, {4}, ptdp::DType::F32, gpu);
  c.all_reduce(ta, ptdp::ReduceOp::Sum)->wait();
  CHECK(a.download(4) == x);
  c.all_reduce(ta, ptdp::ReduceOp::Avg)->wait();
  CHECK(a.download(4) == x);
  c.all_gather(ta, tb)->wait();
  CHECK(b.download(4) == x);
  c.reduce_scatter(ta, tb, ptdp::ReduceOp::Max)->wait();
  CHECK(b.download(4) == x);
  c.broadcast(ta, 0)->wait();
  auto w = c.batch_p2p({{ptdp::P2POp::Kind::Send, ta, 0, 0}, {ptdp::P2POp::Kind::Recv, tb, 0, 0}});
  w->wait();
  CHECK(b.download(4) == x);
  c.barrier()->wait();
  // CPU tensors of the same group still go through the host communicator.
  CHECK(&groups.comm_for(ptdp::GroupKind::Tensor, ptdp::Device{}) != &c);
  // A host tensor handed to the NCCL communicator is refused with a message.
  std::vector<float> host(4);
  CHECK_THROWS_AS(c.all_reduce(ptdp::Tensor::borrow(host.data(), {4}, ptdp::DType::F32), ptdp::ReduceOp::Sum),
                  ptdp::Error);
}
