// The SM clock where a stream is, for `mlaserve bench --timeline`: a one-thread kernel spins for
// `cycles` SM cycles (clock64) and writes them with the global timer's nanoseconds over the same
// span (%globaltimer), so cycles over nanoseconds is the clock the GPU ran at right after the
// stream's previous kernel. Heavy kernels run below the maximum clock under the power cap, and
// lower in the stream than alone (bench/RESULTS.md, session 36).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// out[0]: the cycles spun (at least `cycles`); out[1]: the nanoseconds they took.
cudaError_t launch_sm_clock_probe(uint64_t* out, int64_t cycles, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
