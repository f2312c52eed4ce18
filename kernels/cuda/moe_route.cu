// Token routing to expert-sorted rows on the device: a stable counting sort in three kernels.
//   1. route_count_kernel: per chunk of kChunk slots, each expert's slot count (shared-memory
//      counters; integer atomics, so the counts do not depend on the order they run in), and
//      the first slot holding an index outside [-1, experts);
//   2. route_offsets_kernel: each expert's total, its first row (the counts' exclusive prefix
//      sum) and each (expert, chunk)'s first row;
//   3. route_place_kernel: one warp per chunk walks its slots in order, 32 at a time; lanes
//      routed to the same expert are ranked by __match_any_sync, so a slot's row is its chunk's
//      first row for the expert plus the slots before it in the chunk: slot order is kept.
// The counts and the first bad slot come back to the host between kernels 2 and 3 (the op's one
// wait for the device), so a refused call writes nothing to row_of, as on the CPU.
#include <climits>
#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

constexpr int64_t kChunk = 1024;  // slots per chunk
constexpr int kWarp = 32;

// hist [experts, chunks]: slots of chunk b routed to expert e. bad: the smallest bad slot.
__global__ void route_count_kernel(const int32_t* idx, int64_t slots, int64_t experts,
                                   int64_t chunks, int32_t* hist, unsigned long long* bad) {
  extern __shared__ int32_t count[];  // [experts]
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t last = first + kChunk < slots ? first + kChunk : slots;
  for (int64_t s = first + threadIdx.x; s < last; s += blockDim.x) {
    const int32_t e = idx[s];
    if (e < -1 || e >= experts) {
      atomicMin(bad, static_cast<unsigned long long>(s));
    } else if (e >= 0) {
      atomicAdd(&count[e], 1);
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    hist[e * chunks + blockIdx.x] = count[e];
  }
}

// One block: counts[e] = sum over chunks; hist[e, b] becomes the first row of (e, b).
// start is scratch [experts].
__global__ void route_offsets_kernel(int32_t* hist, int64_t experts, int64_t chunks,
                                     int64_t* counts, int64_t* start) {
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t total = 0;
    for (int64_t b = 0; b < chunks; ++b) total += hist[e * chunks + b];
    counts[e] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t row = 0;
    for (int64_t e = 0; e < experts; ++e) {
      start[e] = row;
      row += counts[e];
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t row = start[e];
    for (int64_t b = 0; b < chunks; ++b) {
      const int32_t n = hist[e * chunks + b];
      hist[e * chunks + b] = static_cast<int32_t>(row);
      row += n;
    }
  }
}

// One warp per chunk; next [experts] in shared memory holds each expert's next row.
__global__ void route_place_kernel(const int32_t* idx, int64_t slots, int64_t experts,
                                   int64_t chunks, const int32_t* first_row, int32_t* row_of) {
  extern __shared__ int32_t next[];  // [experts]
  const int lane = static_cast<int>(threadIdx.x);
  for (int64_t e = lane; e < experts; e += kWarp) next[e] = first_row[e * chunks + blockIdx.x];
  __syncwarp();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t last = first + kChunk < slots ? first + kChunk : slots;
  const unsigned lower = (1u << lane) - 1u;  // lanes before this one
  for (int64_t base = first; base < last; base += kWarp) {
    const int64_t s = base + lane;
    const int32_t e = s < last ? idx[s] : -1;
    // Lanes past the end and dropped slots share the key -1 and are not written as rows.
    const unsigned same = __match_any_sync(0xffffffffu, e);
    int32_t row = -1;
    if (e >= 0) row = next[e] + __popc(same & lower);
    __syncwarp();
    if (e >= 0 && (same & lower) == 0) next[e] += __popc(same);  // the group's first lane
    __syncwarp();
    if (s < last) row_of[s] = row;
  }
}

/// Device memory from the caching allocator for the scope of one call.
class Scratch {
 public:
  Scratch(int dev, std::size_t bytes) : dev_(dev), bytes_(bytes), p_(device_alloc(dev, bytes)) {}
  ~Scratch() { device_free(dev_, p_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p_) + byte_offset);
  }

 private:
  int dev_;
  std::size_t bytes_;
  void* p_;
};

}  // namespace

void CudaBackend::moe_route(const int32_t* indices, int64_t tokens, int64_t k, int64_t experts,
                            int32_t* row_of, int64_t* counts) {
  const kcheck::Work work = kcheck::check_moe_route(indices, tokens, k, experts, row_of, counts);
  if (work == kcheck::Work::none) {
    std::fill(counts, counts + experts, int64_t{0});
    return;
  }
  DeviceGuard guard(dev_);
  const int64_t slots = tokens * k;
  const int64_t chunks = (slots + kChunk - 1) / kChunk;
  // [experts + 1] int64: the counts, then the first bad slot; [experts] int64 start rows;
  // [experts, chunks] int32 histogram.
  const std::size_t head = static_cast<std::size_t>(experts + 1) * sizeof(int64_t);
  const std::size_t starts = static_cast<std::size_t>(experts) * sizeof(int64_t);
  const std::size_t hist_bytes = static_cast<std::size_t>(experts * chunks) * sizeof(int32_t);
  Scratch scratch(dev_, head + starts + hist_bytes);
  auto* out = scratch.as<int64_t>();
  auto* bad = reinterpret_cast<unsigned long long*>(out + experts);
  auto* start = scratch.as<int64_t>(head);
  auto* hist = scratch.as<int32_t>(head + starts);
  PTDP_CU(cudaMemsetAsync(bad, 0xff, sizeof(unsigned long long), stream_));
  const std::size_t shared = static_cast<std::size_t>(experts) * sizeof(int32_t);
  route_count_kernel<<<static_cast<unsigned>(chunks), kThreads, shared, stream_>>>(
      indices, slots, experts, chunks, hist, bad);
  PTDP_CU_LAUNCHED("route_count_kernel");
  route_offsets_kernel<<<1, 1024, 0, stream_>>>(hist, experts, chunks, out, start);
  PTDP_CU_LAUNCHED("route_offsets_kernel");
  std::vector<int64_t> host(static_cast<std::size_t>(experts + 1));
  PTDP_CU(cudaMemcpyAsync(host.data(), out, head, cudaMemcpyDeviceToHost, stream_));
  PTDP_CU(cudaStreamSynchronize(stream_));
  const auto first_bad = static_cast<unsigned long long>(host[static_cast<std::size_t>(experts)]);
  if (first_bad != ULLONG_MAX) {
    int32_t value = 0;
    PTDP_CU(cudaMemcpy(&value, indices + first_bad, sizeof value, cudaMemcpyDeviceToHost));
    kcheck::refuse_moe_route_index(static_cast<int64_t>(first_bad), k, value, experts);
  }
  std::copy(host.begin(), host.begin() + experts, counts);
  route_place_kernel<<<static_cast<unsigned>(chunks), kWarp, shared, stream_>>>(
      indices, slots, experts, chunks, hist, row_of);
  PTDP_CU_LAUNCHED("route_place_kernel");
}

}  // namespace ptdp::cuda
