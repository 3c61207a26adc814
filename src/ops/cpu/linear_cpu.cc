#include <cblas.h>

#include "ops/linear.h"

namespace mls::ops::cpu {

void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  if (x.ndim() != 2 || w.ndim() != 2 || y.ndim() != 2 || x.dim(1) != w.dim(1) ||
      y.dim(0) != x.dim(0) || y.dim(1) != w.dim(0) || x.stride(1) != 1 || y.stride(1) != 1 ||
      !w.is_contiguous())
    raise<ShapeError>("linear: x {} · W {}ᵀ -> y {} does not fit", x.str(), w.str(), y.str());
  if (x.dtype() != DType::kF32 || w.dtype() != DType::kF32 || y.dtype() != DType::kF32)
    raise<ShapeError>("linear on cpu computes in f32, got x {} W {} y {}", x.str(), w.str(),
                      y.str());
  const int64_t m = x.dim(0), n = w.dim(0), k = w.dim(1);
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x.data<float>(), static_cast<int>(x.stride(0)),
              w.data<float>(), static_cast<int>(k), accumulate ? 1.0f : 0.0f, y.data<float>(),
              static_cast<int>(y.stride(0)));
}

void linear_batched(const Tensor& x, const Tensor& w, Tensor& y) {
  if (x.ndim() != 3 || w.ndim() != 3 || y.ndim() != 3 || x.dim(1) != w.dim(0) ||
      y.dim(1) != w.dim(0) || x.dim(0) != y.dim(0))
    raise<ShapeError>("linear_batched: x {} · W {}ᵀ -> y {} does not fit", x.str(), w.str(),
                      y.str());
  for (int64_t b = 0; b < w.dim(0); ++b) {
    Tensor yb = y.select(1, b);
    linear(x.select(1, b), w.select(0, b), yb, false);
  }
}

}  // namespace mls::ops::cpu
