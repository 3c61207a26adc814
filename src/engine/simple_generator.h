// Greedy generation for one sequence with a contiguous KV cache (a single block holding the
// whole sequence). The reference loop the CLI and the conformance tests use; the serving engine
// (scheduler, paged blocks, sampling) is built on the same Model::forward.
#pragma once

#include <span>
#include <vector>

#include "engine/model_runner.h"

namespace mls {

struct GreedyResult {
  std::vector<int32_t> output_ids;
  std::vector<std::vector<float>> step_logits;  // logits that chose each output token
};

// Stops after max_tokens or at any id in stop_ids (included in the output, as transformers'
// generate() keeps it). Replaces the runner's KV cache with one block of prompt + max_tokens.
GreedyResult generate_greedy(ModelRunner& runner, std::span<const int32_t> prompt,
                             int64_t max_tokens, std::span<const int64_t> stop_ids = {},
                             bool keep_logits = false);

}  // namespace mls
