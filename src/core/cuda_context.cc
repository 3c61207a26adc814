#include "core/cuda_context.h"

#include <cuda_profiler_api.h>

#include <map>
#include <memory>
#include <mutex>

#include "core/allocator.h"
#include "core/cuda_allocator.h"
#include "core/error.h"

namespace mls::cuda {
namespace {

struct ThreadBinding {
  int device = -1;
  cudaStream_t stream = nullptr;
  Allocator* alloc = nullptr;
};

thread_local ThreadBinding t_binding;

}  // namespace

void check(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so the next call reports its own
  raise<Error>("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void bind(int device, Allocator* alloc) {
  ThreadBinding& b = t_binding;
  if (b.device != device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    // A stream of our own, never the legacy default stream: it does not serialise with other
    // threads' work on the same device (tests run several ranks on one GPU).
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    b.device = device;
    b.stream = s;
  }
  if (alloc) b.alloc = alloc;
}

int device() {
  if (t_binding.device < 0) bind(0);
  return t_binding.device;
}

int bound_device() {
  return t_binding.device;
}

cudaStream_t stream() {
  if (t_binding.device < 0) bind(0);
  return t_binding.stream;
}

Allocator& allocator() {
  if (t_binding.alloc) return *t_binding.alloc;
  // Tools and tests that bind no rank allocator share one tracked allocator per device.
  static std::mutex mu;
  static std::map<int, std::unique_ptr<CudaAllocator>> per_device;
  const int d = device();
  std::lock_guard lock(mu);
  auto& a = per_device[d];
  if (!a) a = std::make_unique<CudaAllocator>(d);
  return *a;
}

void synchronize() {
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

void profiler_start() {
  check(cudaProfilerStart(), "cudaProfilerStart");
}

void profiler_stop() {
  check(cudaProfilerStop(), "cudaProfilerStop");
}

}  // namespace mls::cuda
