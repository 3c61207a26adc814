#include "core/cuda_context.h"
#include "ops/copy.h"
#include "ops/cuda/copy_kernels.h"

namespace mls::ops::cuda {
namespace {

kernels::CopyType copy_type(DType t) {
  switch (t) {
    case DType::kF32:
      return kernels::CopyType::kF32;
    case DType::kBF16:
      return kernels::CopyType::kBF16;
    default:
      break;
  }
  switch (dtype_size(t)) {
    case 1:
      return kernels::CopyType::kBits8;
    case 2:
      return kernels::CopyType::kBits16;
    case 4:
      return kernels::CopyType::kBits32;
    default:
      raise<Unsupported>("copy: dtype {} on the GPU", dtype_name(t));
  }
}

void check_rows(const char* op, const Tensor& a, const Tensor& b, const Tensor& rows) {
  if (a.ndim() != 2 || b.ndim() != 2 || a.dim(1) != b.dim(1) || a.dtype() != b.dtype() ||
      a.stride(1) != 1 || b.stride(1) != 1 || rows.dtype() != DType::kI32 || rows.ndim() != 1 ||
      a.device() != b.device() || rows.device() != b.device())
    raise<ShapeError>("{}: src {} on {} rows {} on {} dst {} on {} do not fit", op, a.str(),
                      a.device().str(), rows.str(), rows.device().str(), b.str(), b.device().str());
}

}  // namespace

void copy(const Tensor& src, Tensor& dst) {
  if (src.shape() != dst.shape() || src.ndim() > 4)
    raise<ShapeError>("copy: {} into {}", src.str(), dst.str());
  if (src.numel() == 0) return;
  const cudaStream_t s = mls::cuda::stream();
  if (src.device() != dst.device()) {
    // Host <-> device: one contiguous transfer. From pageable host memory to the device the
    // call returns once the source is consumed; to pageable host memory it returns when the
    // data has arrived, so the host may read dst at once.
    if (src.dtype() != dst.dtype() || !src.is_contiguous() || !dst.is_contiguous())
      raise<Unsupported>("copy between {} and {}: {} into {} must be contiguous, one dtype",
                         src.device().str(), dst.device().str(), src.str(), dst.str());
    const cudaMemcpyKind kind = src.device().is_cpu()   ? cudaMemcpyHostToDevice
                                : dst.device().is_cpu() ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
    mls::cuda::check(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), kind, s),
                     "copy (cudaMemcpyAsync)");
    if (kind == cudaMemcpyDeviceToHost) mls::cuda::synchronize();
    return;
  }
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    mls::cuda::check(
        cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, s),
        "copy (cudaMemcpyAsync)");
    return;
  }
  kernels::StridedLayout l{};
  if (src.is_contiguous() && dst.is_contiguous()) {
    // A converting copy of contiguous tensors is one flat run: no per-element index division.
    l.ndim = 1;
    l.shape[0] = src.numel();
    l.src_stride[0] = l.dst_stride[0] = 1;
  } else {
    l.ndim = src.ndim();
    for (int d = 0; d < l.ndim; ++d) {
      l.shape[d] = src.dim(d);
      l.src_stride[d] = src.stride(d);
      l.dst_stride[d] = dst.stride(d);
    }
  }
  mls::cuda::check(kernels::strided_copy(src.raw(), copy_type(src.dtype()), dst.raw(),
                                         copy_type(dst.dtype()), l, s),
                   "copy");
}

void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  check_rows("scatter_rows", src, dst, rows);
  if (rows.numel() != src.dim(0))
    raise<ShapeError>("scatter_rows: {} rows for src {}", rows.numel(), src.str());
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
  mls::cuda::check(kernels::copy_rows(src.raw(), src.stride(0) * es, dst.raw(), dst.stride(0) * es,
                                      rows.data<int32_t>(), src.dim(0), src.dim(1) * es, true,
                                      mls::cuda::stream()),
                   "scatter_rows");
}

void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  check_rows("gather_rows", src, dst, rows);
  if (rows.numel() != dst.dim(0))
    raise<ShapeError>("gather_rows: {} rows for dst {}", rows.numel(), dst.str());
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
  mls::cuda::check(kernels::copy_rows(src.raw(), src.stride(0) * es, dst.raw(), dst.stride(0) * es,
                                      rows.data<int32_t>(), dst.dim(0), dst.dim(1) * es, false,
                                      mls::cuda::stream()),
                   "gather_rows");
}

}  // namespace mls::ops::cuda
