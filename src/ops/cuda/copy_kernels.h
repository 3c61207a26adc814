// Launchers for the data-movement kernels (no project headers: this is included by nvcc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// Element kinds the strided copy converts between (f32 <-> bf16) or moves as is.
enum class CopyType : int { kF32, kBF16, kBits8, kBits16, kBits32 };

struct StridedLayout {
  int64_t shape[4];
  int64_t src_stride[4];  // elements
  int64_t dst_stride[4];
  int ndim;
};

cudaError_t strided_copy(const void* src, CopyType src_type, void* dst, CopyType dst_type,
                         const StridedLayout& layout, cudaStream_t stream);

// Row moves of `row_bytes` each: gather dst[t] = src[rows[t]] (zeros for rows[t] < 0), or
// scatter dst[rows[t]] = src[t], for t < n. Strides in bytes.
cudaError_t copy_rows(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                      const int32_t* rows, int64_t n, int64_t row_bytes, bool scatter,
                      cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
