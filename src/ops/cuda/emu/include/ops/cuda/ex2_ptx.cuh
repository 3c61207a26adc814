// Emulation of ops/cuda/ex2_ptx.cuh: 2^x with results below the smallest normal float flushed
// to zero, as ex2.approx.ftz.f32 gives them.
#pragma once

#include <cfloat>
#include <cmath>

namespace mls::ops::cuda::kernels {

inline float exp2_ftz(float x) {
  const float y = std::exp2(x);
  return y < FLT_MIN ? 0.0f : y;
}

}  // namespace mls::ops::cuda::kernels
