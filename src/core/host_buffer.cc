#include "core/host_buffer.h"

#include <cstdlib>
#include <utility>

#include "core/error.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_context.h"
#endif

namespace mls {

HostBuffer::HostBuffer(int64_t bytes, bool pinned) : bytes_(bytes), pinned_(pinned) {
  if (bytes <= 0) return;
  if (pinned) {
#ifdef MLASERVE_CUDA_RUNTIME
    cuda::check(cudaHostAlloc(&ptr_, static_cast<size_t>(bytes), cudaHostAllocPortable),
                "cudaHostAlloc");
    cudaEvent_t e = nullptr;
    cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    event_ = e;
    return;
#else
    raise<Unsupported>("page-locked host memory needs the CUDA runtime, which this build lacks");
#endif
  }
  ptr_ = std::aligned_alloc(64, (static_cast<size_t>(bytes) + 63) / 64 * 64);
  if (!ptr_) raise<OutOfMemory>("host staging: allocating {} bytes failed", bytes);
}

HostBuffer::~HostBuffer() {
  release();
}

HostBuffer::HostBuffer(HostBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      pinned_(o.pinned_),
      event_(std::exchange(o.event_, nullptr)),
      marked_(std::exchange(o.marked_, false)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    pinned_ = o.pinned_;
    event_ = std::exchange(o.event_, nullptr);
    marked_ = std::exchange(o.marked_, false);
  }
  return *this;
}

void HostBuffer::release() noexcept {
  if (!ptr_) return;
#ifdef MLASERVE_CUDA_RUNTIME
  if (pinned_) {
    // A copy still reading the buffer must finish before the memory goes.
    if (marked_) cudaEventSynchronize(static_cast<cudaEvent_t>(event_));
    cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    cudaFreeHost(ptr_);
    ptr_ = nullptr;
    return;
  }
#endif
  std::free(ptr_);
  ptr_ = nullptr;
}

void HostBuffer::mark_read_by_stream() {
#ifdef MLASERVE_CUDA_RUNTIME
  if (!pinned_ || !ptr_) return;
  // A captured step's copies run at its replays, which the runner orders itself.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cuda::check(cudaStreamIsCapturing(cuda::stream(), &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) return;
  cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(event_), cuda::stream()), "cudaEventRecord");
  marked_ = true;
#endif
}

void HostBuffer::wait_writable() {
#ifdef MLASERVE_CUDA_RUNTIME
  if (!marked_) return;
  cuda::check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "cudaEventSynchronize");
  marked_ = false;
#endif
}

}  // namespace mls
