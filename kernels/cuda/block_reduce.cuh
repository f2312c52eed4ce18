// Block-wide reductions for the CUDA kernels. The combination order is fixed by the block shape
// (warp shuffles, then the warps' results in order), so results are deterministic run to run.
#pragma once

#include <cuda_runtime.h>

namespace ptdp::cuda {

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduces v over the block (blockDim.x a multiple of 32, at most 1024, blockDim.y == 1) and
/// returns the result to every thread. Every thread of the block must call it.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_vals[32];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
  __syncthreads();  // a previous call's result has been read by everyone
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = static_cast<int>(blockDim.x + 31) >> 5;
    v = lane < warps ? warp_vals[lane] : identity;
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
    if (lane == 0) warp_vals[0] = v;
  }
  __syncthreads();
  return warp_vals[0];
}

}  // namespace ptdp::cuda
