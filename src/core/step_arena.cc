#include "core/step_arena.h"

#include <algorithm>

#include "core/error.h"

namespace mls {

int64_t StepArena::allocate(int64_t bytes) {
  if (bytes <= 0) raise<InternalError>("step arena: allocating {} bytes", bytes);
  const int64_t size =
      (bytes + kStepArenaAlignment - 1) / kStepArenaAlignment * kStepArenaAlignment;
  int64_t offset = top_;
  const auto fit = fit_.lower_bound({size, 0});
  if (fit != fit_.end()) {
    offset = fit->second;
    const int64_t hole = fit->first;
    remove_hole(holes_.find(offset));
    if (hole > size) add_hole(offset + size, hole - size);
  } else {
    if (capacity_ >= 0 && top_ + size > capacity_) return -1;
    top_ += size;
    high_water_ = std::max(high_water_, top_);
  }
  live_.emplace(offset, size);
  live_bytes_ += size;
  return offset;
}

void StepArena::free(int64_t offset) {
  const auto it = live_.find(offset);
  if (it == live_.end()) raise<InternalError>("step arena: no block at offset {}", offset);
  int64_t start = offset, end = offset + it->second;
  live_bytes_ -= it->second;
  live_.erase(it);
  // Coalesce with the free neighbours: the hole ending at `start` and the one starting at `end`.
  auto next = holes_.lower_bound(start);
  if (next != holes_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      remove_hole(prev);
    }
  }
  next = holes_.find(end);
  if (next != holes_.end()) {
    end += next->second;
    remove_hole(next);
  }
  if (end == top_)
    top_ = start;  // free space at the top is no hole: the top comes down
  else
    add_hole(start, end - start);
}

void StepArena::add_hole(int64_t offset, int64_t size) {
  holes_.emplace(offset, size);
  fit_.emplace(size, offset);
}

void StepArena::remove_hole(std::map<int64_t, int64_t>::iterator it) {
  fit_.erase({it->second, it->first});
  holes_.erase(it);
}

}  // namespace mls
