#include "core/cuda_allocator.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_context.h"
#include "core/error.h"

namespace mls {
namespace {

cudaMemPool_t pool_of(int device) {
  cudaMemPool_t pool = nullptr;
  cuda::check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  return pool;
}

// The stream this thread allocates on: its bound stream when it is on this device, else the
// legacy stream of the device (made current, as cudaMalloc would need).
cudaError_t stream_for(int device, cudaStream_t* s) {
  *s = nullptr;
  if (cuda::bound_device() == device) {
    *s = cuda::stream();
    return cudaSuccess;
  }
  return cudaSetDevice(device);
}

cudaStream_t stream_for(int device) {
  cudaStream_t s = nullptr;
  cuda::check(stream_for(device, &s), "cudaSetDevice");
  return s;
}

}  // namespace

CudaAllocator::CudaAllocator(int device) : device_(device) {
  // Keep freed memory in the pool instead of returning it at every synchronisation.
  uint64_t keep = UINT64_MAX;
  cuda::check(cudaMemPoolSetAttribute(pool_of(device), cudaMemPoolAttrReleaseThreshold, &keep),
              "cudaMemPoolSetAttribute");
}

CudaAllocator::~CudaAllocator() {
  release_step_workspace();
}

void* CudaAllocator::raw_allocate(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, stream_for(device_));
  if (e == cudaErrorMemoryAllocation) {  // cached blocks of other sizes may be in the way
    cudaGetLastError();
    trim();
    e = cudaMallocAsync(&p, bytes, stream_for(device_));
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    int64_t free_b = 0, total_b = 0;
    cuda_memory_info(device_, &free_b, &total_b);
    raise<OutOfMemory>("cuda:{}: allocating {} bytes failed ({}); {} of {} bytes free", device_,
                       bytes, cudaGetErrorString(e), free_b, total_b);
  }
  return p;
}

// Never throws: owners destroyed at process exit (function-static runners) free after the CUDA
// runtime has begun unloading, when the device cannot be made current and the driver reclaims
// the memory anyway.
void CudaAllocator::raw_deallocate(void* p) {
  cudaStream_t s = nullptr;
  if (stream_for(device_, &s) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  cudaFreeAsync(p, s);
}

int64_t CudaAllocator::reserved_bytes() const {
  uint64_t v = 0;
  cuda::check(cudaMemPoolGetAttribute(pool_of(device_), cudaMemPoolAttrReservedMemCurrent, &v),
              "cudaMemPoolGetAttribute");
  return static_cast<int64_t>(v);
}

void CudaAllocator::trim() {
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cuda::check(cudaMemPoolTrimTo(pool_of(device_), 0), "cudaMemPoolTrimTo");
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void cuda_memory_info(int device, int64_t* free_bytes, int64_t* total_bytes) {
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  size_t f = 0, t = 0;
  const cudaError_t e = cudaMemGetInfo(&f, &t);
  cudaSetDevice(prev);
  cuda::check(e, "cudaMemGetInfo");
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
}

}  // namespace mls
