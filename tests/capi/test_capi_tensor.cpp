// Tensors through the C API: every dtype round-trips, queries answer, casts round correctly,
// and the options struct works for callers built against older or newer headers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

namespace {

struct Handle {
  ptdp_tensor t = nullptr;
  ~Handle() { ptdp_tensor_destroy(t); }
};

}  // namespace

TEST_CASE("version and features are reported", "[capi]") {
  int32_t major = -1, minor = -1, patch = -1;
  REQUIRE(ptdp_get_version(&major, &minor, &patch) == PTDP_SUCCESS);
  CHECK(major == PTDP_VERSION_MAJOR);
  CHECK(minor == PTDP_VERSION_MINOR);
  CHECK(patch == PTDP_VERSION_PATCH);
  CHECK(std::string(ptdp_version()) == std::to_string(major) + "." + std::to_string(minor) + "." +
                                           std::to_string(patch));
  for (ptdp_feature f : {PTDP_FEATURE_CUDA, PTDP_FEATURE_NCCL, PTDP_FEATURE_MPI}) {
    int32_t v = -1;
    REQUIRE(ptdp_has_feature(f, &v) == PTDP_SUCCESS);
    CHECK((v == 0 || v == 1));
  }
  size_t sz = 0;
  const std::vector<std::pair<ptdp_dtype, size_t>> sizes = {
      {PTDP_DTYPE_F32, 4}, {PTDP_DTYPE_BF16, 2}, {PTDP_DTYPE_F16, 2}, {PTDP_DTYPE_I32, 4}, {PTDP_DTYPE_I64, 8}};
  for (auto [dtype, bytes] : sizes) {
    REQUIRE(ptdp_dtype_size(dtype, &sz) == PTDP_SUCCESS);
    CHECK(sz == bytes);
  }
}

TEST_CASE("every dtype round-trips through host memory", "[capi]") {
  const std::vector<std::pair<ptdp_dtype, size_t>> dtypes = {
      {PTDP_DTYPE_F32, 4}, {PTDP_DTYPE_BF16, 2}, {PTDP_DTYPE_F16, 2}, {PTDP_DTYPE_I32, 4}, {PTDP_DTYPE_I64, 8}};
  for (auto [dtype, esize] : dtypes) {
    INFO("dtype " << dtype);
    const int64_t shape[] = {3, 1, 5};
    std::vector<unsigned char> bytes(15 * esize);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    ptdp_tensor_options o;
    REQUIRE(ptdp_tensor_options_init(&o) == PTDP_SUCCESS);
    o.dtype = dtype;
    Handle h;
    REQUIRE(ptdp_tensor_create(&o, 3, shape, bytes.data(), bytes.size(), &h.t) == PTDP_SUCCESS);
    int32_t ndim = 0;
    int64_t dims[PTDP_MAX_DIMS] = {};
    int64_t numel = 0;
    size_t nbytes = 0;
    ptdp_dtype got = static_cast<ptdp_dtype>(-1);
    ptdp_device dev = static_cast<ptdp_device>(-1);
    int32_t index = -1;
    REQUIRE(ptdp_tensor_ndim(h.t, &ndim) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_shape(h.t, dims, 3) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_numel(h.t, &numel) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_nbytes(h.t, &nbytes) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_dtype(h.t, &got) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_device(h.t, &dev, &index) == PTDP_SUCCESS);
    CHECK(ndim == 3);
    CHECK((dims[0] == 3 && dims[1] == 1 && dims[2] == 5));
    CHECK(numel == 15);
    CHECK(nbytes == bytes.size());
    CHECK(got == dtype);
    CHECK(dev == PTDP_DEVICE_CPU);
    CHECK(index == 0);
    std::vector<unsigned char> back(bytes.size() + 8, 0xEE);
    REQUIRE(ptdp_tensor_copy_to_host(h.t, back.data(), back.size()) == PTDP_SUCCESS);
    CHECK(std::memcmp(back.data(), bytes.data(), bytes.size()) == 0);
    CHECK(back[bytes.size()] == 0xEE);  // nothing written past the tensor's bytes
    // copy_from_host overwrites.
    std::vector<unsigned char> other(bytes.size(), 0x5A);
    REQUIRE(ptdp_tensor_copy_from_host(h.t, other.data(), other.size()) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_copy_to_host(h.t, back.data(), back.size()) == PTDP_SUCCESS);
    CHECK(std::memcmp(back.data(), other.data(), other.size()) == 0);
  }
}

