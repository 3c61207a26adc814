// 2^x on the multi-function unit with subnormal results flushed to zero (ex2.approx.ftz.f32).
// exp2f compiles to ex2.approx.f32, whose subnormal results cost a compare and two multiplies
// around the same MUFU.EX2; the emulator (emu/include) has its own twin of this header.
#pragma once

namespace mls::ops::cuda::kernels {

__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace mls::ops::cuda::kernels
