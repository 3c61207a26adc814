// The tracked allocator. Every byte the model, KV cache and engine use goes through one of these,
// tagged, so that the memory planner can read exact per-tag current and peak figures per rank.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

#include "core/device.h"

namespace mls {

enum class MemTag : uint8_t { kWeights, kKv, kActivation, kWorkspace, kComm };
inline constexpr int kNumMemTags = 5;
std::string_view mem_tag_name(MemTag t);

struct MemStats {
  std::array<int64_t, kNumMemTags> current{};
  std::array<int64_t, kNumMemTags> peak{};
  int64_t current_total = 0;
  int64_t peak_total = 0;

  int64_t cur(MemTag t) const { return current[static_cast<int>(t)]; }
  int64_t pk(MemTag t) const { return peak[static_cast<int>(t)]; }
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns 64-byte aligned memory (nullptr only for bytes == 0, or in meta mode).
  void* allocate(size_t bytes, MemTag tag);
  void deallocate(void* p, size_t bytes, MemTag tag);

  MemStats stats() const;
  // Starts a new high-water-mark window: peaks become the current values.
  void reset_peaks();
  // An optional hard cap on the total: an allocation past it throws OutOfMemory naming the tag.
  void set_limit(int64_t bytes) { limit_ = bytes; }
  // Meta mode: allocations are counted with their true sizes but get no backing memory, so the
  // planner can trace a full-size forward without the memory (kernels skip compute meanwhile).
  void set_meta(bool on) { meta_ = on; }
  bool meta() const { return meta_; }
  // Fault injection for tests: the n-th allocation from now (n >= 1) throws OutOfMemory, as a
  // device that ran out would; 0 disarms it.
  void fail_nth_allocation(int64_t n);
  virtual Device device() const = 0;

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* p) = 0;

 private:
  void account(MemTag tag, int64_t delta);

  mutable std::mutex mu_;
  MemStats stats_;
  int64_t limit_ = -1;
  int64_t fail_countdown_ = 0;
  std::atomic<bool> meta_ = false;
};

class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* p) override;
};

// Sizes only, for any device kind: every allocation is counted and gets no memory, so a device
// this machine lacks (a GPU on a laptop) can be planned without its runtime.
class MetaAllocator final : public Allocator {
 public:
  explicit MetaAllocator(Device device) : device_(device) { set_meta(true); }
  Device device() const override { return device_; }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void*) override {}

 private:
  Device device_;
};

// One allocator per rank; rank 0's doubles as the process default for tools and tests.
Allocator& default_allocator();

}  // namespace mls
