// Collectives between the tensor-parallel ranks of one model. Ranks are threads of one process
// (DESIGN.md "Parallelism"); each rank owns one Communicator handle. Reductions sum in fp32.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace mls {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Each collective checks its contract here, once for every implementation, and then runs.
  // In place: x (contiguous, float) becomes the elementwise sum over ranks.
  void all_reduce(Tensor& x);
  // in [n, ...] on each rank → out [size × n, ...], rank-major; contiguous, same dtype.
  void all_gather(const Tensor& in, Tensor& out);
  // in [size × n, ...] → out [n, ...]: rank r gets the sum over ranks of rows [r·n, (r+1)·n);
  // contiguous, the same float dtype.
  void reduce_scatter(const Tensor& in, Tensor& out);
  // x (contiguous) from `root` to every rank, in place.
  void broadcast(Tensor& x, int root);
  virtual void barrier() = 0;

 protected:
  // The collectives above, their contract met. Every rank must call them with the same sizes:
  // an implementation checks that as it exchanges.
  virtual void run_all_reduce(Tensor& x) = 0;
  virtual void run_all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void run_reduce_scatter(const Tensor& in, Tensor& out) = 0;
  virtual void run_broadcast(Tensor& x, int root) = 0;

  // Meta mode (allocation tracing): tensors have no memory and collectives move nothing, but
  // take the scratch they would.
  static bool is_meta(const Tensor& t) { return t.raw() == nullptr && t.numel() > 0; }
};

// The parallel layout a model instance runs in.
struct ParallelContext {
  int tp_size = 1;
  int rank = 0;
  Communicator* comm = nullptr;  // required when tp_size > 1
  bool sequence_parallel = false;
};

}  // namespace mls
