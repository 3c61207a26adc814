#include "ops/cuda/clock_probe_kernels.h"

#include "ops/cuda/launch.cuh"

namespace mls::ops::cuda::kernels {
namespace {

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void sm_clock_probe_kernel(uint64_t* out, int64_t cycles) {
  const uint64_t t0 = globaltimer();
  const uint64_t c0 = clock64();
  uint64_t c1 = c0;
  while (static_cast<int64_t>(c1 - c0) < cycles) c1 = clock64();
  const uint64_t t1 = globaltimer();
  out[0] = c1 - c0;
  out[1] = t1 - t0;
}

}  // namespace

// Serial, and without pdl_begin: it starts once the stream's previous kernel has finished, and
// the next one only once it has, so it reads the clock between the two.
cudaError_t launch_sm_clock_probe(uint64_t* out, int64_t cycles, cudaStream_t stream) {
  launch_serial(sm_clock_probe_kernel, 1, 1, 0, stream, out, cycles);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
