// PTDP_HD marks functions that compile for both the host and a CUDA device.
#pragma once

#if defined(__CUDACC__)
#define PTDP_HD __host__ __device__ __forceinline__
#else
#define PTDP_HD inline
#endif
