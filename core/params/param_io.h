// Moving parameters (or their gradients) between a rank's slice and the full global shape:
// gathered from the tensor ranks for reading, sliced out of a full buffer for writing.
#pragma once

#include "core/parallel/tensor_parallel.h"
#include "core/params/params.h"

namespace ptdp {

/// Writes the global-shape value of parameter `i` (from `local`, its slice of the params or of
/// the grads) to host memory. Collective over the tensor group for partitioned parameters (over
/// the expert-tensor-parallel group, tp.ep, for an expert's).
void gather_global(const ParamTable& params, int i, const Tensor& local, const TensorParallel& tp, float* host);

/// Sets this rank's slice of parameter `i` (in `local`) from the global-shape host buffer.
/// No communication: every rank passes the same full value.
void scatter_global(const ParamTable& params, int i, const float* host, const Tensor& local);

}  // namespace ptdp
