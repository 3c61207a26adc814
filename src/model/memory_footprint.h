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

// Bytes of this rank's weight shard on `device` (tag weights), including derived tensors
// (W_UKᵀ) and FP8 block scales; an FP8 config is taken to hold scales for every GEMM-only
// projection, as DeepSeek and GLM checkpoints do.
int64_t predict_weight_bytes(const io::ModelConfig& c, const ParallelContext& p, Device device);

// Activation and comm high-water marks of one forward of `batch` on rank p.rank on `device`.
// On the GPU it includes the scratch the attention and indexer kernels take for the step.
ForwardFootprint predict_forward_footprint(const io::ModelConfig& c, const ParallelContext& p,
                                           const ForwardBatch& batch, Device device);

// Step buffers that grow with the context rather than the batch, at their worst case for steps
// of at most `max_tokens` tokens over `max_seqs` sequences of up to `max_model_len` tokens: the
// block tables (i32 [seqs, ceil(len / block_size)]) and, on the GPU, the attention and indexer
// kernels' scratch. A profiling step of fresh sequences cannot show these; the planner reserves
// them on top of its peak so that the first long-context step fits by construction.
int64_t predict_context_bytes(const io::ModelConfig& c, const ParallelContext& p,
                              int64_t max_tokens, int64_t max_seqs, int64_t max_model_len,
                              int64_t block_size, Device device);

}  // namespace mls
