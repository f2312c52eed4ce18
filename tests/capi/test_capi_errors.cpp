// Every bad input through the C API returns the right status, a message that names the
// function and the offending argument, and changes nothing.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ptdp/ptdp.h"

namespace {

struct BadCall {
  const char* what;
  std::function<ptdp_status()> call;
  ptdp_status expected;
  std::vector<const char*> mentions;  // substrings the message must contain
};

ptdp_tensor make_f32(std::vector<int64_t> shape, const std::vector<float>& values) {
  ptdp_tensor t = nullptr;
  REQUIRE(ptdp_tensor_create(nullptr, static_cast<int32_t>(shape.size()), shape.data(), values.data(),
                             values.size() * sizeof(float), &t) == PTDP_SUCCESS);
  return t;
}

ptdp_tensor_options opts_with(void (*edit)(ptdp_tensor_options&)) {
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  edit(o);
  return o;
}

}  // namespace

TEST_CASE("bad inputs return a status and a message naming the argument, without side effects",
          "[capi][errors]") {
  const std::vector<float> six = {1, 2, 3, 4, 5, 6};
  ptdp_tensor live = make_f32({2, 3}, six);
  ptdp_tensor ints = nullptr;
  {
    ptdp_tensor_options o;
    ptdp_tensor_options_init(&o);
    o.dtype = PTDP_DTYPE_I64;
    const int64_t n = 2;
    REQUIRE(ptdp_tensor_create(&o, 1, &n, nullptr, 0, &ints) == PTDP_SUCCESS);
  }
  // `out` starts with a sentinel that must survive every failing call.
  ptdp_tensor sentinel = live;
  ptdp_tensor out = sentinel;
  const int64_t s23[] = {2, 3};
  const int64_t neg[] = {2, -3};
  const int64_t huge[] = {int64_t{1} << 62, 4};
  const int64_t nine[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  float buf[6];
  int64_t dims[8];
  int32_t i32 = -1;
  int64_t i64 = -1;
  size_t sz = 0;
  ptdp_dtype dt = PTDP_DTYPE_F32;
  ptdp_device dev = PTDP_DEVICE_CPU;

  const std::vector<BadCall> cases = {
      {"create: NULL out", [&] { return ptdp_tensor_create(nullptr, 2, s23, nullptr, 0, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_create", "out"}},
      {"create: negative extent", [&] { return ptdp_tensor_create(nullptr, 2, neg, nullptr, 0, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_create", "shape[1]", "-3"}},
      {"create: ndim too large", [&] { return ptdp_tensor_create(nullptr, 9, nine, nullptr, 0, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_create", "ndim"}},
      {"create: negative ndim", [&] { return ptdp_tensor_create(nullptr, -1, s23, nullptr, 0, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"ndim = -1"}},
      {"create: NULL shape", [&] { return ptdp_tensor_create(nullptr, 2, nullptr, nullptr, 0, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"shape is NULL"}},
      {"create: element count overflows", [&] { return ptdp_tensor_create(nullptr, 2, huge, nullptr, 0, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"shape", "overflow"}},
      {"create: byte size overflows", [&] {
         const int64_t big[] = {int64_t{1} << 61};
         return ptdp_tensor_create(nullptr, 1, big, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"byte size overflows"}},
      {"create: host_bytes mismatch", [&] { return ptdp_tensor_create(nullptr, 2, s23, six.data(), 20, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"host_bytes = 20", "24 bytes"}},
      {"create: host_bytes without data", [&] { return ptdp_tensor_create(nullptr, 2, s23, nullptr, 24, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"host_data is NULL", "host_bytes"}},
      {"create: bad dtype", [&] {
         auto o = opts_with([](ptdp_tensor_options& x) { x.dtype = static_cast<ptdp_dtype>(42); });
         return ptdp_tensor_create(&o, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"options->dtype = 42"}},
      {"create: bad device", [&] {
         auto o = opts_with([](ptdp_tensor_options& x) { x.device = static_cast<ptdp_device>(-2); });
         return ptdp_tensor_create(&o, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"options->device = -2"}},
      {"create: negative device index", [&] {
         auto o = opts_with([](ptdp_tensor_options& x) { x.device_index = -1; });
         return ptdp_tensor_create(&o, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"options->device_index = -1"}},
      {"create: cpu index 1", [&] {
         auto o = opts_with([](ptdp_tensor_options& x) { x.device_index = 1; });
         return ptdp_tensor_create(&o, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"cpu", "index"}},
      {"create: options not initialised", [&] {
         ptdp_tensor_options o;
         std::memset(&o, 0, sizeof o);
         return ptdp_tensor_create(&o, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"options->struct_size is 0", "ptdp_tensor_options_init"}},
      {"create: options too small", [&] {
         auto o = opts_with([](ptdp_tensor_options& x) { x.struct_size = 4; });
         return ptdp_tensor_create(&o, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"options->struct_size = 4"}},
      {"create: unknown trailing option set", [&] {
         struct Newer {
           ptdp_tensor_options base;
           int64_t future_field;
         } n{};
         ptdp_tensor_options_init(&n.base);
         n.base.struct_size = sizeof n;
         n.future_field = 1;
         return ptdp_tensor_create(&n.base, 2, s23, nullptr, 0, &out);
       }, PTDP_ERR_INVALID_ARGUMENT, {"options->struct_size = ", "does not know"}},
      {"options_init: NULL", [&] { return ptdp_tensor_options_init(nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_options_init", "options is NULL"}},
      {"ndim: NULL tensor", [&] { return ptdp_tensor_ndim(nullptr, &i32); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_ndim", "tensor is NULL"}},
      {"ndim: NULL output", [&] { return ptdp_tensor_ndim(live, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"ndim is NULL"}},
      {"shape: capacity too small", [&] { return ptdp_tensor_shape(live, dims, 1); },
       PTDP_ERR_INVALID_ARGUMENT, {"capacity = 1", "ndim = 2"}},
      {"shape: NULL output", [&] { return ptdp_tensor_shape(live, nullptr, 8); },
       PTDP_ERR_INVALID_ARGUMENT, {"shape is NULL"}},
      {"dtype: NULL output", [&] { return ptdp_tensor_dtype(live, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_dtype", "dtype is NULL"}},
      {"device: NULL output", [&] { return ptdp_tensor_device(live, nullptr, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_device", "device is NULL"}},
      {"device: NULL tensor", [&] { return ptdp_tensor_device(nullptr, &dev, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"tensor is NULL"}},
      {"numel: NULL output", [&] { return ptdp_tensor_numel(live, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_numel", "numel is NULL"}},
      {"nbytes: NULL tensor", [&] { return ptdp_tensor_nbytes(nullptr, &sz); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_nbytes", "tensor is NULL"}},
      {"copy_to_host: dst too small", [&] { return ptdp_tensor_copy_to_host(live, buf, 23); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_copy_to_host", "dst_bytes = 23"}},
      {"copy_to_host: NULL dst", [&] { return ptdp_tensor_copy_to_host(live, nullptr, 24); },
       PTDP_ERR_INVALID_ARGUMENT, {"dst is NULL"}},
      {"copy_from_host: size mismatch", [&] { return ptdp_tensor_copy_from_host(live, buf, 28); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_copy_from_host", "src_bytes = 28"}},
      {"copy_from_host: NULL src", [&] { return ptdp_tensor_copy_from_host(live, nullptr, 24); },
       PTDP_ERR_INVALID_ARGUMENT, {"src is NULL"}},
      {"cast: integer source", [&] { return ptdp_tensor_cast(ints, PTDP_DTYPE_F32, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_cast", "src has dtype i64"}},
      {"cast: integer target", [&] { return ptdp_tensor_cast(live, PTDP_DTYPE_I32, &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"dtype = i32"}},
      {"cast: unknown dtype", [&] { return ptdp_tensor_cast(live, static_cast<ptdp_dtype>(99), &out); },
       PTDP_ERR_INVALID_ARGUMENT, {"dtype = 99"}},
      {"cast: NULL out", [&] { return ptdp_tensor_cast(live, PTDP_DTYPE_BF16, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"out is NULL"}},
      {"fill: fraction into integers", [&] { return ptdp_tensor_fill(ints, 1.5); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_tensor_fill", "value", "i64"}},
      {"fill: out of int64 range", [&] { return ptdp_tensor_fill(ints, 1e19); },
       PTDP_ERR_INVALID_ARGUMENT, {"value"}},
      {"get_version: NULL", [&] { return ptdp_get_version(&i32, nullptr, &i32); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_get_version", "minor is NULL"}},
      {"has_feature: unknown", [&] { return ptdp_has_feature(static_cast<ptdp_feature>(77), &i32); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_has_feature", "feature = 77"}},
      {"has_feature: NULL", [&] { return ptdp_has_feature(PTDP_FEATURE_MPI, nullptr); },
       PTDP_ERR_INVALID_ARGUMENT, {"available is NULL"}},
      {"dtype_size: unknown", [&] { return ptdp_dtype_size(static_cast<ptdp_dtype>(5), &sz); },
       PTDP_ERR_INVALID_ARGUMENT, {"ptdp_dtype_size", "dtype = 5"}},
  };

  for (const BadCall& c : cases) {
    INFO(c.what);
    const ptdp_status st = c.call();
    CHECK(st == c.expected);
    const std::string msg = ptdp_last_error();
    INFO("message: " << msg);
    CHECK_FALSE(msg.empty());
    for (const char* m : c.mentions) CHECK(msg.find(m) != std::string::npos);
    CHECK(out == sentinel);
    // The tensor the failing calls touched is unchanged and still usable.
    REQUIRE(ptdp_tensor_copy_to_host(live, buf, sizeof buf) == PTDP_SUCCESS);
    CHECK(std::vector<float>(buf, buf + 6) == six);
    CHECK(ptdp_tensor_numel(live, &i64) == PTDP_SUCCESS);
    CHECK(i64 == 6);
    CHECK(ptdp_tensor_dtype(live, &dt) == PTDP_SUCCESS);
    CHECK(dt == PTDP_DTYPE_F32);
  }
  CHECK(ptdp_tensor_destroy(ints) == PTDP_SUCCESS);
  CHECK(ptdp_tensor_destroy(live) == PTDP_SUCCESS);
}

TEST_CASE("a CUDA tensor is created, or refused naming the device when the build or machine lacks one", "[capi][errors]") {
  int32_t have_cuda = -1;
  REQUIRE(ptdp_has_feature(PTDP_FEATURE_CUDA, &have_cuda) == PTDP_SUCCESS);
  ptdp_tensor_options o;
  ptdp_tensor_options_init(&o);
  o.device = PTDP_DEVICE_CUDA;
  const int64_t n = 4;
  ptdp_tensor out = nullptr;
  const ptdp_status st = ptdp_tensor_create(&o, 1, &n, nullptr, 0, &out);
  if (have_cuda == 0) {
    // A build without CUDA says so cleanly.
    CHECK(st == PTDP_ERR_UNSUPPORTED);
    CHECK(out == nullptr);
    CHECK(std::string(ptdp_last_error()).find("cuda:0") != std::string::npos);
  } else if (st == PTDP_SUCCESS) {
    // A CUDA build on a machine with a GPU: the tensor lives there.
    ptdp_device dev = PTDP_DEVICE_CPU;
    int32_t index = -1;
    CHECK(ptdp_tensor_device(out, &dev, &index) == PTDP_SUCCESS);
    CHECK(dev == PTDP_DEVICE_CUDA);
    CHECK(index == 0);
    CHECK(ptdp_tensor_destroy(out) == PTDP_SUCCESS);
  } else {
    // A CUDA build on a machine without a GPU: a device error naming the device.
    CHECK(st == PTDP_ERR_DEVICE);
    CHECK(out == nullptr);
    CHECK(std::string(ptdp_last_error()).find("cuda:0") != std::string::npos);
  }
}

TEST_CASE("a GPT on a device the build or rank lacks is refused, naming the option", "[capi][errors]") {
  ptdp_runtime_options ro;
  REQUIRE(ptdp_runtime_options_init(&ro) == PTDP_SUCCESS);
  ro.use_mpi = 0;
  ptdp_runtime rt = nullptr;
  ptdp_groups groups = nullptr;
  REQUIRE(ptdp_runtime_create(&ro, &rt) == PTDP_SUCCESS);
  REQUIRE(ptdp_groups_create(rt, nullptr, &groups) == PTDP_SUCCESS);
  int32_t have_cuda = 0, gpu = -1;
  REQUIRE(ptdp_has_feature(PTDP_FEATURE_CUDA, &have_cuda) == PTDP_SUCCESS);
  REQUIRE(ptdp_runtime_gpu(rt, &gpu) == PTDP_SUCCESS);
  ptdp_gpt_options o;
  REQUIRE(ptdp_gpt_options_init(&o) == PTDP_SUCCESS);
  CHECK(o.device == PTDP_DEVICE_CPU);
  ptdp_model m = nullptr;
  o.device = static_cast<ptdp_device>(7);
  CHECK(ptdp_model_create(groups, &o, &m) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(std::string(ptdp_last_error()).find("options->device = 7") != std::string::npos);
  CHECK(m == nullptr);
  o.device = PTDP_DEVICE_CUDA;
  const ptdp_status st = ptdp_model_create(groups, &o, &m);
  if (have_cuda == 0) {
    CHECK(st == PTDP_ERR_UNSUPPORTED);
  } else if (gpu < 0) {
    CHECK(st == PTDP_ERR_DEVICE);
    CHECK(std::string(ptdp_last_error()).find("no GPU") != std::string::npos);
  } else {
    CHECK(st == PTDP_SUCCESS);
  }
  if (st != PTDP_SUCCESS) {
    CHECK(std::string(ptdp_last_error()).find("PTDP_DEVICE_CUDA") != std::string::npos);
    CHECK(m == nullptr);
  }
  CHECK(ptdp_model_destroy(m) == PTDP_SUCCESS);
  CHECK(ptdp_groups_destroy(groups) == PTDP_SUCCESS);
  CHECK(ptdp_runtime_destroy(rt) == PTDP_SUCCESS);
}

TEST_CASE("a pointer that is not a tensor handle is rejected", "[capi][errors]") {
  // Zeroed memory the size of a handle's object: the magic number does not match.
  alignas(64) static unsigned char not_a_tensor[256] = {};
  auto bogus = reinterpret_cast<ptdp_tensor>(not_a_tensor);
  int64_t n = -1;
  CHECK(ptdp_tensor_numel(bogus, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(n == -1);
  CHECK(std::string(ptdp_last_error()).find("not a live ptdp_tensor") != std::string::npos);
  CHECK(ptdp_tensor_destroy(bogus) == PTDP_ERR_INVALID_ARGUMENT);
}

TEST_CASE("status strings are fixed and never NULL", "[capi][errors]") {
  CHECK(std::string(ptdp_status_string(PTDP_SUCCESS)) == "success");
  CHECK(std::string(ptdp_status_string(PTDP_ERR_INVALID_ARGUMENT)) == "invalid argument");
  CHECK(std::string(ptdp_status_string(PTDP_ERR_OUT_OF_MEMORY)) == "out of memory");
  CHECK(std::string(ptdp_status_string(PTDP_ERR_UNSUPPORTED)) == "unsupported");
  CHECK(std::string(ptdp_status_string(PTDP_ERR_TIMEOUT)) == "timeout");
  CHECK(std::string(ptdp_status_string(static_cast<ptdp_status>(1234))) == "unknown status");
}
