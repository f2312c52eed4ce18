#include "core/tensor/tensor.h"

#include <atomic>
#include <limits>

#include "base/error.h"
#include "kernels/cpu/cpu_threads.h"
#ifdef PTDP_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_probe.h"
#endif

namespace ptdp {

std::string Device::str() const {
  return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

namespace {

// A device this build knows how to address (memory can live there).
void check_device_addressable(Device device) {
  if (device.type == DeviceType::CPU) {
    PTDP_CHECK_ARG(device.index == 0, "device: cpu has index 0 only, got " + std::to_string(device.index));
    return;
  }
  PTDP_CHECK_ARG(device.type == DeviceType::CUDA,
                 "device: unknown device type " + std::to_string(static_cast<int>(device.type)));
  PTDP_CHECK_ARG(device.index >= 0, "device: negative cuda index " + std::to_string(device.index));
#ifndef PTDP_HAVE_CUDA
  throw_error(ErrorCode::Unsupported, "device " + device.str() + ": this build of ptdp has no CUDA support");
#endif
}

// A device whose memory ptdp can allocate and compute on.
void check_device(Device device) {
  check_device_addressable(device);
#ifdef PTDP_HAVE_CUDA
  if (device.type == DeviceType::CUDA) {
    const int n = cuda::device_count();
    if (device.index >= n) {
      throw_error(ErrorCode::Device, "device " + device.str() + ": this process sees " + std::to_string(n) +
                                         " CUDA device(s)");
    }
  }
#endif
}

std::size_t checked_bytes(const Shape& shape, DType dtype) {
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(dtype)),
                 "dtype " + std::to_string(static_cast<int>(dtype)) + " is not a valid dtype");
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  PTDP_CHECK_ARG(shape.numel() <= std::numeric_limits<int64_t>::max() / size,
                 "shape " + shape.str() + " of " + dtype_name(dtype) + ": byte size overflows");
  return static_cast<std::size_t>(shape.numel() * size);
}

// set_cpu_backend_decorator's decorator; null (the rule) costs backend_for one atomic load.
std::atomic<Backend*> cpu_decorator{nullptr};

}  // namespace

Backend& backend_for(Device device) {
  check_device(device);
#ifdef PTDP_HAVE_CUDA
  if (device.type == DeviceType::CUDA) return cuda::backend(device.index);
#endif
  if (Backend* decorator = cpu_decorator.load(std::memory_order_acquire)) {
    adopt_cpu_threads();  // as cpu_backend() does (kernels/cpu/cpu_threads.h)
    return *decorator;
  }
  return cpu_backend();
}

Backend* set_cpu_backend_decorator(Backend* decorator) {
  return cpu_decorator.exchange(decorator, std::memory_order_acq_rel);
}

Allocator& allocator_for(Device device) {
  check_device(device);
  if (device.type == DeviceType::CUDA) return cuda_allocator(device.index);
  return cpu_allocator();
}

Storage::Storage(Allocator& allocator, std::size_t bytes)
    : allocator_(&allocator), data_(allocator.allocate(bytes)), bytes_(bytes) {}

Storage::Storage(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const std::size_t bytes = checked_bytes(shape, dtype);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(allocator_for(device), bytes);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(0.0);
  return t;
}

Tensor Tensor::from_host(const void* src, const Shape& shape, DType dtype, Device device) {
  const std::size_t bytes = checked_bytes(shape, dtype);
  PTDP_CHECK_ARG(src != nullptr || bytes == 0, "from_host: src is NULL");
  Tensor t = empty(shape, dtype, device);
  t.copy_from_host(src, bytes);
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  const std::size_t bytes = checked_bytes(shape, dtype);
  PTDP_CHECK_ARG(data != nullptr || bytes == 0, "borrow: data is NULL");
  check_device_addressable(device);
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, bytes);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

void Tensor::check_defined(const char* what) const {
  if (!defined()) throw_error(ErrorCode::InvalidState, std::string(what) + ": tensor is undefined");
}

