// The per-token 128-group FP8 activation quantisation, written once for the kernel that
// quantises apart (fp8_quant_kernels.cu) and the skinny GEMMs that quantise in their loads (the
// FP8 linear's and the grouped experts'), so that both give the same bits: scale = amax / 448
// (1 for an all-zero group), q = e4m3(x / scale), saturating.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

__device__ __forceinline__ float fp8_absmax(float amax, float v) {
  return fmaxf(amax, fabsf(v));
}

// The scale of a group held by kLanes aligned consecutive lanes, from each lane's amax (max is
// exact in any order, so how the group is spread over lanes does not change it).
template <int kLanes>
__device__ __forceinline__ float fp8_group_scale(float amax) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  // An all-zero group gets scale 1 so that q = x / scale stays 0 rather than NaN.
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

// The e4m3 codes of four consecutive values, the first in the low byte. A division, not a
// multiplication by 1 / scale: that would round differently. Two values per conversion
// instruction, each rounded alone (the codes of __nv_cvt_float_to_fp8 in half the instructions).
__device__ __forceinline__ uint32_t fp8_quant4(float v0, float v1, float v2, float v3,
                                               float scale) {
  const uint32_t lo =
      __nv_cvt_float2_to_fp8x2(make_float2(v0 / scale, v1 / scale), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi =
      __nv_cvt_float2_to_fp8x2(make_float2(v2 / scale, v3 / scale), __NV_SATFINITE, __NV_E4M3);
  return lo | hi << 16;
}

// The two bf16 of a word as floats (exact): the low half is the first element.
__device__ __forceinline__ float bf16_lo(uint32_t w) {
  return __uint_as_float(w << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t w) {
  return __uint_as_float(w & 0xffff0000u);
}

// 16 bf16 of a K-contiguous row at k as 8 words (zeros past K or when !ok); vec: the row is
// 16-byte aligned (k is a multiple of 16 here).
__device__ __forceinline__ void load_bf16x16(const __nv_bfloat16* row, int64_t k, int64_t K,
                                             bool ok, bool vec, uint32_t (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = 0;
  if (!ok || k >= K) return;
  if (vec && k + 16 <= K) {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(row + k));
    const uint4 b = __ldg(reinterpret_cast<const uint4*>(row + k + 8));
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
    w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    return;
  }
  const auto* h = reinterpret_cast<const uint16_t*>(row);
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (k + i < K) w[i / 2] |= static_cast<uint32_t>(h[k + i]) << (16 * (i % 2));
}

// The skinny GEMMs' quantisation in their loads: the 4 lanes t4 = 0..3 of a token hold its
// 128-group between them, lane t4 the elements h·64 + t4·16 + 0..15 (h = 0, 1) as raw[h] (from
// load_bf16x16). Returns the group's scale and sets xv[h] to those elements' e4m3 codes, the 16
// bytes the lane would load from the separately quantised row.
__device__ __forceinline__ float fp8_quant_group4(const uint32_t (&raw)[2][8], uint4 (&xv)[2]) {
  float amax = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      amax = fp8_absmax(fp8_absmax(amax, bf16_lo(raw[h][i])), bf16_hi(raw[h][i]));
  const float scale = fp8_group_scale<4>(amax);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t q[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      q[i] = fp8_quant4(bf16_lo(raw[h][2 * i]), bf16_hi(raw[h][2 * i]), bf16_lo(raw[h][2 * i + 1]),
                        bf16_hi(raw[h][2 * i + 1]), scale);
    xv[h] = make_uint4(q[0], q[1], q[2], q[3]);
  }
  return scale;
}

}  // namespace mls::ops::cuda::kernels
