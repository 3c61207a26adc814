// Every kernel of the CUDA backend is launched through `launch` with programmatic dependent launch
// (Hopper; persistent kernels through `launch_serial`, below): the next kernel of the stream is
// scheduled while the current one's last CTAs still run, and waits on the device
// (griddepcontrol.wait) until its predecessor has finished and its writes are visible, instead of
// paying the launch and CTA start-up after it. Measured on the H200 against MLASERVE_DISABLE_PDL=1
// in one call: 0.5-1 % of a decode step (a dependent kernel's cost is mostly its own memory round
// trips). CUDA graph capture keeps these edges. The contract: a kernel launched here calls
// `pdl_begin()` before anything else, so it reads and writes nothing of its predecessor's before
// that predecessor completes. MLASERVE_DISABLE_PDL=1 in the environment launches every kernel
// plainly (bisecting a suspected ordering bug); griddepcontrol.wait is then a no-op. A kernel may
// instead call pdl_wait() first and pdl_trigger() once its main loop is done (the skinny GEMM's
// shared-memory ring: triggered at its start, it made the batch-1 and batch-8 decode steps 4 % and
// 17 % slower than the register kernel; triggered after its loop, 0-2 % faster; bench/RESULTS.md,
// session 15).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <utility>

namespace mls::ops::cuda::kernels {

// pdl_begin in two halves, for a kernel that lets the stream's next kernel be scheduled only
// once its own main loop is done: wait before anything else, trigger later.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// First statement of every kernel launched through `launch`: lets the stream's next kernel be
// scheduled now (it waits for this one in its own pdl_begin), then waits for this kernel's
// predecessor.
__device__ __forceinline__ void pdl_begin() {
  pdl_trigger();
  pdl_wait();
}

inline bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("MLASERVE_DISABLE_PDL");
    return v == nullptr || v[0] == '\0' || v[0] == '0';
  }();
  return enabled;
}

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialisation; the
// launch error, if any, is left for cudaGetLastError as with <<<>>>.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...) scheduled only once its predecessor has
// finished, for a persistent grid whose CTAs hold a whole multiprocessor each. Scheduled early,
// the prefill experts' kernel made GLM-5's prefill 1.5 % slower end to end with 128-row tiles and
// 14 % with 64-row ones, though serialised (ncu) the 64-row kernel was the faster; the cause
// was not isolated (bench/RESULTS.md, session 31). Its own pdl_begin still lets its successor
// be scheduled early.
template <typename... Params, typename... Args>
void launch_serial(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
}

}  // namespace mls::ops::cuda::kernels
