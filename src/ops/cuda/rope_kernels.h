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

// Where a token's heads lie: element offset of the rotary part inside each head, and strides.
struct RopeView {
  int64_t token_stride = 0, head_stride = 0, offset = 0;
};

// Rotates src[t, h, offset : offset + 2·half] by positions[t] (device i32 [tokens]) into the same
// place of dst (dst == src with equal views: in place); bf16 or f32 with unit inner stride.
// Interleaved input pairs are written half-split.
cudaError_t launch_apply_rope(const void* src, const RopeView& sv, void* dst, const RopeView& dv,
                              DType dtype, int64_t tokens, int64_t heads, const int32_t* positions,
                              const RopeFreqs& freqs, bool interleaved, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
