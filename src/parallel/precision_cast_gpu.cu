#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "parallel/precision_cast_gpu.h"

namespace mls {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void to_f32(const T* in, float* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(in[i]);
}

template <class T>
__global__ void from_f32(const float* in, T* out, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<T>(in[i]);
}

unsigned blocks(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

}  // namespace

void widen_to_f32(const void* in, bool bf16, float* out, int64_t n, cudaStream_t stream) {
  if (bf16)
    to_f32<<<blocks(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), out, n);
  else
    to_f32<<<blocks(n), kThreads, 0, stream>>>(static_cast<const __half*>(in), out, n);
}

void narrow_from_f32(const float* in, void* out, bool bf16, int64_t n, cudaStream_t stream) {
  if (bf16)
    from_f32<<<blocks(n), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), n);
  else
    from_f32<<<blocks(n), kThreads, 0, stream>>>(in, static_cast<__half*>(out), n);
}

}  // namespace mls
