// Host memory a rank reuses for every step's inputs and outputs (token ids, positions, block
// tables, sampled ids, logits read back), allocated once from the serving limits. On a CUDA rank
// it is page-locked (cudaHostAlloc): copies from it are truly asynchronous, and a CUDA graph can
// capture them (a captured copy reads the buffer at its fixed address on every replay). On the
// CPU it is plain memory.
//
// A copy from page-locked memory runs when the stream reaches it, after the call returned, so
// the host must not rewrite the buffer before then: `mark_read_by_stream` records the point on
// the calling thread's stream, and `wait_writable` waits for it (a real wait only when the
// device is behind the host; nothing to wait for on the CPU or while a graph is captured).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mls {

class HostBuffer {
 public:
  HostBuffer() = default;
  // `pinned`: page-locked for the CUDA device this thread is bound to.
  HostBuffer(int64_t bytes, bool pinned);
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  template <class T>
  T* data() const {
    return static_cast<T*>(ptr_);
  }
  int64_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

  // Copies queued on this thread's stream read (or write) the buffer up to here.
  void mark_read_by_stream();
  // Waits until the copies marked last are done with the buffer.
  void wait_writable();

 private:
  void release() noexcept;

  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
  bool pinned_ = false;
  void* event_ = nullptr;  // cudaEvent_t of the last mark (pinned only)
  bool marked_ = false;
};

}  // namespace mls
