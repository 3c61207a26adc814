// Launcher for rotary position embedding (rope_kernels.cu). Plain types only: this header is
// included by nvcc-compiled code, which cannot see fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace mls::ops::cuda::kernels {

inline constexpr int kMaxRopeHalf = 64;

// The RopeTable's frequencies, passed to the kernel by value (dim/2 <= kMaxRopeHalf).
struct RopeFreqs {
  float inv_freq[kMaxRopeHalf] = {};
  float scaling = 1.0f;
  int half = 0;
};

// Rotates x[t, h, offset : offset + 2·half] in place by positions[t] (device i32 [tokens]);
// x is bf16 or f32 with unit inner stride. Interleaved input pairs are written half-split.
cudaError_t launch_apply_rope(void* x, DType dtype, int64_t tokens, int64_t heads,
                              int64_t token_stride, int64_t head_stride, int64_t offset,
                              const int32_t* positions, const RopeFreqs& freqs, bool interleaved,
                              cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
