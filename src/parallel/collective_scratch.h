// The fp32 scratch a collective takes for the length of one call (tag comm), per communicator
// kind: one function that the communicators allocate from before they return in meta mode, and
// that a meta runner's in-process group traces for the kind it stands in for (a GPU planned
// without one). So the plan's "step collectives" equal the real run's by construction.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mls {

enum class CommKind {
  kHost,    // in-process threads over host memory: fp32 sums of reductions
  kDevice,  // ranks sharing one GPU: fp32 sums of all_reduce (reduce_scatter sums in place)
  kNccl,    // one GPU per rank: bf16/f16 reductions widened to fp32 first
};
enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

// Floats of scratch for `op` over `size` ranks on `dtype` with `out_elems` result elements per
// rank (x's for all_reduce and broadcast).
constexpr int64_t collective_scratch_floats(CommKind kind, Collective op, DType dtype,
                                            int64_t out_elems, int size) {
  if (size <= 1) return 0;
  switch (op) {
    case Collective::kAllReduce:
      return kind == CommKind::kNccl && dtype == DType::kF32 ? 0 : out_elems;
    case Collective::kReduceScatter:
      if (kind == CommKind::kHost) return out_elems;
      if (kind == CommKind::kNccl && dtype != DType::kF32) return out_elems * (size + 1);
      return 0;
    case Collective::kAllGather:
    case Collective::kBroadcast:
      return 0;
  }
  return 0;
}

// The scratch of one call, held until the returned tensor goes (no memory in meta mode).
inline Tensor take_collective_scratch(Allocator& alloc, CommKind kind, Collective op, DType dtype,
                                      int64_t out_elems, int size) {
  const int64_t n = collective_scratch_floats(kind, op, dtype, out_elems, size);
  return n > 0 ? Tensor::empty({n}, DType::kF32, MemTag::kComm, alloc) : Tensor();
}

}  // namespace mls
