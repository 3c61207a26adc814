#include "core/step_arena.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"

namespace mls {
namespace {

TEST(StepArena, AlignsEveryBlockAndTracksTheHighWater) {
  StepArena a;
  const int64_t x = a.allocate(1), y = a.allocate(300), z = a.allocate(256);
  EXPECT_EQ(x, 0);
  EXPECT_EQ(y, 256);
  EXPECT_EQ(z, 768);
  EXPECT_EQ(a.high_water(), 1024);
  EXPECT_EQ(a.live_bytes(), 1024);
  a.free(z);
  a.free(y);
  EXPECT_EQ(a.high_water(), 1024);  // a mark, not the current top
  a.reset_high_water();
  EXPECT_EQ(a.high_water(), 256);
  a.free(x);
  EXPECT_EQ(a.live_blocks(), 0);
  EXPECT_THROW(a.free(x), InternalError);
}

TEST(StepArena, BestFitTakesTheSmallestHoleThenTheLowest) {
  StepArena a;
  const int64_t b0 = a.allocate(1024), s0 = a.allocate(256), b1 = a.allocate(512),
                s1 = a.allocate(256), b2 = a.allocate(512), s2 = a.allocate(256);
  a.free(b0);  // holes: 1024 at 0, 512 at 1280, 512 at 2048
  a.free(b1);
  a.free(b2);
  EXPECT_EQ(a.allocate(400), 1280);  // the smallest hole that holds it, the lower of two
  EXPECT_EQ(a.allocate(512), 2048);
  EXPECT_EQ(a.allocate(768), 0);     // only the large hole holds it
  EXPECT_EQ(a.allocate(256), 768);   // the rest of that hole
  EXPECT_EQ(a.allocate(256), 2816);  // no hole left: the top
  EXPECT_EQ(a.high_water(), 3072);
  (void)s0;
  (void)s1;
  (void)s2;
}

TEST(StepArena, FreedNeighboursCoalesceAndTheTopComesDown) {
  StepArena a;
  const int64_t x = a.allocate(256), y = a.allocate(256), z = a.allocate(256), w = a.allocate(256);
  a.free(x);
  a.free(z);
  a.free(y);  // x, y and z merge into one 768-byte hole
  EXPECT_EQ(a.allocate(768), 0);
  a.free(0);
  a.free(w);  // everything free: the top is back at 0, no hole left
  EXPECT_EQ(a.live_blocks(), 0);
  a.reset_high_water();
  EXPECT_EQ(a.high_water(), 0);
  EXPECT_EQ(a.allocate(4096), 0);
}

TEST(StepArena, CapacityRefusesWithoutChangingAnything) {
  StepArena a;
  a.set_capacity(1024);
  const int64_t x = a.allocate(512);
  EXPECT_EQ(a.allocate(768), -1);
  EXPECT_EQ(a.live_bytes(), 512);
  EXPECT_EQ(a.allocate(512), 512);
  a.free(x);
  EXPECT_EQ(a.allocate(256), 0);  // a hole below the capacity still serves
}

// A random program of allocations and frees: the same sequence gives the same offsets with and
// without a capacity at its high-water mark, never overlapping, and the live blocks never pass
// it.
TEST(StepArena, TheSameSequenceGivesTheSameOffsets) {
  struct Event {
    bool alloc;
    int64_t bytes_or_index;
  };
  std::mt19937 g(11);
  std::vector<Event> program;
  int live = 0;
  for (int i = 0; i < 4000; ++i) {
    if (live > 0 && g() % 3 == 0) {
      program.push_back({false, static_cast<int64_t>(g() % live)});
      --live;
    } else {
      program.push_back({true, 1 + static_cast<int64_t>(g() % 100000)});
      ++live;
    }
  }
  const auto run = [&](StepArena& a) {
    std::vector<int64_t> offsets, alive, sizes;
    for (const Event& e : program) {
      if (e.alloc) {
        const int64_t o = a.allocate(e.bytes_or_index);
        EXPECT_GE(o, 0);
        EXPECT_EQ(o % kStepArenaAlignment, 0);
        for (size_t j = 0; j < alive.size(); ++j)
          EXPECT_TRUE(o + e.bytes_or_index <= alive[j] || alive[j] + sizes[j] <= o);
        offsets.push_back(o);
        alive.push_back(o);
        sizes.push_back(e.bytes_or_index);
      } else {
        a.free(alive[e.bytes_or_index]);
        alive.erase(alive.begin() + e.bytes_or_index);
        sizes.erase(sizes.begin() + e.bytes_or_index);
      }
    }
    return offsets;
  };
  StepArena measure;
  const std::vector<int64_t> first = run(measure);
  StepArena bounded;
  bounded.set_capacity(measure.high_water());
  EXPECT_EQ(run(bounded), first);
  EXPECT_EQ(bounded.high_water(), measure.high_water());
}

// The allocator places a step's activations and workspace through the arena — in meta mode at
// the same offsets as over the reserved region — and everything else outside it.
TEST(StepArena, TheAllocatorPlacesStepsAlikeInMetaAndReal) {
  const auto step = [](Allocator& a) {
    a.record_step_offsets(true);
    Allocator::StepScope scope(a);
    {
      const Allocation x = a.allocate(1000, MemTag::kActivation);
      const Allocation w = a.allocate(3000, MemTag::kWorkspace);
      const Allocation c = a.allocate(64, MemTag::kComm);
      EXPECT_EQ(c.arena_offset, -1);
      a.deallocate(x, 1000, MemTag::kActivation);
      const Allocation y = a.allocate(500, MemTag::kActivation);
      a.deallocate(w, 3000, MemTag::kWorkspace);
      a.deallocate(y, 500, MemTag::kActivation);
      a.deallocate(c, 64, MemTag::kComm);
    }
    scope.close();
    return a.recorded_step_offsets();
  };
  CpuAllocator real;
  MetaAllocator meta(Device::cuda(0));
  const std::vector<int64_t> measured = step(real);
  EXPECT_EQ(measured, (std::vector<int64_t>{0, 1024, 0}));
  EXPECT_EQ(real.stats().step_high_water, 1024 + 3072);
  EXPECT_EQ(real.stats().pk(MemTag::kActivation), 1000);  // per-tag figures stay exact
  EXPECT_EQ(real.stats().peak_total, 4064);
  real.reserve_step_workspace(real.stats().step_high_water);
  meta.reserve_step_workspace(real.stats().step_high_water);
  EXPECT_EQ(step(real), measured);
  EXPECT_EQ(step(meta), measured);
  EXPECT_EQ(meta.stats().step_workspace, 4096);
  // A step that does not fit the workspace fails naming the tag; outside a step nothing does.
  {
    Allocator::StepScope scope(real);
    try {
      real.allocate(5000, MemTag::kWorkspace);
      FAIL() << "5000 bytes do not fit a 4096-byte step workspace";
    } catch (const OutOfMemory& e) {
      EXPECT_NE(std::string(e.what()).find("of workspace does not fit the step workspace"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(real.stats().current_total, 0);
  }
  const Allocation big = real.allocate(5000, MemTag::kWorkspace);
  EXPECT_EQ(big.arena_offset, -1);
  real.deallocate(big, 5000, MemTag::kWorkspace);
  // A step allocation outliving its step is refused at the step's end.
  Allocation kept;
  {
    Allocator::StepScope scope(real);
    kept = real.allocate(100, MemTag::kActivation);
    EXPECT_THROW(scope.close(), InternalError);
  }
  real.deallocate(kept, 100, MemTag::kActivation);
  real.reserve_step_workspace(0);
}

}  // namespace
}  // namespace mls
