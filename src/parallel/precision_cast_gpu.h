// bf16/f16 <-> f32 conversion on the device, so that NCCL reductions add in fp32. Kept free of
// project headers: nvcc compiles it, and fmt does not build under nvcc's C++20 mode.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls {

void widen_to_f32(const void* in, bool bf16, float* out, int64_t n, cudaStream_t stream);
void narrow_from_f32(const float* in, void* out, bool bf16, int64_t n, cudaStream_t stream);

}  // namespace mls
