// Speculative decoding's counters, with vLLM's meanings; the engine exports them on /metrics as
// vllm:spec_decode_num_drafts, vllm:spec_decode_num_draft_tokens,
// vllm:spec_decode_num_accepted_tokens and vllm:spec_decode_num_accepted_tokens_per_pos
// (label position = 0..k-1), each a counter.
#pragma once

#include <cstdint>
#include <vector>

namespace mls {

struct SpeculativeStats {
  int64_t num_drafts = 0;           // spec_decode_num_drafts: rounds that verified drafts
  int64_t num_draft_tokens = 0;     // spec_decode_num_draft_tokens: tokens verified
  int64_t num_accepted_tokens = 0;  // spec_decode_num_accepted_tokens
  // spec_decode_num_accepted_tokens_per_pos: [k], rounds whose draft at position i was accepted.
  std::vector<int64_t> accepted_per_position;
  // Drafts the request's output constraint refused before verification (ours; not in vLLM).
  int64_t num_structure_rejected = 0;

  explicit SpeculativeStats(int64_t k = 0);
  // Adds another's counts (one sequence's into the engine's); the same k.
  SpeculativeStats& operator+=(const SpeculativeStats& o);
  // Accepted over drafted tokens (vLLM's "draft acceptance rate"); 0 with no drafts.
  double acceptance_rate() const;
  // Tokens a round emits on average: 1 + accepted / rounds (vLLM's "mean acceptance length");
  // 1 with no drafts.
  double mean_acceptance_length() const;
};

}  // namespace mls
