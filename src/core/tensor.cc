#include "core/tensor.h"

#include <cstring>

#include "core/error.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_context.h"
#endif

namespace mls {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  if (dims.size() > kMaxDims) raise<ShapeError>("tensor rank {} exceeds {}", dims.size(), kMaxDims);
  n_ = static_cast<int>(dims.size());
  for (int i = 0; i < n_; ++i) {
    if (dims[i] < 0) raise<ShapeError>("negative dimension {} in shape", dims[i]);
    d_[i] = dims[i];
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i)
    if (d_[i] != o.d_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[i]);
  return s + "]";
}

struct Tensor::Buffer {
  Allocator* alloc;
  Allocation mem;
  size_t bytes;
  MemTag tag;
  Buffer(Allocator* a, Allocation m, size_t n, MemTag t) : alloc(a), mem(m), bytes(n), tag(t) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { alloc->deallocate(mem, bytes, tag); }
};

static std::array<int64_t, kMaxDims> contiguous_strides(const Shape& s) {
  std::array<int64_t, kMaxDims> st{};
  int64_t acc = 1;
  for (int i = s.ndim() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemTag tag, Allocator& alloc) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.dtype_set_ = true;
  t.device_ = alloc.device();
  const size_t bytes = t.nbytes();
  const Allocation m = alloc.allocate(bytes, tag);
  t.buf_ = std::make_shared<Buffer>(&alloc, m, bytes, tag);
  t.data_ = m.ptr;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemTag tag, Allocator& alloc) {
  Tensor t = empty(shape, dtype, tag, alloc);
  if (!t.data_) return t;
  if (alloc.device().is_cpu()) {
    std::memset(t.data_, 0, t.nbytes());
    return t;
  }
#ifdef MLASERVE_CUDA_RUNTIME
  cuda::check(cudaMemsetAsync(t.data_, 0, t.nbytes(), cuda::stream()), "zeros (cudaMemsetAsync)");
#else
  raise<Unsupported>("zeros on {}: this build has no CUDA runtime", alloc.device().str());
#endif
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.dtype_set_ = true;
  t.device_ = device;
  t.data_ = data;
  return t;
}

Allocator* Tensor::allocator() const {
  return buf_ ? buf_->alloc : nullptr;
}

bool Tensor::is_contiguous() const {
  const auto want = contiguous_strides(shape_);
  for (int i = 0; i < ndim(); ++i)
    if (shape_[i] != 1 && strides_[i] != want[i]) return false;
  return true;
}

Tensor Tensor::view(const Shape& shape) const {
  if (!is_contiguous()) raise<ShapeError>("view of non-contiguous tensor {}", str());
  if (shape.numel() != numel()) raise<ShapeError>("cannot view {} as {}", str(), shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t len) const {
  if (dim < 0) dim += ndim();
  if (dim < 0 || dim >= ndim() || start < 0 || len < 0 || start + len > shape_[dim])
    raise<ShapeError>("narrow(dim={}, start={}, len={}) out of range for {}", dim, start, len,
                      str());
  Tensor t = *this;
  t.shape_[dim] = len;
  if (data_) t.data_ = static_cast<char*>(data_) + start * strides_[dim] * dtype_size(dtype_);
  return t;
}

Tensor Tensor::select(int dim, int64_t i) const {
  if (dim < 0) dim += ndim();
  if (dim < 0 || dim >= ndim() || i < 0 || i >= shape_[dim])
    raise<ShapeError>("select(dim={}, {}) out of range for {}", dim, i, str());
  Tensor t = *this;
  int64_t dims[kMaxDims];
  int k = 0;
  for (int d = 0; d < ndim(); ++d) {
    if (d == dim) continue;
    dims[k] = shape_[d];
    t.strides_[k++] = strides_[d];
  }
  t.strides_[k] = 0;
  t.shape_ = Shape(std::span<const int64_t>(dims, k));
  if (data_) t.data_ = static_cast<char*>(data_) + i * strides_[dim] * dtype_size(dtype_);
  return t;
}

Tensor Tensor::unsqueeze(int dim) const {
  if (dim < 0) dim += ndim() + 1;
  if (dim < 0 || dim > ndim() || ndim() == kMaxDims)
    raise<ShapeError>("unsqueeze({}) invalid for {}", dim, str());
  Tensor t = *this;
  int64_t dims[kMaxDims];
  for (int d = 0, k = 0; d <= ndim(); ++d) {
    if (d == dim) {
      dims[d] = 1;
      t.strides_[d] = dim < ndim() ? strides_[dim] * shape_[dim] : 1;
    } else {
      dims[d] = shape_[k];
      t.strides_[d] = strides_[k];
      ++k;
    }
  }
  t.shape_ = Shape(std::span<const int64_t>(dims, ndim() + 1));
  return t;
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype_)) + shape_.str();
}

void Tensor::check_type(size_t elem_size) const {
  if (elem_size != dtype_size(dtype_))
    raise<ShapeError>("accessing {} with an element of {} bytes", str(), elem_size);
}

Tensor Tensor::transpose(int d0, int d1) const {
  if (d0 < 0) d0 += ndim();
  if (d1 < 0) d1 += ndim();
  MLS_CHECK(d0 >= 0 && d0 < ndim() && d1 >= 0 && d1 < ndim(), "transpose({}, {}) of {}", d0, d1,
            str());
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

void Tensor::set_block_scale(Tensor scale) {
  scale_ = std::make_shared<const Tensor>(std::move(scale));
}

void Tensor::set_padded_block_scale(Tensor scale) {
  padded_scale_ = std::make_shared<const Tensor>(std::move(scale));
}

}  // namespace mls
