// The dense peak FLOP/s of one device, what model-FLOPs utilisation (MFU) is measured against:
// a GPU's datasheet figure for the model's storage type, or the CPU's f32 GEMM rate measured
// now through the CPU backend (the engine's GEMMs run in f32 whatever the storage type).
#pragma once

#include <string>

#include "core/comm/communicator.h"
#include "core/tensor/tensor.h"

namespace ptdp {

struct DevicePeak {
  double flops = 0;    ///< FLOP/s; 0 when unknown (a GPU missing from the table)
  std::string source;  ///< "measured: f32 GEMM 512^3, 4 threads", "datasheet: NVIDIA H200 bf16 dense"
};

/// The peak of `device` for a model stored in `precision`. On the CPU this runs f32 GEMMs of
/// 512 x 512 x 512 through the backend for about `seconds` and keeps the best call, so ranks
/// sharing a node should measure together (each then sees its share of the machine).
DevicePeak device_peak(Device device, DType precision, double seconds = 0.2);

/// The peak a training run's MFU is measured against, the same on every rank: `peak_tflops`
/// (--peak-tflops) when positive, else device_peak measured by every rank of `world` at once
/// (so that each sees its share of a node) and averaged. Collective over `world` when measured.
DevicePeak run_device_peak(double peak_tflops, Communicator& world, Device device, DType precision);

}  // namespace ptdp
