// CUDA graphs for decode steps (issue 16): a decode step of a given batch size launches the same
// kernels with the same arguments every time once its buffers sit at fixed addresses — the step
// workspace (core/step_arena.h places the same step at the same offsets), the fixed block tables
// and the rank's page-locked host staging (model/step_context.h). So the runner captures one
// graph per batch-size bucket once the memory plan is applied, and serves a decode step of n
// sequences by padding it to the smallest captured bucket >= n, writing its inputs into the
// staging and replaying the graph: embedding to logits in one launch. The draw (ops::sample_rows,
// whose per-row parameters are launch arguments) and the copies back run after the replay.
//
// Padding rows repeat the step's last sequence (same token, position, slot and block table):
// they write the same cache row with the same values. An eager decode step with a memory plan
// pads the same way (ModelRunner::step): the FP8 GEMMs choose their algorithm and K split by the
// row count, so only equal row counts give the real rows equal bits. A graph step's attention and
// DSA indexer are planned for the planned max_model_len (StepStaging::full_reach_keys): the
// launches depend on the batch size only; trailing key splits are empty and the combine skips them.
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

// A step a decode graph can serve: every sequence decodes one token and wants its logits.
bool is_plain_decode(const ForwardBatch& b);
// The smallest of `captured` (ascending) that holds b's sequences, 0 if none does.
int64_t graph_bucket_for(const std::vector<int64_t>& captured, const ForwardBatch& b);
// b padded to `bucket` sequences by repeating its last one.
ForwardBatch pad_decode_batch(const ForwardBatch& b, int64_t bucket);
// The step captured for `bucket`: decodes of token 0 at position 0 in block 0.
ForwardBatch capture_batch(int64_t bucket);

}  // namespace mls
