#include <cuda_bf16.h>

#include "ops/cuda/copy_kernels.h"
#include "ops/cuda/launch.cuh"

namespace mls::ops::cuda::kernels {
namespace {

template <class Src, class Dst>
__global__ void strided_copy_kernel(const Src* src, Dst* dst, StridedLayout l, int64_t n) {
  pdl_begin();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, so = 0, d_o = 0;
    for (int d = l.ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % l.shape[d];
      rem /= l.shape[d];
      so += idx * l.src_stride[d];
      d_o += idx * l.dst_stride[d];
    }
    if constexpr (__is_same(Src, Dst))
      dst[d_o] = src[so];
    else if constexpr (__is_same(Src, float))
      dst[d_o] = __float2bfloat16_rn(src[so]);
    else
      dst[d_o] = __bfloat162float(src[so]);
  }
}

template <class Src, class Dst>
cudaError_t launch(const void* src, void* dst, const StridedLayout& l, cudaStream_t s) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.shape[d];
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  launch(strided_copy_kernel<Src, Dst>, static_cast<unsigned>(blocks < 65536 ? blocks : 65536),
         threads, 0, s, static_cast<const Src*>(src), static_cast<Dst*>(dst), l, n);
  return cudaGetLastError();
}

// Moves one row per CTA in 16-byte words when both sides allow it, else byte by byte.
__global__ void copy_rows_kernel(const char* src, int64_t src_stride, char* dst, int64_t dst_stride,
                                 const int32_t* rows, int64_t row_bytes, bool scatter, bool vec) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int32_t r = rows[t];
  if (scatter && r < 0) return;
  char* d = dst + (scatter ? static_cast<int64_t>(r) : t) * dst_stride;
  const char* s = r < 0 ? nullptr : src + (scatter ? t : static_cast<int64_t>(r)) * src_stride;
  if (vec) {
    const int64_t words = row_bytes / 16;
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x)
      reinterpret_cast<uint4*>(d)[i] = s ? reinterpret_cast<const uint4*>(s)[i] : uint4{0, 0, 0, 0};
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) d[i] = s ? s[i] : 0;
  }
}

}  // namespace

cudaError_t strided_copy(const void* src, CopyType st, void* dst, CopyType dt,
                         const StridedLayout& l, cudaStream_t s) {
  if (st == CopyType::kF32 && dt == CopyType::kF32) return launch<float, float>(src, dst, l, s);
  if (st == CopyType::kF32 && dt == CopyType::kBF16)
    return launch<float, __nv_bfloat16>(src, dst, l, s);
  if (st == CopyType::kBF16 && dt == CopyType::kF32)
    return launch<__nv_bfloat16, float>(src, dst, l, s);
  if (st != dt) return cudaErrorInvalidValue;
  switch (st) {
    case CopyType::kBF16:
    case CopyType::kBits16:
      return launch<uint16_t, uint16_t>(src, dst, l, s);
    case CopyType::kBits8:
      return launch<uint8_t, uint8_t>(src, dst, l, s);
    default:
      return launch<uint32_t, uint32_t>(src, dst, l, s);
  }
}

cudaError_t copy_rows(const void* src, int64_t src_stride, void* dst, int64_t dst_stride,
                      const int32_t* rows, int64_t n, int64_t row_bytes, bool scatter,
                      cudaStream_t stream) {
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  const bool vec = row_bytes % 16 == 0 && src_stride % 16 == 0 && dst_stride % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const int64_t units = vec ? row_bytes / 16 : row_bytes;
  const int threads = units >= 256 ? 256 : (units >= 64 ? 64 : 32);
  launch(copy_rows_kernel, static_cast<unsigned>(n), threads, 0, stream,
         static_cast<const char*>(src), src_stride, static_cast<char*>(dst), dst_stride, rows,
         row_bytes, scatter, vec);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
