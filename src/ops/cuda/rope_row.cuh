// The rotation's arithmetic, shared by apply_rope (rope_kernels.cu) and the fused cache writes
// (cache_write_kernels.cu) so that a value rotated by either gets the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels::rope_row {

// cos and sin of the angle pos · inv_freq, times the table's scaling.
__device__ inline float2 cos_sin(int32_t pos, float inv_freq, float scaling) {
  // The fp32 angle, as transformers computes it; accurate cosf/sinf of that value.
  const float angle = static_cast<float>(pos) * inv_freq;
  return make_float2(cosf(angle) * scaling, sinf(angle) * scaling);
}

// The pair (a, b) rotated by cs = (cos, sin): the values of half-split positions i and i + half.
// Rounded products then a rounded sum, as the CPU computes them: no fused multiply-add, which
// the compiler could otherwise form differently in each kernel that inlines this.
__device__ inline float2 rotate(float a, float b, float2 cs) {
  return make_float2(__fsub_rn(__fmul_rn(a, cs.x), __fmul_rn(b, cs.y)),
                     __fadd_rn(__fmul_rn(b, cs.x), __fmul_rn(a, cs.y)));
}

}  // namespace mls::ops::cuda::kernels::rope_row
