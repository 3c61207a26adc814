#include "core/cuda_context.h"
#include "ops/cuda/elementwise_kernels.h"
#include "ops/cuda/fp8_act_kernels.h"
#include "ops/elementwise.h"

namespace mls::ops::cuda {
namespace {

void pointwise(kernels::Pointwise op, const char* name, const Tensor& a, const Tensor& b,
               float alpha, Tensor& out) {
  kernels::PointwiseRows p;
  p.rows = a.dim(0);
  p.cols = a.dim(1);
  p.a = a.raw();
  p.a_stride = a.stride(0);
  p.a_dtype = a.dtype();
  p.b = b.raw();
  p.b_stride = b.stride(0);
  p.b_dtype = b.dtype();
  p.out = out.raw();
  p.out_stride = out.stride(0);
  p.out_dtype = out.dtype();
  p.alpha = alpha;
  mls::cuda::check(kernels::launch_pointwise(op, p, mls::cuda::stream()), name);
}

}  // namespace

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, Tensor* q) {
  if (!q || !q->defined())
    return pointwise(kernels::Pointwise::kSiluMul, "silu_mul", gate, up, 1.0f, out);
  const int64_t T = out.dim(0), K = out.dim(1);
  const kernels::Fp8ActBuffer b = kernels::fp8_act_buffer(q->raw(), T, K);
  mls::cuda::check(kernels::launch_silu_mul_quantize(gate.raw(), gate.stride(0), up.raw(),
                                                     up.stride(0), out.raw(), out.stride(0), T, K,
                                                     b.ldq, scratch::fp8_cublaslt_lead(T, K), b.q,
                                                     b.scales, mls::cuda::stream()),
                   "silu_mul");
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  pointwise(kernels::Pointwise::kAdd, "add", a, b, 1.0f, out);
}

void scale(const Tensor& a, float alpha, Tensor& out) {
  pointwise(kernels::Pointwise::kScale, "scale", a, a, alpha, out);
}

void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  mls::cuda::check(kernels::launch_embedding(
                       table.raw(), table.dtype(), table.dim(0), table.dim(1), table.stride(0),
                       static_cast<const int32_t*>(ids.raw()), ids.numel(), vocab_start, out.raw(),
                       out.dtype(), mls::cuda::stream()),
                   "embedding");
}

void fill_uniform(Tensor& out, const UniformFill& f) {
  const DType t = out.dtype();
  const kernels::FillParams p{f.seed, f.bound, f.offset, f.row0, f.col0, f.full_cols};
  // Element i is (i / cols, i % cols), as on the host: a 1-D tensor is a column.
  const int64_t cols = out.ndim() == 2 ? out.dim(1) : 1;
  mls::cuda::check(
      kernels::launch_fill_uniform(out.raw(), t, out.numel(), cols, p, mls::cuda::stream()),
      "fill_uniform");
}

}  // namespace mls::ops::cuda
