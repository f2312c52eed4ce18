// Tensors through the C API.
#include <cmath>
#include <cstdint>
#include <new>
#include <string>

#include "capi/src/handles.h"

static_assert(PTDP_DTYPE_F32 == static_cast<int>(ptdp::DType::F32));
static_assert(PTDP_DTYPE_BF16 == static_cast<int>(ptdp::DType::BF16));
static_assert(PTDP_DTYPE_F16 == static_cast<int>(ptdp::DType::F16));
static_assert(PTDP_DTYPE_I32 == static_cast<int>(ptdp::DType::I32));
static_assert(PTDP_DTYPE_I64 == static_cast<int>(ptdp::DType::I64));
static_assert(PTDP_DEVICE_CPU == static_cast<int>(ptdp::DeviceType::CPU));
static_assert(PTDP_DEVICE_CUDA == static_cast<int>(ptdp::DeviceType::CUDA));
static_assert(PTDP_MAX_DIMS == ptdp::kMaxDims);

namespace {

using ptdp::ErrorCode;
using ptdp::capi::guard;
using ptdp::capi::require_non_null;

ptdp::Tensor& unwrap(ptdp_tensor handle, const char* name) {
  return ptdp::capi::live(handle, name).tensor;
}

ptdp::DType checked_dtype(ptdp_dtype dtype, const std::string& name) {
  PTDP_CHECK_ARG(ptdp::dtype_valid(static_cast<int>(dtype)),
                 name + " = " + std::to_string(static_cast<int>(dtype)) + " is not a ptdp_dtype");
  return static_cast<ptdp::DType>(dtype);
}

ptdp::Device checked_device(ptdp_device device, int32_t index, const std::string& name) {
  PTDP_CHECK_ARG(device == PTDP_DEVICE_CPU || device == PTDP_DEVICE_CUDA,
                 name + "->device = " + std::to_string(static_cast<int>(device)) +
                     " is not a ptdp_device");
  PTDP_CHECK_ARG(index >= 0, name + "->device_index = " + std::to_string(index) + " is negative");
  return ptdp::Device{static_cast<ptdp::DeviceType>(device), index};
}

ptdp_tensor wrap(ptdp::Tensor&& t) { return ptdp::capi::wrap_tensor(std::move(t)); }

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_tensor_options_init(ptdp_tensor_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    options->dtype = PTDP_DTYPE_F32;
    options->device = PTDP_DEVICE_CPU;
    options->device_index = 0;
  });
}

PTDP_API ptdp_status ptdp_tensor_create(const ptdp_tensor_options* options, int32_t ndim,
                                        const int64_t* shape, const void* host_data,
                                        size_t host_bytes, ptdp_tensor* out) {
  return guard(__func__, [&] {
    require_non_null(out, "out");
    ptdp_tensor_options defaults;
    ptdp_tensor_options_init(&defaults);
    const ptdp_tensor_options opts =
        ptdp::capi::read_options(options, defaults, "options",
                                 "ptdp_tensor_options_init");
    const ptdp::DType dtype = checked_dtype(opts.dtype, "options->dtype");
    const ptdp::Device device = checked_device(opts.device, opts.device_index, "options");
    PTDP_CHECK_ARG(ndim >= 0 && ndim <= PTDP_MAX_DIMS,
                   "ndim = " + std::to_string(ndim) + " is outside [0, " +
                       std::to_string(PTDP_MAX_DIMS) + "]");
    PTDP_CHECK_ARG(ndim == 0 || shape != nullptr, "shape is NULL with ndim = " + std::to_string(ndim));
    const ptdp::Shape s = ptdp::Shape::from(shape, ndim, "shape");
    PTDP_CHECK_ARG(s.numel() <= INT64_MAX / static_cast<int64_t>(ptdp::dtype_size(dtype)),
                   "shape " + s.str() + " of " + ptdp::dtype_name(dtype) + ": byte size overflows");
    const auto nbytes = static_cast<std::size_t>(s.numel()) * ptdp::dtype_size(dtype);
    if (host_data == nullptr) {
      PTDP_CHECK_ARG(host_bytes == 0, "host_data is NULL but host_bytes = " +
                                          std::to_string(host_bytes) + " (want 0 for zeros)");
    } else {
      PTDP_CHECK_ARG(host_bytes == nbytes,
                     "host_bytes = " + std::to_string(host_bytes) + " does not match shape " +
                         s.str() + " of " + ptdp::dtype_name(dtype) + " (" +
                         std::to_string(nbytes) + " bytes)");
    }
    ptdp::Tensor t = host_data ? ptdp::Tensor::from_host(host_data, s, dtype, device)
                               : ptdp::Tensor::zeros(s, dtype, device);
    *out = wrap(std::move(t));
  });
}

