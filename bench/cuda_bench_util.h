// Helpers of the CUDA kernel benchmarks (fp8_kernels_benchmark, attention_benchmark): checked
// CUDA calls, device allocations, and the time of a launch sequence captured in a CUDA graph and
// replayed, as serving replays decode steps.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace mls::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename T>
inline T* device_alloc(size_t count) {
  void* p = nullptr;
  check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
  return static_cast<T*>(p);
}

// µs per launch of `launch(i)` (i = 0 .. iters - 1) captured into one graph and replayed.
inline double time_graph(cudaStream_t stream, int iters, const std::function<void(int)>& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < iters; ++i) launch(i);
  check(cudaStreamEndCapture(stream, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, stream), "warm-up");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  float best = 1e30f;
  for (int rep = 0; rep < 3; ++rep) {
    check(cudaEventRecord(a, stream), "record");
    check(cudaGraphLaunch(exec, stream), "replay");
    check(cudaEventRecord(b, stream), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    best = std::min(best, ms);
  }
  check(cudaGetLastError(), "kernels");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return best * 1e3 / iters;
}

// The stream of a benchmark on device 0 after a line naming the device, or null (with a line
// saying so) where there is no CUDA device.
inline cudaStream_t open_device(const char* bench, int iters) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("%s: no CUDA device here, nothing measured\n", bench);
    return nullptr;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("%s, %d SMs, %d graph-captured launches per figure\n", prop.name,
              prop.multiProcessorCount, iters);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  return stream;
}

}  // namespace mls::bench
