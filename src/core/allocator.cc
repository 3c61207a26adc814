#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace mls {

std::string_view mem_tag_name(MemTag t) {
  switch (t) {
    case MemTag::kWeights:
      return "weights";
    case MemTag::kKv:
      return "kv";
    case MemTag::kActivation:
      return "activation";
    case MemTag::kWorkspace:
      return "workspace";
    case MemTag::kComm:
      return "comm";
  }
  return "?";
}

Allocator::~Allocator() = default;

void Allocator::account(MemTag tag, int64_t delta) {
  std::lock_guard lock(mu_);
  account_locked(tag, delta);
}

void Allocator::account_locked(MemTag tag, int64_t delta) {
  const int i = static_cast<int>(tag);
  if (delta > 0 && fail_countdown_ > 0 && --fail_countdown_ == 0)
    throw OutOfMemory(fmt::format("{}: injected failure allocating {} bytes of {}", device().str(),
                                  delta, mem_tag_name(tag)));
  if (delta > 0 && limit_ >= 0 && stats_.current_total + delta > limit_) {
    throw OutOfMemory(
        fmt::format("{}: allocating {} bytes of {} would exceed the limit of {} "
                    "bytes ({} in use)",
                    device().str(), delta, mem_tag_name(tag), limit_, stats_.current_total));
  }
  stats_.current[i] += delta;
  stats_.current_total += delta;
  if (stats_.current[i] > stats_.peak[i]) stats_.peak[i] = stats_.current[i];
  if (stats_.current_total > stats_.peak_total) stats_.peak_total = stats_.current_total;
}

Allocation Allocator::allocate(size_t bytes, MemTag tag) {
  if (bytes == 0) return {};
  const auto n = static_cast<int64_t>(bytes);
  Allocation a;
  if (in_step_ && step_arena_tag(tag)) {
    std::lock_guard lock(mu_);
    account_locked(tag, n);
    a.arena_offset = arena_.allocate(n);
    if (a.arena_offset < 0) {
      account_locked(tag, -n);
      throw OutOfMemory(fmt::format(
          "{}: allocating {} bytes of {} does not fit the step workspace of {} bytes ({} in use "
          "by this step)",
          device().str(), n, mem_tag_name(tag), arena_.capacity(), arena_.live_bytes()));
    }
    if (recording_) recorded_.push_back(a.arena_offset);
    if (region_ && !meta_) {
      a.ptr = region_ + a.arena_offset;
      return a;
    }
  } else {
    account(tag, n);
  }
  if (meta_) return a;
  try {
    a.ptr = raw_allocate(bytes);
  } catch (...) {
    std::lock_guard lock(mu_);
    if (a.arena_offset >= 0) arena_.free(a.arena_offset);
    account_locked(tag, -n);
    throw;
  }
  return a;
}

void Allocator::deallocate(const Allocation& a, size_t bytes, MemTag tag) {
  if (bytes == 0) return;
  char* p = static_cast<char*>(a.ptr);
  // Memory inside the region is the arena's; anything else was backed on its own (outside a
  // step, or in a profile before the region existed).
  const bool in_region = region_ && p >= region_ && p < region_ + region_bytes_;
  if (p && !in_region) raw_deallocate(p);
  std::lock_guard lock(mu_);
  if (a.arena_offset >= 0) arena_.free(a.arena_offset);
  account_locked(tag, -static_cast<int64_t>(bytes));
}

void Allocator::begin_step() {
  if (in_step_) raise<InternalError>("{}: a step inside a step", device().str());
  std::lock_guard lock(mu_);
  recorded_.clear();
  in_step_ = true;
}

void Allocator::end_step() {
  in_step_ = false;
  std::lock_guard lock(mu_);
  if (arena_.live_blocks() > 0)
    raise<InternalError>("{}: {} step allocations ({} bytes) outlive their step", device().str(),
                         arena_.live_blocks(), arena_.live_bytes());
}

void Allocator::reserve_step_workspace(int64_t bytes) {
  std::lock_guard lock(mu_);
  if (arena_.live_blocks() > 0)
    raise<InternalError>("{}: reserving the step workspace while {} step allocations are alive",
                         device().str(), arena_.live_blocks());
  if (region_) raw_deallocate(region_);
  region_ = nullptr;
  region_bytes_ = bytes;
  arena_.set_capacity(bytes > 0 ? bytes : -1);
  if (bytes > 0 && !meta_) region_ = static_cast<char*>(raw_allocate(static_cast<size_t>(bytes)));
}

void Allocator::record_step_offsets(bool on) {
  std::lock_guard lock(mu_);
  recording_ = on;
  recorded_.clear();
}

std::vector<int64_t> Allocator::recorded_step_offsets() const {
  std::lock_guard lock(mu_);
  return recorded_;
}

MemStats Allocator::stats() const {
  std::lock_guard lock(mu_);
  MemStats s = stats_;
  s.step_high_water = arena_.high_water();
  s.step_workspace = region_bytes_;
  return s;
}

void Allocator::fail_nth_allocation(int64_t n) {
  std::lock_guard lock(mu_);
  fail_countdown_ = n;
}

void Allocator::reset_peaks() {
  std::lock_guard lock(mu_);
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
  arena_.reset_high_water();
}

void Allocator::release_step_workspace() noexcept {
  if (region_) raw_deallocate(region_);
  region_ = nullptr;
}

CpuAllocator::~CpuAllocator() {
  release_step_workspace();
}

void* CpuAllocator::raw_allocate(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) raise<OutOfMemory>("cpu: out of host memory allocating {} bytes", bytes);
  return p;
}

void CpuAllocator::raw_deallocate(void* p) {
  std::free(p);
}

void* MetaAllocator::raw_allocate(size_t bytes) {
  raise<InternalError>("{}: a meta allocator cannot back {} bytes", device_.str(), bytes);
}

Allocator& default_allocator() {
  static CpuAllocator a;
  return a;
}

}  // namespace mls
