// The calling thread's CUDA device and stream. Each rank thread binds its device once; every
// kernel, copy, GEMM and stream-ordered allocation of that thread then goes to one stream, so
// work is ordered without host synchronisation and a freed buffer can be reused at once.
// Built when the CUDA toolkit is present (MLASERVE_CUDA_RUNTIME).
#pragma once

#include <cuda_runtime.h>

#include <string_view>

namespace mls {
class Allocator;
}

namespace mls::cuda {

// Selects `device` for this thread and creates the thread's stream on first use. `alloc` is
// the rank's tracked allocator, which ops use for workspaces (may be null: default_allocator()).
void bind(int device, Allocator* alloc = nullptr);
// The bound device (binds device 0 if the thread has not bound one).
int device();
// The bound device, or -1 when this thread has bound none (binds nothing).
int bound_device();
cudaStream_t stream();
Allocator& allocator();
// Waits for everything queued on this thread's stream.
void synchronize();
// Open and close the window a profiler started with capture off records
// (`ncu --profile-from-start off`); without a profiler attached they do nothing.
void profiler_start();
void profiler_stop();
// Throws mls::Error naming `what` and the CUDA error when e != cudaSuccess.
void check(cudaError_t e, std::string_view what);

}  // namespace mls::cuda
