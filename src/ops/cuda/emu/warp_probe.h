// A probe of the emulated warp collectives (warp_probe.cu), for the emulator's own test
// (warp_emu_test.cc): collectives of different masks in one warp at once.
#pragma once

#include <cstdint>

namespace mls::ops::cuda::kernels {

// One warp. Lane 0 meets itself (__syncwarp(1)) while lanes 1-31 wait at a full-mask
// __syncwarp; then lanes 0-15 and 16-31 each sum their lane numbers by shuffles of their own
// half's mask. out[lane] = its half's sum.
void launch_warp_mask_probe(int32_t* out);

}  // namespace mls::ops::cuda::kernels
