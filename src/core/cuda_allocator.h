// The tracked allocator on an NVIDIA GPU, counted per tag like every other allocation. Memory
// comes from the device's stream-ordered pool (cudaMallocAsync on the calling thread's stream,
// release threshold unlimited): a freed block is reused by the next allocation without a
// device-wide synchronisation, which a plain cudaFree would force on every activation.
#pragma once

#include "core/allocator.h"

namespace mls {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device);
  ~CudaAllocator() override;
  Device device() const override { return Device::cuda(device_); }
  // Bytes the pool holds from the driver, in use or cached (>= the tracked current total).
  int64_t reserved_bytes() const;
  // Returns cached, unused pool memory to the driver.
  void trim();

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* p) override;

 private:
  int device_;
};

// Number of visible CUDA devices (0 when there is no driver or no GPU).
int cuda_device_count();
// Free and total bytes of a device (cudaMemGetInfo).
void cuda_memory_info(int device, int64_t* free_bytes, int64_t* total_bytes);

}  // namespace mls
