// silu(a) · b as every CUDA kernel computes it (ops::silu_mul, and the quantising silu·mul of the
// FP8 linears' input), so that both give the same bits.
#pragma once

namespace mls::ops::cuda::kernels {

__device__ __forceinline__ float silu_mul_value(float a, float b) {
  return a / (1.0f + expf(-a)) * b;
}

}  // namespace mls::ops::cuda::kernels