void Tensor::check_dtype(bool ok, const char* what) const {
  check_defined(what);
  PTDP_CHECK_ARG(ok, std::string(what) + ": element type does not match the tensor's dtype " +
                         dtype_name(dtype_));
}

int64_t Tensor::dim(int i) const {
  PTDP_CHECK_ARG(i >= 0 && i < ndim(), "dim: index " + std::to_string(i) + " out of range for " +
                                           std::to_string(ndim()) + " dimensions");
  return shape_[i];
}

void* Tensor::raw() const {
  check_defined("raw");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

Tensor Tensor::view(int64_t elem_offset, const Shape& shape) const {
  check_defined("view");
  PTDP_CHECK_ARG(elem_offset >= 0 && elem_offset <= numel() &&
                     shape.numel() <= numel() - elem_offset,
                 "view: " + std::to_string(shape.numel()) + " elements at offset " +
                     std::to_string(elem_offset) + " exceed the " + std::to_string(numel()) +
                     " elements of " + str());
  Tensor t = *this;
  t.offset_bytes_ = offset_bytes_ + static_cast<std::size_t>(elem_offset) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  PTDP_CHECK_ARG(shape.numel() == numel(), "reshape: " + shape.str() + " does not have the " +
                                               std::to_string(numel()) + " elements of " + str());
  return view(0, shape);
}

Tensor Tensor::narrow(int64_t begin, int64_t length) const {
  check_defined("narrow");
  PTDP_CHECK_ARG(ndim() >= 1, "narrow: needs at least one dimension, got a scalar");
  PTDP_CHECK_ARG(begin >= 0 && length >= 0 && begin <= shape_[0] && length <= shape_[0] - begin,
                 "narrow: rows [" + std::to_string(begin) + ", " + std::to_string(begin) + " + " +
                     std::to_string(length) + ") out of range for " + str());
  int64_t dims[kMaxDims];
  for (int i = 0; i < ndim(); ++i) dims[i] = shape_[i];
  dims[0] = length;
  const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  return view(begin * row, Shape::from(dims, ndim()));
}

void Tensor::copy_to_host(void* dst, std::size_t dst_bytes) const {
  check_defined("copy_to_host");
  PTDP_CHECK_ARG(dst != nullptr || nbytes() == 0, "copy_to_host: dst is NULL");
  PTDP_CHECK_ARG(dst_bytes >= nbytes(), "copy_to_host: dst_bytes = " + std::to_string(dst_bytes) +
                                            " is smaller than the " + std::to_string(nbytes()) +
                                            " bytes of " + str());
  backend().copy_to_host(dst, raw(), nbytes());
}

void Tensor::copy_from_host(const void* src, std::size_t src_bytes) {
  check_defined("copy_from_host");
  PTDP_CHECK_ARG(src != nullptr || nbytes() == 0, "copy_from_host: src is NULL");
  PTDP_CHECK_ARG(src_bytes == nbytes(), "copy_from_host: src_bytes = " + std::to_string(src_bytes) +
                                            " differs from the " + std::to_string(nbytes()) +
                                            " bytes of " + str());
  backend().copy_from_host(raw(), src, nbytes());
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  PTDP_CHECK_ARG(dtype_valid(static_cast<int>(dtype)) && dtype_is_float(dtype) && dtype_is_float(dtype_),
                 std::string("to: conversion from ") + dtype_name(dtype_) + " to dtype " +
                     std::to_string(static_cast<int>(dtype)) + " is not supported (f32, bf16, f16 only)");
  Tensor out = empty(shape_, dtype, device_);
  backend().cast(raw(), dtype_, out.raw(), dtype, numel());
  return out;
}

void Tensor::fill(double value) {
  check_defined("fill");
  backend().fill(raw(), dtype_, value, numel());
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_.str() + " on " + device_.str();
}

}  // namespace ptdp
