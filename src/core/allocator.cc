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

void Allocator::account(MemTag tag, int64_t delta) {
  const int i = static_cast<int>(tag);
  std::lock_guard lock(mu_);
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

void* Allocator::allocate(size_t bytes, MemTag tag) {
  if (bytes == 0) return nullptr;
  account(tag, static_cast<int64_t>(bytes));
  if (meta_) return nullptr;
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (...) {
    account(tag, -static_cast<int64_t>(bytes));
    throw;
  }
  return p;
}

void Allocator::deallocate(void* p, size_t bytes, MemTag tag) {
  if (bytes == 0) return;
  if (p) raw_deallocate(p);
  account(tag, -static_cast<int64_t>(bytes));
}

MemStats Allocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Allocator::fail_nth_allocation(int64_t n) {
  std::lock_guard lock(mu_);
  fail_countdown_ = n;
}

void Allocator::reset_peaks() {
  std::lock_guard lock(mu_);
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
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
