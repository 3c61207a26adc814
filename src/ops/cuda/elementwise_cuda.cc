#include "core/cuda_context.h"
#include "ops/cuda/elementwise_kernels.h"
#include "ops/elementwise.h"

namespace mls::ops::cuda {
namespace {

bool activation_dtype(DType t) {
  return t == DType::kBF16 || t == DType::kF32;
}

// a, b and out: [T, N] bf16 or f32 with unit inner stride, on one GPU.
void check_same(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.ndim() != 2 || !(a.shape() == b.shape()) || !(a.shape() == out.shape()) ||
      a.stride(1) != 1 || b.stride(1) != 1 || out.stride(1) != 1)
    raise<ShapeError>("{}: {} {} -> {} do not fit", op, a.str(), b.str(), out.str());
  if (!activation_dtype(a.dtype()) || !activation_dtype(b.dtype()) ||
      !activation_dtype(out.dtype()))
    raise<ShapeError>("{}: {} {} -> {} must be bf16 or f32", op, a.str(), b.str(), out.str());
  if (a.device().is_cpu() || a.device() != b.device() || a.device() != out.device())
    raise<ShapeError>("{}: operands on {}, {} and {}: all must be on one GPU", op, a.device().str(),
                      b.device().str(), out.device().str());
}

void pointwise(kernels::Pointwise op, const char* name, const Tensor& a, const Tensor& b,
               float alpha, Tensor& out) {
  check_same(name, a, b, out);
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

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  pointwise(kernels::Pointwise::kSiluMul, "silu_mul", gate, up, 1.0f, out);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  pointwise(kernels::Pointwise::kAdd, "add", a, b, 1.0f, out);
}

void scale(const Tensor& a, float alpha, Tensor& out) {
  pointwise(kernels::Pointwise::kScale, "scale", a, a, alpha, out);
}

void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  if (table.ndim() != 2 || out.ndim() != 2 || out.dim(0) != ids.numel() ||
      out.dim(1) != table.dim(1) || !out.is_contiguous() || table.stride(1) != 1 ||
      ids.dtype() != DType::kI32 || !ids.is_contiguous())
    raise<ShapeError>("embedding: table {} ids {} out {} do not fit", table.str(), ids.str(),
                      out.str());
  if (!activation_dtype(table.dtype()) || !activation_dtype(out.dtype()))
    raise<ShapeError>("embedding: table {} and out {} must be bf16 or f32", table.str(), out.str());
  if (out.device().is_cpu() || table.device() != out.device() || ids.device() != out.device())
    raise<ShapeError>("embedding: table on {}, ids on {}, out on {}: all must be on one GPU",
                      table.device().str(), ids.device().str(), out.device().str());
  mls::cuda::check(kernels::launch_embedding(
                       table.raw(), table.dtype(), table.dim(0), table.dim(1), table.stride(0),
                       static_cast<const int32_t*>(ids.raw()), ids.numel(), vocab_start, out.raw(),
                       out.dtype(), mls::cuda::stream()),
                   "embedding");
}

void fill_uniform(Tensor& out, const UniformFill& f) {
  const DType t = out.dtype();
  if (out.ndim() > 2 || !out.is_contiguous() ||
      (t != DType::kF32 && t != DType::kBF16 && t != DType::kFP8E4M3))
    raise<ShapeError>("fill_uniform: {} must be contiguous f32, bf16 or fp8 of at most 2 dims",
                      out.str());
  if (out.device().is_cpu())
    raise<ShapeError>("fill_uniform: {} is on {}, not a GPU", out.str(), out.device().str());
  const kernels::FillParams p{f.seed, f.bound, f.offset, f.row0, f.col0, f.full_cols};
  // Element i is (i / cols, i % cols), as on the host: a 1-D tensor is a column.
  const int64_t cols = out.ndim() == 2 ? out.dim(1) : 1;
  mls::cuda::check(
      kernels::launch_fill_uniform(out.raw(), t, out.numel(), cols, p, mls::cuda::stream()),
      "fill_uniform");
}

}  // namespace mls::ops::cuda
