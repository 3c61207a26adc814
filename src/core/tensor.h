// Tensor: shape, strides (in elements), dtype, device, and either an owned buffer from a tracked
// allocator or a non-owning view of someone else's memory. Views share the owner's buffer, so a
// slice keeps its parent's memory alive.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/allocator.h"
#include "core/dtype.h"

namespace mls {

inline constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int ndim() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t numel() const;
  std::span<const int64_t> dims() const { return {d_.data(), static_cast<size_t>(n_)}; }
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[3, 4]"

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised (zeroed for zeros) owned tensor. In meta mode data() is null.
  static Tensor empty(const Shape& shape, DType dtype, MemTag tag,
                      Allocator& alloc = default_allocator());
  static Tensor zeros(const Shape& shape, DType dtype, MemTag tag,
                      Allocator& alloc = default_allocator());
  // Non-owning contiguous view of memory that outlives the tensor.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

  bool defined() const { return dtype_set_; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  int64_t stride(int i) const { return strides_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;
  // The allocator of the owned buffer this tensor (or view) uses; null for wrapped memory.
  Allocator* allocator() const;

  void* raw() const { return data_; }
  template <class T>
  T* data() const {
    check_type(sizeof(T));
    return static_cast<T*>(data_);
  }

  // Same storage, new shape; requires a contiguous tensor and the same element count.
  Tensor view(const Shape& shape) const;
  // Elements [start, start + len) along dim; a strided view unless dim == 0.
  Tensor narrow(int dim, int64_t start, int64_t len) const;
  // Index `i` along dim, dropping that dimension (a strided view unless dim == 0).
  Tensor select(int dim, int64_t i) const;
  // A new dimension of size 1 at `dim`; works on strided views too.
  Tensor unsqueeze(int dim) const;
  // Dimensions d0 and d1 swapped (a strided view).
  Tensor transpose(int d0, int d1) const;

  std::string str() const;  // "f32[3, 4]"

  // A block-FP8 weight's dequantisation scales (f32 [ceil(rows/128), ceil(cols/128)]), carried
  // with the weight so that a GEMM sees both; null for any other tensor. Views share it.
  const Tensor* block_scale() const { return scale_.get(); }
  void set_block_scale(Tensor scale);
  // The same scales with each row padded to a multiple of 4 floats (the layout cuBLASLt's
  // 128x128 block scaling reads), made once at load where that differs (ops/linear.h); null
  // otherwise. Views share it.
  const Tensor* padded_block_scale() const { return padded_scale_.get(); }
  void set_padded_block_scale(Tensor scale);

 private:
  struct Buffer;
  void check_type(size_t elem_size) const;

  std::shared_ptr<Buffer> buf_;
  void* data_ = nullptr;
  Shape shape_;
  std::array<int64_t, kMaxDims> strides_{};
  DType dtype_ = DType::kF32;
  bool dtype_set_ = false;
  Device device_;
  std::shared_ptr<const Tensor> scale_;
  std::shared_ptr<const Tensor> padded_scale_;
};

}  // namespace mls
