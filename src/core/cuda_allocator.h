// The tracked allocator on an NVIDIA GPU: plain cudaMalloc/cudaFree on one device, counted per
// tag like every other allocation. Built when the CUDA toolkit is present.
#pragma once

#include "core/allocator.h"

namespace mls {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  Device device() const override { return Device::cuda(device_); }

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* p) override;

 private:
  int device_;
};

// Number of visible CUDA devices (0 when there is no driver or no GPU).
int cuda_device_count();

}  // namespace mls
