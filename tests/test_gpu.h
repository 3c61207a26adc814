// Whether this test binary can run its GPU cases: built with the CUDA runtime and a device
// present (GPU tests skip visibly otherwise).
#pragma once

#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {

inline bool have_gpu() {
#ifdef MLASERVE_CUDA_RUNTIME
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

}  // namespace mls
