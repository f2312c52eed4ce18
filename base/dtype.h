// Element types and devices shared by every layer of the engine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptdp {

/// Storage element type. Numbers match ptdp_dtype in the C API and only ever grow.
enum class DType : int { F32 = 0, BF16 = 1, F16 = 2, I32 = 3, I64 = 4 };

inline constexpr int kNumDTypes = 5;

constexpr bool dtype_valid(int v) { return v >= 0 && v < kNumDTypes; }

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

/// Kind of device memory lives on. Numbers match ptdp_device in the C API.
enum class DeviceType : int { CPU = 0, CUDA = 1 };

constexpr const char* device_type_name(DeviceType d) {
  return d == DeviceType::CPU ? "cpu" : "cuda";
}

}  // namespace ptdp
