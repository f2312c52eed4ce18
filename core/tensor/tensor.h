// Tensor: a shape, a dtype and a window into reference-counted device storage.
//
// Storage is either owned (allocated through the device's Allocator, freed with the last
// reference) or borrowed (memory the caller manages; the tensor never frees it). Views share
// their parent's storage. Tensors are always contiguous row-major; layers describe strided
// access to them through the Backend's GEMM leading dimensions instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "base/dtype.h"
#include "core/tensor/allocator.h"
#include "core/tensor/shape.h"
#include "kernels/backend.h"

namespace ptdp {

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};

/// The backend and allocator serving a device; throws Error(Unsupported) for a device this
/// build cannot drive.
Backend& backend_for(Device device);
Allocator& allocator_for(Device device);

/// Makes backend_for(cpu) return `decorator` (a Backend that forwards to cpu_backend(), such as
/// the ProfilingBackend of kernels/profiling_backend.h) until it is called again; nullptr
/// restores cpu_backend(). Returns the decorator it replaces. For benchmarks: install it while
/// no other thread computes, and keep it alive while installed. Tensors find their backend on
/// every call, so the decorator sees every op from the next call on.
Backend* set_cpu_backend_decorator(Backend* decorator);

class Storage {
 public:
  /// Owned storage from `allocator`.
  Storage(Allocator& allocator, std::size_t bytes);
  /// Borrowed storage: `data` stays the caller's.
  Storage(void* data, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  bool owned() const { return allocator_ != nullptr; }

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

template <typename T>
constexpr bool dtype_matches(DType t) {
  if constexpr (std::is_same_v<T, float>) return t == DType::F32;
  else if constexpr (std::is_same_v<T, int32_t>) return t == DType::I32;
  else if constexpr (std::is_same_v<T, int64_t>) return t == DType::I64;
  else if constexpr (std::is_same_v<T, uint16_t>) return t == DType::BF16 || t == DType::F16;
  else return false;
}

class Tensor {
 public:
  /// An undefined tensor (no storage).
  Tensor() = default;

  /// Uninitialised tensor on `device`.
  static Tensor empty(const Shape& shape, DType dtype, Device device = {});
  static Tensor zeros(const Shape& shape, DType dtype, Device device = {});
  /// Copies shape.numel() elements of `dtype` from host memory.
  static Tensor from_host(const void* src, const Shape& shape, DType dtype, Device device = {});
  /// Borrows `data` (device memory of `device`) without copying or taking ownership.
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device = {});

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const;
  int64_t numel() const { return shape_.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  Backend& backend() const { return backend_for(device_); }
  /// True when this tensor's storage was allocated by ptdp (not borrowed).
  bool owns_storage() const { return storage_ && storage_->owned(); }

  void* raw() const;
  template <typename T>
  T* data() const {
    check_dtype(dtype_matches<T>(dtype_), "data<T>()");
    return static_cast<T*>(raw());
  }

  /// A view of `shape.numel()` elements starting `elem_offset` elements into this tensor.
  Tensor view(int64_t elem_offset, const Shape& shape) const;
  /// Same elements, another shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  /// Rows [begin, begin + length) along dimension 0.
  Tensor narrow(int64_t begin, int64_t length) const;

  void copy_to_host(void* dst, std::size_t dst_bytes) const;
  void copy_from_host(const void* src, std::size_t src_bytes);
  /// A new tensor with the elements converted to `dtype` (floating dtypes only).
  Tensor to(DType dtype) const;
  void fill(double value);

  std::string str() const;  ///< "f32[2, 3] on cpu"

 private:
  void check_defined(const char* what) const;
  void check_dtype(bool ok, const char* what) const;

  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
};

}  // namespace ptdp
