// Storage types of the CPU kernels: each op is written once over a storage policy (f32, bf16 or
// f16 in memory, fp32 in registers) and instantiated for the type its caller names. Loads widen
// exactly; stores round to nearest even, once per result.
#pragma once

#include <cstdint>

#include "base/dtype.h"
#include "base/half.h"

namespace ptdp::cpu {

struct F32Storage {
  using type = float;
  static float load(float v) { return v; }
  static float store(float v) { return v; }
};

struct Bf16Storage {
  using type = uint16_t;
  static float load(uint16_t v) { return bf16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_bf16(v); }
};

struct F16Storage {
  using type = uint16_t;
  static float load(uint16_t v) { return f16_to_f32(v); }
  static uint16_t store(float v) { return f32_to_f16(v); }
};

/// Calls fn(Storage{}) with the policy of floating type t (already checked by the op).
template <typename Fn>
decltype(auto) with_storage(DType t, Fn&& fn) {
  switch (t) {
    case DType::BF16: return fn(Bf16Storage{});
    case DType::F16: return fn(F16Storage{});
    default: return fn(F32Storage{});
  }
}

/// Element i of a buffer of floating type t, widened to fp32.
inline float load_as_f32(const void* p, DType t, int64_t i) {
  return with_storage(t, [&](auto st) {
    using St = decltype(st);
    return St::load(static_cast<const typename St::type*>(p)[i]);
  });
}

/// Stores v, rounded to t, as element i.
inline void store_from_f32(void* p, DType t, int64_t i, float v) {
  with_storage(t, [&](auto st) {
    using St = decltype(st);
    static_cast<typename St::type*>(p)[i] = St::store(v);
  });
}

}  // namespace ptdp::cpu
