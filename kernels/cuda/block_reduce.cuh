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

/// *addr = max(*addr, v) atomically for non-NaN floats (-inf included): non-negative floats
/// order as their bits read as signed ints, negative ones in reverse as unsigned ints. Max is
/// order-independent, so the result is deterministic.
__device__ __forceinline__ void atomic_max_float(float* addr, float v) {
  if (v >= 0.0f) {
    atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
  } else {
    atomicMin(reinterpret_cast<unsigned*>(addr), __float_as_uint(v));
  }
}

/// A running maximum and the sum of exp(x - max) over the same values (an online softmax
/// denominator). The empty state is {-inf, 0}.
struct MaxSum {
  float max;
  double sum;
};

/// Adds one value to a MaxSum. A -inf value adds nothing (exp(-inf) = 0), and neither does a
/// -inf maximum when a finite value arrives (its sum is 0), so no -inf - -inf NaN arises.
__device__ __forceinline__ void max_sum_add(MaxSum& a, float x) {
  if (x > a.max) {
    a.sum = (a.max == -INFINITY ? 0.0 : a.sum * static_cast<double>(expf(a.max - x))) + 1.0;
    a.max = x;
  } else if (x != -INFINITY) {
    a.sum += static_cast<double>(expf(x - a.max));
  }
}

/// Combines two MaxSums: both sums are moved to the larger maximum.
struct MaxSumOp {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.max, b.max);
    MaxSum r;
    r.max = m;
    r.sum = (a.max == -INFINITY ? 0.0 : a.sum * static_cast<double>(expf(a.max - m))) +
            (b.max == -INFINITY ? 0.0 : b.sum * static_cast<double>(expf(b.max - m)));
    return r;
  }
};

__device__ __forceinline__ float shfl_down(float v, int off) {
  return __shfl_down_sync(0xffffffffu, v, off);
}
__device__ __forceinline__ double shfl_down(double v, int off) {
  return __shfl_down_sync(0xffffffffu, v, off);
}
__device__ __forceinline__ MaxSum shfl_down(MaxSum v, int off) {
  return MaxSum{shfl_down(v.max, off), shfl_down(v.sum, off)};
}

/// Reduces v over the block (blockDim.x a multiple of 32, at most 1024, blockDim.y == 1) and
/// returns the result to every thread. Every thread of the block must call it.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_vals[32];
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  for (int off = 16; off > 0; off >>= 1) v = op(v, shfl_down(v, off));
  __syncthreads();  // a previous call's result has been read by everyone
  if (lane == 0) warp_vals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = static_cast<int>(blockDim.x + 31) >> 5;
    v = lane < warps ? warp_vals[lane] : identity;
    for (int off = 16; off > 0; off >>= 1) v = op(v, shfl_down(v, off));
    if (lane == 0) warp_vals[0] = v;
  }
  __syncthreads();
  return warp_vals[0];
}

/// Pass 1 of a deterministic sum of squares (elementwise.cu): launched with kReduceBlocks blocks
/// of kThreads, block b writes partials[b], the sum in double of its fixed grid-stride subset of
/// x[0, n); adding the partials in order gives bits that do not depend on the GPU.
__global__ void sum_squares_partial_kernel(const float* x, int64_t n, double* partials);

}  // namespace ptdp::cuda
