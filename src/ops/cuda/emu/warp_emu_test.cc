// The emulated warp collectives (prelude.h's __syncwarp and shuffles over emu::warp_exchange):
// each waits only for the lanes of its own mask, so collectives of different masks in one warp
// proceed independently, as bar.warp.sync's rule has it on the device.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/cuda/emu/warp_probe.h"

namespace mls::ops::cuda::kernels {
namespace {

TEST(EmulatedWarp, CollectivesOfDifferentMasksProceedApart) {
  std::vector<int32_t> out(32, -1);
  launch_warp_mask_probe(out.data());
  for (int lane = 0; lane < 32; ++lane) {
    const int half_sum = lane < 16 ? 120 : 376;  // 0 + ... + 15, 16 + ... + 31
    EXPECT_EQ(out[lane], half_sum) << "lane " << lane;
  }
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
