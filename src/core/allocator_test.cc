#include "core/allocator.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mls {
namespace {

TEST(Allocator, TracksPeaksPerTag) {
  CpuAllocator a;
  Allocation w = a.allocate(1000, MemTag::kWeights);
  Allocation x = a.allocate(500, MemTag::kActivation);
  a.deallocate(x, 500, MemTag::kActivation);
  Allocation y = a.allocate(200, MemTag::kActivation);
  MemStats s = a.stats();
  EXPECT_EQ(s.cur(MemTag::kWeights), 1000);
  EXPECT_EQ(s.cur(MemTag::kActivation), 200);
  EXPECT_EQ(s.pk(MemTag::kActivation), 500);
  EXPECT_EQ(s.peak_total, 1500);
  a.reset_peaks();
  EXPECT_EQ(a.stats().pk(MemTag::kActivation), 200);
  a.deallocate(y, 200, MemTag::kActivation);
  a.deallocate(w, 1000, MemTag::kWeights);
  EXPECT_EQ(a.stats().current_total, 0);
}

TEST(Allocator, LimitThrowsAndLeavesCountsUnchanged) {
  CpuAllocator a;
  a.set_limit(100);
  Allocation p = a.allocate(64, MemTag::kKv);
  EXPECT_THROW(a.allocate(64, MemTag::kActivation), OutOfMemory);
  EXPECT_EQ(a.stats().current_total, 64);
  a.deallocate(p, 64, MemTag::kKv);
}

TEST(Allocator, MetaModeCountsWithoutMemory) {
  CpuAllocator a;
  a.set_meta(true);
  Allocation p = a.allocate(size_t{1} << 40, MemTag::kActivation);
  EXPECT_EQ(p.ptr, nullptr);
  EXPECT_EQ(a.stats().pk(MemTag::kActivation), int64_t{1} << 40);
  a.deallocate(p, size_t{1} << 40, MemTag::kActivation);
  EXPECT_EQ(a.stats().current_total, 0);
}

}  // namespace
}  // namespace mls
