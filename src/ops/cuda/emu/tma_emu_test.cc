// The emulated TMA (emu/include/ops/cuda/tma_ptx.cuh) and mbarrier transaction bytes, through a
// one-box probe (tma_probe.cu): a box lands as the PTX places it (128-byte swizzle, zeros past
// the tensor's edges on either side), only once its bytes have completed the barrier's phase;
// a CTA that exits with a copy in flight is a fault; the encoder refuses what the driver's does.
// And a bulk store from shared memory (a second probe) reads its source at its wait.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/emu/tma_probe.h"

namespace mls::ops::cuda::kernels {
namespace {

constexpr uint64_t kCols = 200, kRows = 70, kLd = 208;

std::vector<uint8_t> tensor() {
  std::vector<uint8_t> t(kRows * kLd);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint8_t>(1 + i % 251);  // no zeros
  return t;
}

TEST(EmulatedTma, BoxesLandSwizzledWithZerosPastTheEdges) {
  const std::vector<uint8_t> src = tensor();
  constexpr uint32_t kBoxCols = 128, kBoxRows = 32;
  // Inside; past the last columns and rows; before the first ones.
  for (const auto& [x, y] : {std::pair{0, 0}, {128, 50}, {-16, -3}, {64, 38}}) {
    std::vector<uint8_t> out(kBoxCols * kBoxRows, 0xee);
    ASSERT_EQ(
        launch_tma_probe(src.data(), kCols, kRows, kLd, kBoxCols, kBoxRows, x, y, true, out.data()),
        cudaSuccess);
    int mismatches = 0;
    for (uint32_t r = 0; r < kBoxRows; ++r)
      for (uint32_t c = 0; c < kBoxCols; ++c) {
        const int64_t gx = x + int64_t{c}, gy = y + int64_t{r};
        const bool in = gx >= 0 && gy >= 0 && gx < int64_t{kCols} && gy < int64_t{kRows};
        const uint8_t want = in ? src[gy * kLd + gx] : 0;
        mismatches += out[r * kBoxCols + c] != want;
      }
    EXPECT_EQ(mismatches, 0) << "box at (" << x << ", " << y << ")";
  }
}

// Only the default order leaves a copy in flight (a seeded one lands it when issued).
TEST(EmulatedTma, ExitWithACopyInFlightIsAFault) {
  const char* seed = std::getenv("MLS_EMU_SCHEDULE_SEED");
  if (seed != nullptr && seed[0] != '\0' && std::strtoul(seed, nullptr, 10) != 0)
    GTEST_SKIP() << "a seeded order lands bulk copies when they are issued";
  const std::vector<uint8_t> src = tensor();
  std::vector<uint8_t> out(128 * 8);
  EXPECT_THROW(launch_tma_probe(src.data(), kCols, kRows, kLd, 128, 8, 0, 0, false, out.data()),
               emu::KernelFault);
}

// A bulk store reads its source when its thread waits for the read, once the other threads have
// run as far as they can: a write into it before that wait shows.
TEST(EmulatedTma, BulkStoresReadSharedMemoryAtTheirWait) {
  std::vector<uint8_t> out(16, 0);
  ASSERT_EQ(launch_bulk_store_probe(false, out.data()), cudaSuccess);
  EXPECT_EQ(out, std::vector<uint8_t>(16, 1));
  ASSERT_EQ(launch_bulk_store_probe(true, out.data()), cudaSuccess);
  EXPECT_EQ(out, std::vector<uint8_t>(16, 2));
}

TEST(EmulatedTma, EncodingRefusesWhatTheDriverRefuses) {
  const std::vector<uint8_t> src = tensor();
  std::vector<uint8_t> out(128 * 8);
  const auto probe = [&](const void* base, uint64_t ld, uint32_t box_cols, uint32_t box_rows) {
    return launch_tma_probe(base, kCols, kRows, ld, box_cols, box_rows, 0, 0, true, out.data());
  };
  EXPECT_EQ(probe(src.data() + 1, kLd, 128, 8), cudaErrorInvalidValue);  // base not 16-aligned
  EXPECT_EQ(probe(src.data(), 204, 128, 8), cudaErrorInvalidValue);      // stride not 16 · n
  EXPECT_EQ(probe(src.data(), kLd, 144, 8), cudaErrorInvalidValue);      // past the swizzle span
  EXPECT_EQ(probe(src.data(), kLd, 128, 257), cudaErrorInvalidValue);    // box rows > 256
  EXPECT_EQ(probe(src.data(), kLd, 128, 8), cudaSuccess);
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
