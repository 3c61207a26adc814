#include "ops/cuda/device_facts.h"

#include <map>
#include <mutex>
#include <utility>

#include "ops/cuda/fp8_sum_model.h"

namespace mls::ops::cuda::kernels {

cudaError_t device_facts(int dev, DeviceFacts* f) {
  static std::mutex mu;
  static std::map<int, DeviceFacts> known;
  std::lock_guard lock(mu);
  auto it = known.find(dev);
  if (it == known.end()) {
    DeviceFacts d;
    cudaError_t e = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    int major = 0;
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) return e;
    d.fp8_sum_bits = major == 9 ? kHopperFp8SumBits : 0;
    it = known.emplace(dev, d).first;
  }
  *f = it->second;
  return cudaSuccess;
}

cudaError_t allow_optin_smem(int dev, const void* kernel) {
  DeviceFacts f;
  if (const cudaError_t e = device_facts(dev, &f); e != cudaSuccess) return e;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, bool> raised;
  std::lock_guard lock(mu);
  if (raised.count({dev, kernel})) return cudaSuccess;
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, kernel);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             f.smem_optin - static_cast<int>(attr.sharedSizeBytes));
  if (e != cudaSuccess) return e;
  raised[{dev, kernel}] = true;
  return cudaSuccess;
}

}  // namespace mls::ops::cuda::kernels
