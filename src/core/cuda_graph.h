// One captured CUDA graph of work on the calling thread's stream (core/cuda_context.h): capture
// it once, replay it with one launch. Capture uses cudaStreamCaptureModeThreadLocal: only this
// thread's unsafe calls are refused meanwhile, so other ranks' and the engine's threads go on.
// Built with the CUDA runtime (MLASERVE_CUDA_RUNTIME).
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace mls::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Captures what `work` queues on this thread's stream and instantiates it. If `work` throws,
  // the capture is ended and discarded and the exception goes on; the graph stays empty.
  static Graph capture(const std::function<void()>& work);
  bool empty() const { return exec_ == nullptr; }
  // Launches the graph on this thread's stream (no host wait).
  void replay() const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// The device memory in use on this thread's device now (total − free): graph memory is
// measured as its growth across a capture.
int64_t device_bytes_in_use();

}  // namespace mls::cuda