PTDP_API ptdp_status ptdp_tensor_destroy(ptdp_tensor tensor) {
  return guard(__func__, [&] {
    if (tensor == nullptr) return;
    unwrap(tensor, "tensor");
    ptdp::capi::release(tensor);
  });
}

PTDP_API ptdp_status ptdp_tensor_ndim(ptdp_tensor tensor, int32_t* ndim) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    require_non_null(ndim, "ndim");
    *ndim = t.ndim();
  });
}

PTDP_API ptdp_status ptdp_tensor_shape(ptdp_tensor tensor, int64_t* shape, int32_t capacity) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    PTDP_CHECK_ARG(capacity >= t.ndim(), "capacity = " + std::to_string(capacity) +
                                             " is smaller than ndim = " + std::to_string(t.ndim()));
    if (t.ndim() > 0) require_non_null(shape, "shape");
    for (int i = 0; i < t.ndim(); ++i) shape[i] = t.shape()[i];
  });
}

PTDP_API ptdp_status ptdp_tensor_dtype(ptdp_tensor tensor, ptdp_dtype* dtype) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    require_non_null(dtype, "dtype");
    *dtype = static_cast<ptdp_dtype>(t.dtype());
  });
}

PTDP_API ptdp_status ptdp_tensor_device(ptdp_tensor tensor, ptdp_device* device,
                                        int32_t* device_index) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    require_non_null(device, "device");
    *device = static_cast<ptdp_device>(t.device().type);
    if (device_index) *device_index = t.device().index;
  });
}

PTDP_API ptdp_status ptdp_tensor_numel(ptdp_tensor tensor, int64_t* numel) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    require_non_null(numel, "numel");
    *numel = t.numel();
  });
}

PTDP_API ptdp_status ptdp_tensor_nbytes(ptdp_tensor tensor, size_t* nbytes) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    require_non_null(nbytes, "nbytes");
    *nbytes = t.nbytes();
  });
}

PTDP_API ptdp_status ptdp_tensor_copy_to_host(ptdp_tensor tensor, void* dst, size_t dst_bytes) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(tensor, "tensor");
    if (t.nbytes() > 0) require_non_null(dst, "dst");
    PTDP_CHECK_ARG(dst_bytes >= t.nbytes(), "dst_bytes = " + std::to_string(dst_bytes) +
                                                " is smaller than the tensor's " +
                                                std::to_string(t.nbytes()) + " bytes");
    t.copy_to_host(dst, dst_bytes);
  });
}

PTDP_API ptdp_status ptdp_tensor_copy_from_host(ptdp_tensor tensor, const void* src,
                                                size_t src_bytes) {
  return guard(__func__, [&] {
    ptdp::Tensor& t = unwrap(tensor, "tensor");
    if (t.nbytes() > 0) require_non_null(src, "src");
    PTDP_CHECK_ARG(src_bytes == t.nbytes(), "src_bytes = " + std::to_string(src_bytes) +
                                                " does not match the tensor's " +
                                                std::to_string(t.nbytes()) + " bytes");
    t.copy_from_host(src, src_bytes);
  });
}

PTDP_API ptdp_status ptdp_tensor_cast(ptdp_tensor src, ptdp_dtype dtype, ptdp_tensor* out) {
  return guard(__func__, [&] {
    const ptdp::Tensor& t = unwrap(src, "src");
    const ptdp::DType target = checked_dtype(dtype, "dtype");
    require_non_null(out, "out");
    PTDP_CHECK_ARG(ptdp::dtype_is_float(t.dtype()),
                   std::string("src has dtype ") + ptdp::dtype_name(t.dtype()) +
                       "; only f32, bf16 and f16 tensors can be cast");
    PTDP_CHECK_ARG(ptdp::dtype_is_float(target),
                   std::string("dtype = ") + ptdp::dtype_name(target) +
                       " is not a floating dtype (f32, bf16, f16)");
    *out = wrap(t.to(target));
  });
}

PTDP_API ptdp_status ptdp_tensor_fill(ptdp_tensor tensor, double value) {
  return guard(__func__, [&] {
    ptdp::Tensor& t = unwrap(tensor, "tensor");
    if (!ptdp::dtype_is_float(t.dtype())) {
      const bool is32 = t.dtype() == ptdp::DType::I32;
      const double lo = is32 ? -2147483648.0 : -9223372036854775808.0;
      const double hi = is32 ? 2147483647.0 : 9223372036854775807.0;  // rounds to 2^63
      PTDP_CHECK_ARG(std::isfinite(value) && value == std::trunc(value) && value >= lo &&
                         (is32 ? value <= hi : value < hi),
                     "value = " + std::to_string(value) + " is not representable in " +
                         ptdp::dtype_name(t.dtype()));
    }
    t.fill(value);
  });
}

}  // extern "C"
