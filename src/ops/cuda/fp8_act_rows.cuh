// The arithmetic of an FP8 linear's input quantisation (ops/cuda/fp8_act_kernels.h): per token,
// each 128-wide group of K gets scale = amax / 448 (1 for an all-zero group) and its values
// q = x / scale rounded to e4m3, saturating. The quantisation kernel and the producers that write
// the quantised rows themselves (the norms, silu·mul) all compute it here, so that a linear gets
// the same bytes from either.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace mls::ops::cuda::kernels::fp8_act {

// An all-zero group gets scale 1 so that q = x / scale stays 0 rather than NaN.
__device__ __forceinline__ float group_scale(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

// n (<= 8) values quantised with `scale`, packed little-endian.
template <int N>
__device__ __forceinline__ uint64_t pack(const float* v, float scale) {
  uint64_t packed = 0;
#pragma unroll
  for (int i = 0; i < N; ++i)
    packed |= static_cast<uint64_t>(__nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3))
              << (8 * i);
  return packed;
}

// Where the scale of token t's K block kb goes: tokens t < t_lead token-major per K block
// (cuBLASLt's VEC128 layout for the leading tokens it takes), the rest after them in the same
// form.
__device__ __forceinline__ int64_t scale_index(int64_t t, int64_t kb, int64_t T, int64_t KB,
                                               int64_t t_lead) {
  return t < t_lead ? kb * t_lead + t : KB * t_lead + kb * (T - t_lead) + (t - t_lead);
}

}  // namespace mls::ops::cuda::kernels::fp8_act
