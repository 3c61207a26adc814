// Rank-ordered fp32 sums over the buffers of the ranks sharing one GPU
// (device_communicator.cc). Plain types only: nvcc compiles the kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::device_reduce {

enum class Elem { kF32, kBF16, kF16 };

inline constexpr int kMaxRanks = 16;
struct RankPtrs {
  const void* p[kMaxRanks];
};

// out[i] = Σ_{r < ranks} in_r[offset + i] for i < n, each added in fp32 in rank order and
// stored as `out_type`; inputs are of `in_type`.
cudaError_t launch_sum_ranks(const RankPtrs& in, int ranks, Elem in_type, int64_t offset, int64_t n,
                             void* out, Elem out_type, cudaStream_t stream);

}  // namespace mls::device_reduce
