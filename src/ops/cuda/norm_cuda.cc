#include "core/cuda_context.h"
#include "ops/cuda/norm_kernels.h"
#include "ops/norm.h"

namespace mls::ops::cuda {
namespace {

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
  mls::cuda::check(kernels::launch_rms_norm(rows_of(x, w, eps, y), mls::cuda::stream()),
                   "rms_norm");
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  kernels::NormRows p = rows_of(x, w, eps, y);
  p.b = static_cast<const float*>(b.raw());
  mls::cuda::check(kernels::launch_layer_norm(p, mls::cuda::stream()), "layer_norm");
}

void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y) {
  kernels::NormRows p = rows_of(x, w, eps, y);
  p.delta = delta.raw();
  p.delta_stride = delta.stride(0);
  p.delta_dtype = delta.dtype();
  mls::cuda::check(kernels::launch_add_rms_norm(p, mls::cuda::stream()), "add_rms_norm");
}

}  // namespace mls::ops::cuda
