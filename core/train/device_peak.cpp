#include "core/train/device_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"
#ifdef PTDP_HAVE_CUDA
#include "kernels/cuda/cuda_probe.h"
#endif

namespace ptdp {

namespace {

// Dense (no sparsity) tensor-core and plain fp32 peaks from NVIDIA's datasheets, SXM parts.
struct Datasheet {
  const char* name;  // matched against the device description
  double bf16, fp32;
};
[[maybe_unused]] constexpr Datasheet kGpus[] = {  // read only with CUDA
    {"H200", 989e12, 67e12},
    {"H100", 989e12, 67e12},
    {"A100", 312e12, 19.5e12},
};

DevicePeak cpu_peak(double seconds) {
  constexpr int64_t n = 512;
  const std::size_t nn = static_cast<std::size_t>(n * n);
  std::vector<float> a(nn), b(nn), c(nn);
  for (std::size_t i = 0; i < nn; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    b[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
  }
  GemmDesc g;
  g.m = g.n = g.k = n;
  g.lda = g.ldb = g.ldc = n;
  Backend& be = cpu_backend();
  using Clock = std::chrono::steady_clock;
  be.gemm(g, a.data(), b.data(), c.data());  // warm-up: threads, caches, page faults
  double best = 1e30;
  const auto start = Clock::now();
  for (int calls = 0; calls < 3 || std::chrono::duration<double>(Clock::now() - start).count() < seconds; ++calls) {
    const auto t0 = Clock::now();
    be.gemm(g, a.data(), b.data(), c.data());
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    if (calls > 1000) break;
  }
  DevicePeak p;
  p.flops = 2.0 * static_cast<double>(n) * n * n / best;
  p.source = "measured: f32 GEMM 512^3 on the CPU, " + std::to_string(omp_get_max_threads()) + " threads";
  return p;
}

}  // namespace

DevicePeak device_peak(Device device, DType precision, double seconds) {
  if (device.type == DeviceType::CPU) return cpu_peak(seconds);
  DevicePeak p;
#ifdef PTDP_HAVE_CUDA
  const std::string what = cuda::device_description(device.index);
  for (const Datasheet& d : kGpus) {
    if (what.find(d.name) == std::string::npos) continue;
    const bool tensor_cores = precision == DType::BF16 || precision == DType::F16;
    p.flops = tensor_cores ? d.bf16 : d.fp32;
    p.source = std::string("datasheet: ") + what + (tensor_cores ? ", bf16/f16 dense" : ", fp32");
    return p;
  }
  p.source = "unknown: " + what + " is not in ptdp's table of GPU peaks (give --peak-tflops)";
#else
  (void)precision;
  p.source = "unknown";
#endif
  return p;
}

DevicePeak run_device_peak(double peak_tflops, Communicator& world, Device device, DType precision) {
  if (peak_tflops > 0) return DevicePeak{peak_tflops * 1e12, "--peak-tflops"};
  world.barrier()->wait();
  const DevicePeak peak = device_peak(device, precision);
  float gflops = static_cast<float>(peak.flops * 1e-9);
  world.all_reduce(Tensor::borrow(&gflops, {1}, DType::F32), ReduceOp::Avg)->wait();
  return DevicePeak{static_cast<double>(gflops) * 1e9, peak.source + (world.size() > 1 ? ", mean of the ranks" : "")};
}

}  // namespace ptdp
