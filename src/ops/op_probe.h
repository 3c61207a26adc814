// A hook that runs after each op, on any device, with the op's name: `mlaserve bench --timeline`
// sets one around a single step of a one-rank model to record where the device is after every op
// (a CUDA event). It is process-wide because a step's ops run on its rank's thread, not the
// caller's; nothing else sets one, so an op pays one atomic load.
#pragma once

#include <atomic>
#include <functional>

namespace mls::ops {

using OpProbe = std::function<void(const char* op)>;

inline std::atomic<const OpProbe*> op_probe{nullptr};

inline void after_op(const char* op) {
  if (const OpProbe* p = op_probe.load(std::memory_order_acquire)) (*p)(op);
}

// Sets `probe` while in scope.
class ScopedOpProbe {
 public:
  explicit ScopedOpProbe(const OpProbe& probe) {
    op_probe.store(&probe, std::memory_order_release);
  }
  ~ScopedOpProbe() { op_probe.store(nullptr, std::memory_order_release); }
  ScopedOpProbe(const ScopedOpProbe&) = delete;
  ScopedOpProbe& operator=(const ScopedOpProbe&) = delete;
};

}  // namespace mls::ops
