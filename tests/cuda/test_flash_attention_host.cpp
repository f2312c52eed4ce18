// What the fused (flash) attention kernels accept, asked on the host: the dtypes and head dims
// they cover, and the refusals that come before any device memory or stream is touched. Needs
// the CUDA build, not a GPU, so it is labelled `cuda`, not `gpu`: it runs and passes on every
// machine that compiles the CUDA backend (tests/cuda/test_flash_attention.cpp needs the device).
#include <catch2/catch.hpp>
#include <string>

#include "base/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/flash_attention.cuh"

using ptdp::AttentionDesc;
using ptdp::DType;

TEST_CASE("flash attention covers bf16 and f16 with head dims 64 and 128 only",
          "[flash_attention][host]") {
  using ptdp::cuda::flash_attention_supported;
  CHECK(flash_attention_supported(DType::BF16, 64));
  CHECK(flash_attention_supported(DType::BF16, 128));
  CHECK(flash_attention_supported(DType::F16, 64));
  CHECK(flash_attention_supported(DType::F16, 128));
  CHECK_FALSE(flash_attention_supported(DType::F32, 64));
  CHECK_FALSE(flash_attention_supported(DType::BF16, 96));
  CHECK_FALSE(flash_attention_supported(DType::F16, 32));
  CHECK_FALSE(flash_attention_supported(DType::BF16, 256));

  // Refused before touching the device: pointers and stream are never used.
  AttentionDesc d;
  d.s = 16;
  d.b = 1;
  d.heads = 1;
  d.dh = 96;
  const auto expect_unsupported = [](auto&& call, const char* dtype, const char* dh) {
    try {
      call();
      FAIL("no error thrown");
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::Unsupported);
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find(dtype) != std::string::npos);
      CHECK(what.find(dh) != std::string::npos);
    }
  };
  expect_unsupported(
      [&] {
        ptdp::cuda::flash_attention_forward(d, nullptr, nullptr, nullptr, DType::BF16, nullptr);
      },
      "bf16", "96");
  d.dh = 64;
  expect_unsupported(
      [&] {
        ptdp::cuda::flash_attention_backward(d, nullptr, nullptr, nullptr, nullptr, nullptr,
                                             nullptr, DType::F32, nullptr);
      },
      "f32", "64");
}
