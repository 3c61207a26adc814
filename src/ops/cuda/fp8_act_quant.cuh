// The per-token-group-128 activation quantisation of the FP8 GEMMs, written once for the
// stand-alone quantiser (launch_quantize_fp8_act) and for the GEMMs that quantise their bf16
// activations themselves (fused): the same scales and the same e4m3 bytes, bit for bit. A
// group's amax is a max, which no reduction order changes (fmaxf drops NaNs, starting from 0).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// scale = amax / 448 (e4m3's largest finite value); an all-zero group gets scale 1 so that
// q = x / scale stays 0 rather than NaN.
__device__ __forceinline__ float fp8_group_scale(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

// Four values quantised to e4m3 (saturating), byte i of the word holding v[i].
__device__ __forceinline__ uint32_t fp8_quantize4(float v0, float v1, float v2, float v3,
                                                  float scale) {
  const float v[4] = {v0, v1, v2, v3};
  uint32_t packed = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    packed |= static_cast<uint32_t>(__nv_cvt_float_to_fp8(v[i] / scale, __NV_SATFINITE, __NV_E4M3))
              << (8 * i);
  return packed;
}

// ---- Fused: one token's 128-wide K block in the GEMMs' MMA operand layout ---------------------
//
// The skinny and grouped FP8 GEMMs give lane (g, t4) the 16 K slots h·64 + t4·16 + [0, 16) of
// both halves h of a 128-wide block for token g, so the lane quad of one g covers the token's
// whole group: it loads those 32 bf16 values, takes the amax over the quad and quantises.

// The lane's 32 bf16 values of K block kb (raw bits; zero past K or when !ok): raw[2h], raw[2h+1]
// hold half h. vec: 16-byte loads (row 16-byte aligned and K % 16 == 0).
__device__ __forceinline__ void load_bf16_quad(const __nv_bfloat16* row, int64_t kb, int t4,
                                               int64_t K, bool ok, bool vec, uint4 (&raw)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t k = kb * 128 + h * 64 + t4 * 16;
    raw[2 * h] = raw[2 * h + 1] = make_uint4(0, 0, 0, 0);
    if (!ok || k >= K) continue;
    if (vec) {
      raw[2 * h] = __ldg(reinterpret_cast<const uint4*>(row + k));
      raw[2 * h + 1] = __ldg(reinterpret_cast<const uint4*>(row + k + 8));
    } else {
      uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (k + i < K)
          w[i / 2] |= static_cast<uint32_t>(__bfloat16_as_ushort(row[k + i])) << (16 * (i % 2));
      raw[2 * h] = make_uint4(w[0], w[1], w[2], w[3]);
      raw[2 * h + 1] = make_uint4(w[4], w[5], w[6], w[7]);
    }
  }
}

// Quantises load_bf16_quad's values into the 16 e4m3 bytes of each half (q[h], K order) and
// returns the group's scale. Every lane of the warp calls it (quad shuffles).
__device__ __forceinline__ float fp8_quantize_quad(const uint4 (&raw)[4], uint4 (&q)[2]) {
  float v[32];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint4& r = raw[i / 4];
    const uint32_t w = i % 4 == 0 ? r.x : i % 4 == 1 ? r.y : i % 4 == 2 ? r.z : r.w;
    v[2 * i] = __uint_as_float(w << 16);
    v[2 * i + 1] = __uint_as_float(w & 0xffff0000u);
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float scale = fp8_group_scale(amax);
  uint32_t w[8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
    w[i] = fp8_quantize4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3], scale);
  q[0] = make_uint4(w[0], w[1], w[2], w[3]);
  q[1] = make_uint4(w[4], w[5], w[6], w[7]);
  return scale;
}

}  // namespace mls::ops::cuda::kernels
