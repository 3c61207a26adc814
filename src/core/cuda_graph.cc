#include "core/cuda_graph.h"

#include <cstdint>
#include <utility>

#include "core/cuda_context.h"
#include "core/error.h"

namespace mls::cuda {

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

Graph::Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = std::exchange(o.exec_, nullptr);
  }
  return *this;
}

Graph Graph::capture(const std::function<void()>& work) {
  const cudaStream_t s = stream();
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    // Leave the stream usable: end (and drop) the capture before the error goes on.
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  Graph g;
  const cudaError_t e = cudaGraphInstantiate(&g.exec_, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "cudaGraphInstantiate");
  // Uploading now keeps the first replay as fast as the others.
  check(cudaGraphUpload(g.exec_, s), "cudaGraphUpload");
  return g;
}

void Graph::replay() const {
  if (!exec_) raise<InternalError>("replay of a CUDA graph that was never captured");
  check(cudaGraphLaunch(exec_, stream()), "cudaGraphLaunch");
}

int64_t device_bytes_in_use() {
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return static_cast<int64_t>(total_b - free_b);
}

}  // namespace mls::cuda
