#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "parallel/device_reduce_kernels.h"

namespace mls::device_reduce {
namespace {

__device__ __forceinline__ float load(const void* p, Elem t, int64_t i) {
  switch (t) {
    case Elem::kF32:
      return static_cast<const float*>(p)[i];
    case Elem::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case Elem::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
  return 0.0f;
}

__device__ __forceinline__ void store(void* p, Elem t, int64_t i, float v) {
  switch (t) {
    case Elem::kF32:
      static_cast<float*>(p)[i] = v;
      break;
    case Elem::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v);
      break;
    case Elem::kF16:
      static_cast<__half*>(p)[i] = __float2half(v);
      break;
  }
}

__global__ void sum_ranks_kernel(RankPtrs in, int ranks, Elem in_type, int64_t offset, int64_t n,
                                 void* out, Elem out_type) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int r = 0; r < ranks; ++r) acc += load(in.p[r], in_type, offset + i);
    store(out, out_type, i, acc);
  }
}

}  // namespace

cudaError_t launch_sum_ranks(const RankPtrs& in, int ranks, Elem in_type, int64_t offset, int64_t n,
                             void* out, Elem out_type, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (ranks < 1 || ranks > kMaxRanks) return cudaErrorInvalidValue;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 8192 ? blocks : 8192);
  sum_ranks_kernel<<<grid, kThreads, 0, stream>>>(in, ranks, in_type, offset, n, out, out_type);
  return cudaGetLastError();
}

}  // namespace mls::device_reduce
