// CUDA graphs for decode steps (issue 16): a decode step of a given batch size launches the same
// kernels with the same arguments every time once its buffers sit at fixed addresses — the step
// workspace (core/step_arena.h places the same step at the same offsets), the fixed block tables
// and the rank's page-locked host staging (model/step_context.h). So the runner captures one
// graph per batch-size bucket once the memory plan is applied, and serves a decode step of n
// sequences by padding it to the smallest captured bucket >= n, writing its inputs into the
// staging and replaying the graph: embedding to logits in one launch. The draw (ops::sample_rows,
// whose per-row parameters are launch arguments) and the copies back run after the replay.
//
// A speculative verify step (engine/speculative_round.h) is served the same way: every token of
// it is a logits row, as in a decode, and the kernels see tokens, not sequences
// (positions, slots and each token's sequence are staged tables), so the graph of T decodes
// serves T verify tokens. Under speculative decoding the graphs also copy the final hidden
// states into the runner's carry (ModelRunner::forward_keep_hidden).
//
// Padding tokens repeat the step's last token as one-token decodes (same token, position, slot
// and block table): they see the same keys and write the same cache row with the same values. An
// eager decode step with a memory plan pads the same way (ModelRunner::step): the FP8 GEMMs choose
// their algorithm and K split by the row count, so only equal row counts give the real rows equal
// bits. A graph step's attention and DSA indexer are planned for the planned max_model_len
// (StepStaging::full_reach_keys): the launches depend on the batch size only; trailing key splits
// are empty and the combine skips them.
//
// A model whose decode waits on the host (bf16 routed experts read their counts there:
// Model::decode_host_sync) stays eager, and says why at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "model/forward_batch.h"

namespace mls {

// vLLM's capture sizes: 1, 2, 4, then every multiple of 8 up to max_num_seqs, and max_num_seqs.
std::vector<int64_t> decode_graph_buckets(int64_t max_num_seqs);

// Device memory the captured graphs may take on a rank (the graphs' own driver memory: every
// buffer they touch is the step workspace's), counted by the memory planner; capture measures
// what they take and stops at this bound.
inline constexpr int64_t kDecodeGraphAllowanceBytes = int64_t{256} << 20;

// Whether a runner captures decode graphs, decided once from its options: "" when it does, else
// why not (printed at start-up).
std::string decode_graphs_off_reason(bool enforce_eager, Device device, int tensor_parallel_size);

// A step a decode graph can serve: every token is a logits row (one-token decodes, and verify
// chunks whose every row is read).
bool is_graph_step(const ForwardBatch& b);
// The smallest of `captured` (ascending) that holds b's tokens, 0 if none does.
int64_t graph_bucket_for(const std::vector<int64_t>& captured, const ForwardBatch& b);
// b padded to `bucket` tokens by one-token decodes of its last token.
ForwardBatch pad_decode_batch(const ForwardBatch& b, int64_t bucket);
// A step the MTP layer's graph can serve (ModelRunner::forward_mtp): a graph step with no token
// at position 0 (whose embedding the layer zeroes, a host decision); its smallest captured
// bucket, 0 if none holds it.
int64_t mtp_graph_bucket_for(const std::vector<int64_t>& captured, const ForwardBatch& b);
// The step captured for `bucket`: decodes of token 0 at `position` in blocks 0.
ForwardBatch capture_batch(int64_t bucket, int64_t position, int64_t block_size);

}  // namespace mls
