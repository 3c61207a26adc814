#include <algorithm>

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

}  // namespace

void copy(const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() && (copy_type(src.dtype()) > kernels::CopyType::kBF16 ||
                                     copy_type(dst.dtype()) > kernels::CopyType::kBF16))
    raise<Unsupported>("copy on the GPU converts between f32 and bf16 only: {} into {}", src.str(),
                       dst.str());
  if (src.numel() == 0) return;
  const cudaStream_t s = mls::cuda::stream();
  if (src.device() != dst.device()) {
    // Host <-> device: one contiguous (or row-strided) transfer. From pageable host memory to the
    // device the call returns once the source is consumed; to pageable host memory it returns when
    // the data has arrived, so the host may read dst at once.
    const cudaMemcpyKind kind = src.device().is_cpu()   ? cudaMemcpyHostToDevice
                                : dst.device().is_cpu() ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
    if (src.is_contiguous() && dst.is_contiguous()) {
      mls::cuda::check(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), kind, s),
                       "copy (cudaMemcpyAsync)");
    } else {
      // Rows (the contract): one strided transfer; a single row's stride is never used.
      const size_t es = dtype_size(src.dtype()), row = static_cast<size_t>(src.dim(1)) * es;
      const auto pitch = [&](const Tensor& t) {
        return std::max(static_cast<size_t>(t.stride(0)) * es, row);
      };
      mls::cuda::check(cudaMemcpy2DAsync(dst.raw(), pitch(dst), src.raw(), pitch(src), row,
                                         static_cast<size_t>(src.dim(0)), kind, s),
                       "copy (cudaMemcpy2DAsync)");
    }
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
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
  mls::cuda::check(kernels::copy_rows(src.raw(), src.stride(0) * es, dst.raw(), dst.stride(0) * es,
                                      rows.data<int32_t>(), src.dim(0), src.dim(1) * es, true,
                                      mls::cuda::stream()),
                   "scatter_rows");
}

void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
  mls::cuda::check(kernels::copy_rows(src.raw(), src.stride(0) * es, dst.raw(), dst.stride(0) * es,
                                      rows.data<int32_t>(), dst.dim(0), dst.dim(1) * es, false,
                                      mls::cuda::stream()),
                   "gather_rows");
}

}  // namespace mls::ops::cuda