TEST_CASE("scalars, empty tensors and zero fill", "[capi]") {
  Handle scalar, empty, zeros;
  const float pi = 3.25f;
  REQUIRE(ptdp_tensor_create(nullptr, 0, nullptr, &pi, sizeof pi, &scalar.t) == PTDP_SUCCESS);
  int64_t numel = -1;
  REQUIRE(ptdp_tensor_numel(scalar.t, &numel) == PTDP_SUCCESS);
  CHECK(numel == 1);
  REQUIRE(ptdp_tensor_shape(scalar.t, nullptr, 0) == PTDP_SUCCESS);
  float v = 0;
  REQUIRE(ptdp_tensor_copy_to_host(scalar.t, &v, sizeof v) == PTDP_SUCCESS);
  CHECK(v == 3.25f);

  const int64_t shape0[] = {4, 0};
  REQUIRE(ptdp_tensor_create(nullptr, 2, shape0, nullptr, 0, &empty.t) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_numel(empty.t, &numel) == PTDP_SUCCESS);
  CHECK(numel == 0);
  REQUIRE(ptdp_tensor_copy_to_host(empty.t, nullptr, 0) == PTDP_SUCCESS);

  const int64_t shape[] = {5};
  REQUIRE(ptdp_tensor_create(nullptr, 1, shape, nullptr, 0, &zeros.t) == PTDP_SUCCESS);
  std::vector<float> out(5, -1.0f);
  REQUIRE(ptdp_tensor_copy_to_host(zeros.t, out.data(), 20) == PTDP_SUCCESS);
  CHECK(out == std::vector<float>(5, 0.0f));
  REQUIRE(ptdp_tensor_fill(zeros.t, -0.5) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_copy_to_host(zeros.t, out.data(), 20) == PTDP_SUCCESS);
  CHECK(out == std::vector<float>(5, -0.5f));
}

TEST_CASE("cast rounds to nearest even and round-trips exactly representable values", "[capi]") {
  // 1 + 2^-8 is a tie for bfloat16 (7 mantissa bits): rounds to even (1.0); 1 + 3*2^-8 rounds up.
  const std::vector<float> in = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.0f, 1e30f, 70000.0f};
  const int64_t n = static_cast<int64_t>(in.size());
  Handle x, b, h, back;
  REQUIRE(ptdp_tensor_create(nullptr, 1, &n, in.data(), in.size() * 4, &x.t) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_cast(x.t, PTDP_DTYPE_BF16, &b.t) == PTDP_SUCCESS);
  std::vector<uint16_t> bits(in.size());
  REQUIRE(ptdp_tensor_copy_to_host(b.t, bits.data(), bits.size() * 2) == PTDP_SUCCESS);
  CHECK(bits[0] == 0x3f80);
  CHECK(bits[1] == 0x3f82);
  CHECK(bits[2] == 0xc000);
  REQUIRE(ptdp_tensor_cast(x.t, PTDP_DTYPE_F16, &h.t) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_copy_to_host(h.t, bits.data(), bits.size() * 2) == PTDP_SUCCESS);
  CHECK(bits[2] == 0xc000);
  CHECK(bits[3] == 0x7c00);  // 1e30 overflows binary16 to +inf
  CHECK(bits[4] == 0x7c00);  // so does 70000 (> 65519.99)
  REQUIRE(ptdp_tensor_cast(b.t, PTDP_DTYPE_F32, &back.t) == PTDP_SUCCESS);
  std::vector<float> f(in.size());
  REQUIRE(ptdp_tensor_copy_to_host(back.t, f.data(), f.size() * 4) == PTDP_SUCCESS);
  CHECK(f[0] == 1.0f);
  CHECK(f[1] == 1.0f + 4.0f / 256);
  CHECK(f[2] == -2.0f);
}

TEST_CASE("options structs from older and newer headers", "[capi]") {
  const int64_t n = 3;
  // A newer caller whose extra fields are zero: accepted, as if they were defaults.
  struct Newer {
    ptdp_tensor_options base;
    int64_t future_a;
    int32_t future_b;
  } newer{};
  REQUIRE(ptdp_tensor_options_init(&newer.base) == PTDP_SUCCESS);
  newer.base.struct_size = sizeof newer;
  newer.base.dtype = PTDP_DTYPE_F16;
  Handle a;
  REQUIRE(ptdp_tensor_create(&newer.base, 1, &n, nullptr, 0, &a.t) == PTDP_SUCCESS);
  ptdp_dtype got = PTDP_DTYPE_F32;
  REQUIRE(ptdp_tensor_dtype(a.t, &got) == PTDP_SUCCESS);
  CHECK(got == PTDP_DTYPE_F16);
  // NULL options: the defaults (f32 on the CPU).
  Handle b;
  REQUIRE(ptdp_tensor_create(nullptr, 1, &n, nullptr, 0, &b.t) == PTDP_SUCCESS);
  REQUIRE(ptdp_tensor_dtype(b.t, &got) == PTDP_SUCCESS);
  CHECK(got == PTDP_DTYPE_F32);
}

