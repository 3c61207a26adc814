// 16-byte stores of eight fp32 values, shared by the bandwidth-bound kernels (norms,
// elementwise): converted to bf16 (one uint4) or as two float4. p must be 16-byte aligned.
#pragma once

#include <cuda_bf16.h>

namespace mls::ops::cuda::kernels {

__device__ inline void store8(__nv_bfloat16* p, const float* v) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}

__device__ inline void store8(float* p, const float* v) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

}  // namespace mls::ops::cuda::kernels
