// Labels for the backend calls a thread makes: what a GEMM computes ("linear_qkv",
// "attn_scores") and which part of a training step it belongs to (forward, backward, ...).
// Layers set them with RAII scopes; a profiling decorator of the Backend
// (kernels/profiling_backend.h) reads them to attribute its timings. Nothing else reads them, so
// with no decorator installed a scope costs two thread-local pointer-sized stores.
#pragma once

#include <cstdint>

namespace ptdp {

/// The part of a training step a backend call belongs to.
enum class Phase : std::uint8_t { Other = 0, Forward = 1, Backward = 2, Recompute = 3, Optimizer = 4 };

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Other: return "other";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Recompute: return "recompute";
    case Phase::Optimizer: return "optimizer";
  }
  return "?";
}

/// The calling thread's current label and phase. Labels are string literals or strings that
/// outlive every call made under them (a layer's own name).
struct OpContext {
  const char* label = nullptr;
  Phase phase = Phase::Other;
};

inline OpContext& op_context() {
  static thread_local OpContext context;
  return context;
}

/// Labels the backend calls of its lifetime (innermost scope wins), e.g. OpScope scope("attn_scores").
/// A null label leaves the enclosing scope's label in place.
class OpScope {
 public:
  explicit OpScope(const char* label) : saved_(op_context().label) {
    if (label != nullptr) op_context().label = label;
  }
  ~OpScope() { op_context().label = saved_; }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* saved_;
};

/// Marks the backend calls of its lifetime as belonging to `phase` (innermost scope wins).
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase) : saved_(op_context().phase) { op_context().phase = phase; }
  ~PhaseScope() { op_context().phase = saved_; }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase saved_;
};

}  // namespace ptdp
