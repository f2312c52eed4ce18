// What the single-process C API tests share: a world of one process without MPI (its runtime
// and default groups, released at scope exit) and deterministic token ids.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "ptdp/ptdp.h"

namespace sp {

/// A runtime of one process (use_mpi = 0; NCCL for GPU tensors unless use_nccl is 0), its
/// default (1, 1, 1) groups and this rank's GPU (-1 without one).
struct World {
  ptdp_runtime runtime = nullptr;
  ptdp_groups groups = nullptr;
  int32_t gpu = -1;
  explicit World(int32_t use_nccl = 1) {
    ptdp_runtime_options ro;
    REQUIRE(ptdp_runtime_options_init(&ro) == PTDP_SUCCESS);
    ro.use_mpi = 0;
    ro.use_nccl = use_nccl;
    REQUIRE(ptdp_runtime_create(&ro, &runtime) == PTDP_SUCCESS);
    REQUIRE(ptdp_groups_create(runtime, nullptr, &groups) == PTDP_SUCCESS);
    REQUIRE(ptdp_runtime_gpu(runtime, &gpu) == PTDP_SUCCESS);
  }
  ~World() {
    ptdp_groups_destroy(groups);
    ptdp_runtime_destroy(runtime);
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;
};

/// n token ids in [0, vocab), a pure function of the seed.
inline std::vector<int32_t> ids(std::size_t n, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> out(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& v : out) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return out;
}

}  // namespace sp
