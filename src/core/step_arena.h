// StepArena: the placement of everything one step allocates inside one fixed device region per
// rank (docs/memory-planning.md "The step workspace"). A deterministic offset allocator: sizes
// rounded up to kStepArenaAlignment, best fit over the free holes (the smallest hole that
// holds the request, the lowest offset among equals), a freed block coalesced with its free
// neighbours, and a request no hole holds placed at the top (the end of the highest block in
// use). It computes offsets only, so the very same placement is simulated without memory (meta
// mode, a profile) and applied to a real base pointer (serving): the same sequence of
// allocations and frees gives the same offsets, which is what CUDA graph replay needs.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>

namespace mls {

inline constexpr int64_t kStepArenaAlignment = 256;

class StepArena {
 public:
  // The offset of a block of `bytes` (> 0), or -1 when a capacity is set and the block would
  // end past it (nothing changes then).
  int64_t allocate(int64_t bytes);
  // Frees the block at `offset` (an offset allocate returned and not freed yet).
  void free(int64_t offset);

  // -1: unbounded (a profile measuring what the region must hold).
  void set_capacity(int64_t bytes) { capacity_ = bytes; }
  int64_t capacity() const { return capacity_; }
  // The largest end offset any block reached since the last reset: the bytes the region needs.
  int64_t high_water() const { return high_water_; }
  void reset_high_water() { high_water_ = top_; }
  // Bytes of the blocks in use (rounded sizes) and their count.
  int64_t live_bytes() const { return live_bytes_; }
  int64_t live_blocks() const { return static_cast<int64_t>(live_.size()); }

 private:
  void add_hole(int64_t offset, int64_t size);
  void remove_hole(std::map<int64_t, int64_t>::iterator it);

  std::map<int64_t, int64_t> live_;            // offset -> rounded size
  std::map<int64_t, int64_t> holes_;           // offset -> size, below top_, never adjacent
  std::set<std::pair<int64_t, int64_t>> fit_;  // (size, offset) of every hole
  int64_t top_ = 0;
  int64_t high_water_ = 0;
  int64_t live_bytes_ = 0;
  int64_t capacity_ = -1;
};

}  // namespace mls
