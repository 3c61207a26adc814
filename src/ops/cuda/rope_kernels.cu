#include <cuda_bf16.h>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/rope_kernels.h"
#include "ops/cuda/rope_row.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

__device__ inline float to_f(float v) {
  return v;
}
__device__ inline float to_f(bf16 v) {
  return __bfloat162float(v);
}
__device__ inline void store(float* p, float v) {
  *p = v;
}
__device__ inline void store(bf16* p, float v) {
  *p = __float2bfloat16_rn(v);
}

constexpr int kSlots = kMaxRopeHalf / 32;  // pairs per lane
constexpr int kHeadsPerPass = 8;           // heads whose loads a warp has in flight at once

// One block per token: the token's cos/sin are computed once into shared memory; each warp then
// rotates heads warp, warp + warps, ..., eight at a time (all their loads issued before any
// store), a lane per pair so that a warp reads a head's pairs together, coalesced. Every lane
// reads before any lane writes: interleaved input lands at other positions (half-split output),
// and in place src == dst.
template <class T>
__global__ void __launch_bounds__(256)
    rope_kernel(const T* src, RopeView sv, T* dst, RopeView dv, int64_t heads,
                const int32_t* positions, RopeFreqs f, bool interleaved) {
  pdl_begin();
  __shared__ float cs[kMaxRopeHalf], sn[kMaxRopeHalf];
  const int64_t t = blockIdx.x;
  const int half = f.half;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 r = rope_row::cos_sin(positions[t], f.inv_freq[i], f.scaling);
    cs[i] = r.x;
    sn[i] = r.y;
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int warps = blockDim.x / 32;
  const T* token = src + t * sv.token_stride + sv.offset;
  T* out = dst + t * dv.token_stride + dv.offset;
  for (int64_t h0 = threadIdx.x / 32; h0 < heads;
       h0 += static_cast<int64_t>(warps) * kHeadsPerPass) {
    // Raw values: converting right after a load would wait for it, serialising the heads.
    T a[kHeadsPerPass][kSlots], b[kHeadsPerPass][kSlots];
#pragma unroll
    for (int g = 0; g < kHeadsPerPass; ++g) {
      const int64_t h = h0 + static_cast<int64_t>(g) * warps;
      if (h >= heads) continue;
      const T* v = token + h * sv.head_stride;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int i = lane + 32 * k;
        if (i >= half) continue;
        a[g][k] = interleaved ? v[2 * i] : v[i];
        b[g][k] = interleaved ? v[2 * i + 1] : v[i + half];
      }
    }
    __syncwarp();
#pragma unroll
    for (int g = 0; g < kHeadsPerPass; ++g) {
      const int64_t h = h0 + static_cast<int64_t>(g) * warps;
      if (h >= heads) continue;
      T* v = out + h * dv.head_stride;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        const int i = lane + 32 * k;
        if (i >= half) continue;
        const float2 r = rope_row::rotate(to_f(a[g][k]), to_f(b[g][k]), make_float2(cs[i], sn[i]));
        store(v + i, r.x);
        store(v + i + half, r.y);
      }
    }
  }
}

}  // namespace

cudaError_t launch_apply_rope(const void* src, const RopeView& sv, void* dst, const RopeView& dv,
                              DType dtype, int64_t tokens, int64_t heads, const int32_t* positions,
                              const RopeFreqs& freqs, bool interleaved, cudaStream_t stream) {
  if ((dtype != DType::kBF16 && dtype != DType::kF32) || freqs.half > kMaxRopeHalf)
    return cudaErrorInvalidValue;
  if (tokens == 0 || heads == 0 || freqs.half == 0) return cudaSuccess;
  // Up to 8 warps, no more than there are heads (one warp for a single-head [T, D] input).
  const int threads = 32 * static_cast<int>(heads < 8 ? heads : 8);
  const unsigned grid = static_cast<unsigned>(tokens);
  if (dtype == DType::kF32)
    launch(rope_kernel<float>, grid, threads, 0, stream, static_cast<const float*>(src), sv,
           static_cast<float*>(dst), dv, heads, positions, freqs, interleaved);
  else
    launch(rope_kernel<bf16>, grid, threads, 0, stream, static_cast<const bf16*>(src), sv,
           static_cast<bf16*>(dst), dv, heads, positions, freqs, interleaved);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
