// Dropout with the mask drawn from Philox at each element's global index (see kernels/philox.h
// and GlobalBlock): nothing is stored, the backward pass regenerates the mask, and the masks are
// bit-identical to the CPU backend's for every partition of a tensor.
//
// Index equivalence with kernels/cpu/dropout.cpp: element (i0, i1, j) of the local block, at
// local offset (i0 * s1 + i1) * s2 + j, has global index
//   ((i0 + o0) * g1 + (i1 + o1)) * g2 + o2 + j,
// its 32 random bits are word (index & 3) of Philox block (index >> 2) of the stream, and it is
// kept when philox_bits_to_uniform(bits) >= p, then scaled by 1 / (1 - p) (0 when p == 1) -
// exactly the CPU's computation, which batches the same Philox blocks for speed. Here one thread
// computes one Philox block and applies its (up to) four words to the elements of the row that
// own them.
#include "kernels/cuda/cuda_backend_impl.cuh"

namespace ptdp::cuda {

namespace {

struct MaskGeometry {
  int64_t rows;            // s0 * s1 rows of s2 contiguous elements
  int64_t s1, s2;          // local shape (dims 1, 2)
  int64_t g1, g2;          // global shape (dims 1, 2)
  int64_t o0, o1, o2;      // offsets
  int64_t blocks_per_row;  // Philox blocks a thread grid assigns to each row
};

__global__ void dropout_kernel(const float* in, float* out, PhiloxStream rng, float p,
                               float keep_scale, MaskGeometry g) {
  PTDP_GRID_STRIDE(t, g.rows * g.blocks_per_row) {
    const int64_t row = t / g.blocks_per_row, q = t % g.blocks_per_row;
    const int64_t i0 = row / g.s1, i1 = row % g.s1;
    // Global index of element j of this row is row_global + j.
    const auto row_global = static_cast<uint64_t>(((i0 + g.o0) * g.g1 + (i1 + g.o1)) * g.g2 + g.o2);
    const uint64_t row_end = row_global + static_cast<uint64_t>(g.s2);
    const uint64_t block = (row_global >> 2) + static_cast<uint64_t>(q);
    const uint64_t first = block * 4;  // global index of the block's word 0
    if (first >= row_end) continue;
    const Philox4x32 words = philox_block(rng, block);
    const float* x = in + row * g.s2;
    float* y = out + row * g.s2;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint64_t idx = first + static_cast<uint64_t>(w);
      if (idx < row_global || idx >= row_end) continue;
      const auto j = static_cast<int64_t>(idx - row_global);
      const float u = philox_bits_to_uniform(words.v[w]);
      y[j] = u >= p ? __fmul_rn(x[j], keep_scale) : 0.0f;
    }
  }
}

}  // namespace

namespace {

void apply_mask(const char* op, const float* in, float* out, const DropoutDesc& d, int dev_,
                cudaStream_t stream) {
  if (kcheck::check_dropout(op, in, out, d) == kcheck::Work::none) return;
  const float p = d.p;
  const float keep_scale = kcheck::dropout_keep_scale(p);
  MaskGeometry g{};
  g.rows = d.block.shape[0] * d.block.shape[1];
  g.s1 = d.block.shape[1];
  g.s2 = d.block.shape[2];
  g.g1 = d.block.global_shape[1];
  g.g2 = d.block.global_shape[2];
  g.o0 = d.block.offset[0];
  g.o1 = d.block.offset[1];
  g.o2 = d.block.offset[2];
  // A row of s2 elements starting anywhere in a block of four touches at most (s2 + 3) / 4 + 1
  // Philox blocks; threads past the row's end do nothing.
  g.blocks_per_row = (g.s2 + 3) / 4 + 1;
  DeviceGuard guard(dev_);
  dropout_kernel<<<grid_for(g.rows * g.blocks_per_row), kThreads, 0, stream>>>(in, out, d.rng, p,
                                                                               keep_scale, g);
  PTDP_CU_LAUNCHED("dropout_kernel");
}

}  // namespace

void CudaBackend::dropout_forward(const float* x, float* y, const DropoutDesc& d) {
  apply_mask("dropout_forward", x, y, d, dev_, stream_);
}

void CudaBackend::dropout_backward(const float* dy, float* dx, const DropoutDesc& d) {
  apply_mask("dropout_backward", dy, dx, d, dev_, stream_);
}

}  // namespace ptdp::cuda
