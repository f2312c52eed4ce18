// The device's Philox must draw exactly the host's numbers: dropout masks computed on a GPU
// and on the CPU reference have to agree bit for bit.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <vector>

#include "base/philox.h"
#include "kernels/cuda/cuda_probe.h"

namespace {

// Exit with ctest's SKIP_RETURN_CODE so a machine without a GPU reports "skipped", not "passed".
void require_gpu() {
  if (ptdp::cuda::device_count() == 0) {
    WARN("no CUDA device: skipping");
    std::exit(77);
  }
}

}  // namespace

TEST_CASE("philox on the device matches the host bit for bit", "[gpu][philox]") {
  require_gpu();
  INFO(ptdp::cuda::device_description(0));
  const ptdp::PhiloxStream s{0x0123456789abcdefull, 0xfeedfacecafebeefull};
  const uint64_t offset = (1ull << 33) + 5;  // crosses the low counter word
  const int64_t n = 1 << 20;
  std::vector<float> dev(static_cast<size_t>(n));
  ptdp::cuda::philox_uniform_on_device(0, s, offset, n, dev.data());
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (dev[static_cast<size_t>(i)] != ptdp::philox_uniform(s, offset + static_cast<uint64_t>(i))) ++mismatches;
  }
  REQUIRE(mismatches == 0);
}
