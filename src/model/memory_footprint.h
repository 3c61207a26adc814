// The analytic twin of Model::forward's memory: from the config, the parallel layout and the
// batch shape alone, the bytes each rank's tracked allocator will hold — weights, and the
// activation high-water mark of one forward. It replays the forward's allocation sequence
// (same tensors, same sizes, same lifetimes) on a ledger, so a change to the forward that is not
// mirrored here shows up as a planner test failure, never as a silent mis-sized KV cache.
#pragma once

#include <cstdint>

#include "io/model_config.h"
#include "model/forward_batch.h"
#include "parallel/communicator.h"

namespace mls {

struct ForwardFootprint {
  int64_t activation_peak = 0;  // tag activation
  int64_t comm_peak = 0;        // tag comm: collective scratch
};

// Bytes of this rank's weight shard (tag weights), including derived tensors (W_UKᵀ).
int64_t predict_weight_bytes(const io::ModelConfig& c, const ParallelContext& p);

// Activation and comm high-water marks of one forward of `batch` on rank p.rank.
ForwardFootprint predict_forward_footprint(const io::ModelConfig& c, const ParallelContext& p,
                                           const ForwardBatch& batch);

}  // namespace mls
