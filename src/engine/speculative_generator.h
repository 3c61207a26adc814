// Greedy speculative decoding with the checkpoint's MTP layer for one sequence on one rank: the
// reference loop of docs/speculative-decoding.md, as simple_generator.h is for plain greedy
// decoding. Each round drafts k tokens with the MTP layer applied recursively, verifies them in
// one target forward of k + 1 query tokens through the paged cache, and keeps the longest
// drafted prefix equal to the target's greedy choices plus the target's next token, so the
// output equals plain greedy decoding token for token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"

namespace mls {

// Counts with vLLM's spec_decode metric meanings.
struct SpeculativeStats {
  int64_t num_drafts = 0;        // verification rounds
  int64_t num_draft_tokens = 0;  // tokens drafted (k per round)
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position;  // [k]: rounds whose draft i was accepted
};

struct SpeculativeResult {
  std::vector<int32_t> output_ids;
  SpeculativeStats stats;
};

// Test seam: replaces the token the MTP layer drafted for sequence position `position` (forces
// drafts right or wrong, so that every acceptance length is exercised on random MTP weights).
using DraftOverride = std::function<int32_t(int64_t position, int32_t drafted)>;

// `model` must hold its MTP layers (LoadOptions::mtp) on a single rank. Stops after max_tokens
// or at any id in stop_ids (included in the output), as generate_greedy. The KV cache (main and
// MTP layers) is allocated here in blocks of `block_size` tokens.
SpeculativeResult generate_greedy_speculative(const Model& model, std::span<const int32_t> prompt,
                                              int64_t max_tokens, int64_t num_speculative_tokens,
                                              std::span<const int64_t> stop_ids = {},
                                              const DraftOverride& draft_override = nullptr,
                                              int64_t block_size = 16);

}  // namespace mls
