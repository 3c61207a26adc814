// Collectives between GPU ranks through NCCL (one GPU per rank). Built whenever the CUDA
// toolkit is present. Tensors live on the rank's device; collectives are enqueued on the
// rank's stream. Reductions of bf16/f16 data go through an fp32 copy so that partial sums
// are added in fp32, as with the in-process backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace mls {

// One process, one thread per GPU: rank r uses device devices[r] and allocators[r] (tag comm
// for its fp32 scratch).
std::vector<std::unique_ptr<Communicator>> make_nccl_group(
    const std::vector<int>& devices, const std::vector<Allocator*>& allocators);

// A new group's id (ncclGetUniqueId, NCCL_UNIQUE_ID_BYTES): made by one process and handed to
// every process of the group (over MPI: parallel/world.h).
std::vector<uint8_t> make_nccl_unique_id();

// This process's ranks of a group spread over processes: rank first_rank + i on devices[i]
// (allocators[i]), of `size` ranks in all. Every process passes the same unique_id.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(
    const std::vector<uint8_t>& unique_id, int size, int first_rank,
    const std::vector<int>& devices, const std::vector<Allocator*>& allocators);

}  // namespace mls
