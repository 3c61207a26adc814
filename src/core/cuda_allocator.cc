#include "core/cuda_allocator.h"

#include <cuda_runtime.h>

#include "core/error.h"

namespace mls {

void* CudaAllocator::raw_allocate(size_t bytes) {
  if (cudaSetDevice(device_) != cudaSuccess)
    raise<Error>("cuda:{}: cannot select the device", device_);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free_b, &total_b);
    raise<OutOfMemory>("cuda:{}: cudaMalloc of {} bytes failed ({}); {} of {} bytes free", device_,
                       bytes, cudaGetErrorString(e), free_b, total_b);
  }
  return p;
}

void CudaAllocator::raw_deallocate(void* p) {
  cudaSetDevice(device_);
  cudaFree(p);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace mls
