// Launch facts of a device, queried once per device (these calls cost microseconds and kernels
// plan launches in every layer of every step), and kernels allowed a device's opt-in shared
// memory once per (device, kernel). Plain types only: included by nvcc-compiled code.
#pragma once

#include <cuda_runtime.h>

namespace mls::ops::cuda::kernels {

struct DeviceFacts {
  int sms = 0;         // multiprocessors
  int smem_optin = 0;  // shared memory a block may opt into, bytes
  // Bits an FP8 tensor-core MMA keeps of its sum after the leading one, truncating toward zero;
  // 0: exact (bench/fp8_accumulator_probe; the emulator models it with emu::set_fp8_sum_bits).
  int fp8_sum_bits = 0;
};
cudaError_t device_facts(int dev, DeviceFacts* f);

// Raises `kernel`'s dynamic shared-memory limit on `dev` to the opt-in maximum less its static
// shared memory, the first time it is asked for that (device, kernel).
cudaError_t allow_optin_smem(int dev, const void* kernel);

}  // namespace mls::ops::cuda::kernels
