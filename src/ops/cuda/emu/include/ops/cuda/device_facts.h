// Emulation (prelude.h) of ops/cuda/device_facts.h: an H200's shared memory and the emulator's
// multiprocessor count (emu::set_device_sms); opt-in is a no-op.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/emu/cta_runtime.h"

namespace mls::ops::cuda::kernels {

struct DeviceFacts {
  int sms = 0;
  int smem_optin = 0;
  int fp8_sum_bits = 0;
};
inline cudaError_t device_facts(int, DeviceFacts* f) {
  f->sms = emu::device_sms();
  f->smem_optin = static_cast<int>(emu::kSmemOptin);
  f->fp8_sum_bits = emu::fp8_sum_bits();
  return cudaSuccess;
}
inline cudaError_t allow_optin_smem(int, const void*) {
  return cudaSuccess;
}

}  // namespace mls::ops::cuda::kernels