TEST_CASE("freed large blocks are cached, reused zeroed, and released on request", "[capi]") {
  size_t released = 0;
  REQUIRE(ptdp_memory_release_cache(&released) == PTDP_SUCCESS);
  size_t cached = 1;
  REQUIRE(ptdp_memory_cached(&cached) == PTDP_SUCCESS);
  CHECK(cached == 0);

  const int64_t shape[] = {1024, 1024};  // 4 MiB: above the 1 MiB the allocator caches from
  const size_t bytes = size_t{4} << 20;
  size_t in_use_before = 0, in_use = 0;
  REQUIRE(ptdp_memory_stats(&in_use_before, nullptr) == PTDP_SUCCESS);
  {
    Handle big;
    REQUIRE(ptdp_tensor_create(nullptr, 2, shape, nullptr, 0, &big.t) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_fill(big.t, 7.0) == PTDP_SUCCESS);
    REQUIRE(ptdp_memory_stats(&in_use, nullptr) == PTDP_SUCCESS);
    CHECK(in_use == in_use_before + bytes);
  }
  REQUIRE(ptdp_memory_stats(&in_use, nullptr) == PTDP_SUCCESS);
  CHECK(in_use == in_use_before);  // the cache is not counted as in use
  REQUIRE(ptdp_memory_cached(&cached) == PTDP_SUCCESS);
  CHECK(cached == bytes);
  {
    // The next request of that size takes the cached block, and a new tensor is still zeros.
    Handle again;
    REQUIRE(ptdp_tensor_create(nullptr, 2, shape, nullptr, 0, &again.t) == PTDP_SUCCESS);
    REQUIRE(ptdp_memory_cached(&cached) == PTDP_SUCCESS);
    CHECK(cached == 0);
    std::vector<float> out(1024 * 1024, -1.0f);
    REQUIRE(ptdp_tensor_copy_to_host(again.t, out.data(), bytes) == PTDP_SUCCESS);
    CHECK(out == std::vector<float>(out.size(), 0.0f));
  }
  REQUIRE(ptdp_memory_cached(&cached) == PTDP_SUCCESS);
  CHECK(cached == bytes);
  REQUIRE(ptdp_memory_release_cache(&released) == PTDP_SUCCESS);
  CHECK(released == bytes);
  REQUIRE(ptdp_memory_cached(&cached) == PTDP_SUCCESS);
  CHECK(cached == 0);
  REQUIRE(ptdp_memory_release_cache(nullptr) == PTDP_SUCCESS);
}

TEST_CASE("blocks of 2 MiB or more are advised for huge pages, unless PTDP_CPU_HUGEPAGES is off",
          "[capi][huge_pages]") {
  // ctest runs this case twice: as the environment leaves it (on), and with
  // PTDP_CPU_HUGEPAGES=0 (the entry capi_huge_pages_off); the variable is read once per process.
  const char* env = std::getenv("PTDP_CPU_HUGEPAGES");
  const bool off = env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "off") == 0 ||
                                      std::strcmp(env, "false") == 0 || std::strcmp(env, "no") == 0);
  // A kernel built without transparent huge pages has no such file and refuses the advice.
  const bool kernel_has_thp = std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled").good();
  REQUIRE(ptdp_memory_release_cache(nullptr) == PTDP_SUCCESS);
  size_t before = 0;
  REQUIRE(ptdp_memory_huge_pages(&before) == PTDP_SUCCESS);
  const int64_t shape[] = {1024, 1024};  // 4 MiB
  const size_t bytes = size_t{4} << 20;
  const size_t expected = off || !kernel_has_thp ? 0 : bytes;
  size_t advised = 0;
  {
    Handle big;
    REQUIRE(ptdp_tensor_create(nullptr, 2, shape, nullptr, 0, &big.t) == PTDP_SUCCESS);
    REQUIRE(ptdp_tensor_fill(big.t, 1.5) == PTDP_SUCCESS);
    REQUIRE(ptdp_memory_huge_pages(&advised) == PTDP_SUCCESS);
    CHECK(advised == before + expected);
    // A small tensor is never advised.
    const int64_t small_shape[] = {1000};
    Handle small;
    REQUIRE(ptdp_tensor_create(nullptr, 1, small_shape, nullptr, 0, &small.t) == PTDP_SUCCESS);
    REQUIRE(ptdp_memory_huge_pages(&advised) == PTDP_SUCCESS);
    CHECK(advised == before + expected);
    // The data is what was written, huge pages or not.
    std::vector<float> out(1024 * 1024, 0.0f);
    REQUIRE(ptdp_tensor_copy_to_host(big.t, out.data(), bytes) == PTDP_SUCCESS);
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 1.5f; }));
  }
  // Freed into the cache, the block is still held (and still advised) ...
  REQUIRE(ptdp_memory_huge_pages(&advised) == PTDP_SUCCESS);
  CHECK(advised == before + expected);
  // ... until the cache goes back to the system.
  REQUIRE(ptdp_memory_release_cache(nullptr) == PTDP_SUCCESS);
  REQUIRE(ptdp_memory_huge_pages(&advised) == PTDP_SUCCESS);
  CHECK(advised == before);
  CHECK(ptdp_memory_huge_pages(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("advised") != std::string::npos);
}
