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

  // In place: x becomes the elementwise sum over ranks.
  virtual void all_reduce(Tensor& x) = 0;
  // in [n, ...] on each rank → out [size × n, ...], rank-major.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in [size × n, ...] → out [n, ...]: rank r gets the sum over ranks of rows [r·n, (r+1)·n).
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;
  // x from `root` to every rank, in place.
  virtual void broadcast(Tensor& x, int root) = 0;
  virtual void barrier() = 0;
};

// The parallel layout a model instance runs in.
struct ParallelContext {
  int tp_size = 1;
  int rank = 0;
  Communicator* comm = nullptr;  // required when tp_size > 1
  bool sequence_parallel = false;
};

}  // namespace mls
