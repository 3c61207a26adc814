#include <cstdint>

#include "ops/cuda/emu/warp_probe.h"
#include "ops/cuda/launch.cuh"

namespace mls::ops::cuda::kernels {
namespace {

__global__ void warp_mask_probe_kernel(int32_t* out) {
  const int lane = threadIdx.x & 31;
  if (lane == 0) __syncwarp(1u);  // waits for lane 0 alone
  __syncwarp();
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int sum = lane;
#pragma unroll
  for (int d = 8; d > 0; d >>= 1) sum += __shfl_xor_sync(half, sum, d);
  out[lane] = sum;
}

}  // namespace

void launch_warp_mask_probe(int32_t* out) {
  launch(warp_mask_probe_kernel, 1, 32, 0, nullptr, out);
}

}  // namespace mls::ops::cuda::kernels
