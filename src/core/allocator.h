// The tracked allocator. Every byte the model, KV cache and engine use goes through one of these,
// tagged, so that the memory planner can read exact per-tag current and peak figures per rank.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/step_arena.h"

namespace mls {

enum class MemTag : uint8_t { kWeights, kKv, kActivation, kWorkspace, kComm };
inline constexpr int kNumMemTags = 5;
std::string_view mem_tag_name(MemTag t);

struct MemStats {
  std::array<int64_t, kNumMemTags> current{};
  std::array<int64_t, kNumMemTags> peak{};
  int64_t current_total = 0;
  int64_t peak_total = 0;
  // The step arena: its high-water mark since the last reset_peaks (the bytes the step
  // workspace must hold) and the region reserved for it (reserve_step_workspace; 0: none).
  int64_t step_high_water = 0;
  int64_t step_workspace = 0;

  int64_t cur(MemTag t) const { return current[static_cast<int>(t)]; }
  int64_t pk(MemTag t) const { return peak[static_cast<int>(t)]; }
};

// One allocation: its memory (null for 0 bytes and in meta mode) and, when the step arena placed
// it, its offset there (-1 otherwise).
struct Allocation {
  void* ptr = nullptr;
  int64_t arena_offset = -1;
};

// Whether a tag's allocations inside a step come from the step arena: activations and per-step
// op scratch do; weights, the KV cache, the GEMM library's lifetime workspace (taken at rank
// start-up, outside any step) and communicator buffers never do.
constexpr bool step_arena_tag(MemTag t) {
  return t == MemTag::kActivation || t == MemTag::kWorkspace;
}

class Allocator {
 public:
  virtual ~Allocator();
  // Returns 64-byte aligned memory (256-byte aligned from the step arena; nullptr only for
  // bytes == 0, or in meta mode).
  Allocation allocate(size_t bytes, MemTag tag);
  void deallocate(const Allocation& a, size_t bytes, MemTag tag);

  // The step scope (the runner opens one around each forward, profiles included): while it is
  // open, allocations of step_arena_tag tags are placed by the step arena, inside the reserved
  // step workspace when there is one (past it: OutOfMemory naming the tag), else backed one by
  // one as outside a step (a profile: the arena only measures). end_step throws InternalError
  // when a step allocation is still alive (it would move every later step's placement).
  void begin_step();
  void end_step();
  bool in_step() const { return in_step_; }
  class StepScope {
   public:
    explicit StepScope(Allocator& a) : a_(a) { a_.begin_step(); }
    ~StepScope() {
      if (open_) a_.in_step_ = false;
    }
    StepScope(const StepScope&) = delete;
    StepScope& operator=(const StepScope&) = delete;
    // Ends the step, checking that nothing of it outlives it.
    void close() {
      open_ = false;
      a_.end_step();
    }

   private:
    Allocator& a_;
    bool open_ = true;
  };
  // Reserves the step workspace: one region of `bytes` (none in meta mode) that every later
  // step's arena allocations live in, replacing any earlier one; 0 releases it.
  void reserve_step_workspace(int64_t bytes);
  // The arena's offsets of this step so far, in allocation order, when recording (tests: two
  // identical steps place every allocation at the same address).
  void record_step_offsets(bool on);
  std::vector<int64_t> recorded_step_offsets() const;

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
  // Frees the step workspace's memory: every allocator that backs memory calls it from its
  // destructor (raw_deallocate is gone by the base's).
  void release_step_workspace() noexcept;
  virtual void raw_deallocate(void* p) = 0;

 private:
  void account(MemTag tag, int64_t delta);
  void account_locked(MemTag tag, int64_t delta);

  mutable std::mutex mu_;
  MemStats stats_;
  StepArena arena_;
  std::atomic<bool> in_step_ = false;
  char* region_ = nullptr;  // the step workspace's memory (null: none, or meta)
  int64_t region_bytes_ = 0;
  bool recording_ = false;
  std::vector<int64_t> recorded_;
  int64_t limit_ = -1;
  int64_t fail_countdown_ = 0;
  std::atomic<bool> meta_ = false;
};

class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override;
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
