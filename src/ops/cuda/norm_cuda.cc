#include "core/cuda_context.h"
#include "ops/cuda/norm_kernels.h"
#include "ops/norm.h"

namespace mls::ops::cuda {
namespace {

bool activation_dtype(DType t) {
  return t == DType::kBF16 || t == DType::kF32;
}

// x and y: [T, n] bf16 or f32 with unit inner stride; w (and b): contiguous f32 [n]; all on
// one GPU.
void check_rows(const char* op, const Tensor& x, const Tensor& w, const Tensor& y) {
  if (x.ndim() != 2 || y.ndim() != 2 || x.dim(0) != y.dim(0) || x.dim(1) != y.dim(1) ||
      w.numel() != x.dim(1) || x.stride(1) != 1 || y.stride(1) != 1)
    raise<ShapeError>("{}: x {} w {} y {} do not fit", op, x.str(), w.str(), y.str());
  if (!activation_dtype(x.dtype()) || !activation_dtype(y.dtype()) || w.dtype() != DType::kF32 ||
      !w.is_contiguous())
    raise<ShapeError>("{}: x {} and y {} must be bf16 or f32, w {} contiguous f32", op, x.str(),
                      y.str(), w.str());
  if (x.device().is_cpu() || x.device() != y.device() || x.device() != w.device())
    raise<ShapeError>("{}: x on {}, w on {}, y on {}: all must be on one GPU", op, x.device().str(),
                      w.device().str(), y.device().str());
}

kernels::NormRows rows_of(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  kernels::NormRows p;
  p.rows = x.dim(0);
  p.n = x.dim(1);
  p.x = x.raw();
  p.x_stride = x.stride(0);
  p.x_dtype = x.dtype();
  p.y = y.raw();
  p.y_stride = y.stride(0);
  p.y_dtype = y.dtype();
  p.w = static_cast<const float*>(w.raw());
  p.eps = eps;
  return p;
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  check_rows("rms_norm", x, w, y);
  mls::cuda::check(kernels::launch_rms_norm(rows_of(x, w, eps, y), mls::cuda::stream()),
                   "rms_norm");
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  check_rows("layer_norm", x, w, y);
  if (!(b.shape() == w.shape()) || b.dtype() != DType::kF32 || !b.is_contiguous() ||
      b.device() != w.device())
    raise<ShapeError>("layer_norm: bias {} must be f32 like w {}", b.str(), w.str());
  kernels::NormRows p = rows_of(x, w, eps, y);
  p.b = static_cast<const float*>(b.raw());
  mls::cuda::check(kernels::launch_layer_norm(p, mls::cuda::stream()), "layer_norm");
}

void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y) {
  check_rows("add_rms_norm", x, w, y);
  if (!(delta.shape() == x.shape()) || delta.stride(1) != 1 || !activation_dtype(delta.dtype()) ||
      delta.device() != x.device())
    raise<ShapeError>("add_rms_norm: delta {} does not fit x {}", delta.str(), x.str());
  kernels::NormRows p = rows_of(x, w, eps, y);
  p.delta = delta.raw();
  p.delta_stride = delta.stride(0);
  p.delta_dtype = delta.dtype();
  mls::cuda::check(kernels::launch_add_rms_norm(p, mls::cuda::stream()), "add_rms_norm");
}

}  // namespace mls::ops::cuda
