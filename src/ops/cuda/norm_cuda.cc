#include "core/cuda_context.h"
#include "ops/cuda/fp8_act_kernels.h"
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

// The norm into y, and y quantised into q (defined: ops/fp8_input.h) by the norm kernel itself
// where it can, else by the FP8 linears' quantisation after it.
template <class Launch>
void norm_into(kernels::NormRows p, Tensor* q, Launch launch_norm, const char* op) {
  const bool quantize = q && q->defined();
  const int64_t lead = scratch::fp8_cublaslt_lead(p.rows, p.n);
  const kernels::Fp8ActBuffer b =
      quantize ? kernels::fp8_act_buffer(q->raw(), p.rows, p.n) : kernels::Fp8ActBuffer{};
  if (quantize && kernels::norm_quantizes(p)) {
    p.q = b.q;
    p.ldq = b.ldq;
    p.q_lead = lead;
  }
  const cudaStream_t stream = mls::cuda::stream();
  mls::cuda::check(launch_norm(p, stream), op);
  if (!quantize || p.q) return;
  mls::cuda::check(kernels::launch_quantize_fp8_act(p.y, p.y_stride, p.rows, p.n, b.ldq, lead, b.q,
                                                    b.scales, stream),
                   op);
}

}  // namespace

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor* q) {
  norm_into(rows_of(x, w, eps, y), q, kernels::launch_rms_norm, "rms_norm");
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  kernels::NormRows p = rows_of(x, w, eps, y);
  p.b = static_cast<const float*>(b.raw());
  mls::cuda::check(kernels::launch_layer_norm(p, mls::cuda::stream()), "layer_norm");
}

void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y,
                  Tensor* q) {
  kernels::NormRows p = rows_of(x, w, eps, y);
  p.delta = delta.raw();
  p.delta_stride = delta.stride(0);
  p.delta_dtype = delta.dtype();
  norm_into(p, q, kernels::launch_add_rms_norm, "add_rms_norm");
}

}  // namespace mls::ops::cuda
