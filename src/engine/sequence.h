// One sample of a request as the scheduler sees it: its tokens (prompt, then output), how many
// of them are in the KV cache, its blocks, and the chain of block hashes for prefix caching.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "engine/speculative_round.h"

namespace mls {

struct RequestState;

struct Sequence {
  RequestState* request = nullptr;
  int sample_index = 0;
  uint64_t arrival_order = 0;   // FCFS rank (siblings share their request's)
  std::vector<int32_t> tokens;  // prompt + output
  int64_t prompt_len = 0;
  int64_t num_computed = 0;  // tokens whose KV is in the cache
  int64_t seq_slots = 1;     // max_num_seqs slots taken: n for a request not yet forked
  std::vector<int32_t> block_table;
  std::vector<uint64_t> block_hashes;
  FinishReason finish = FinishReason::kNone;
  // Every prompt position yields a logits row (prompt logprobs): such a sequence never takes
  // cached prefix blocks (their positions would have no logits).
  bool prompt_logits = false;
  std::unique_ptr<TokenConstraint> constraint;  // this sample's position in its constraint
  // Speculative decoding: the drafts after the last token that the next step scheduling this
  // sequence verifies (their KV is written then, past num_computed); dropped on preemption.
  DraftRound drafts;

  int64_t num_output() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
  bool finished() const { return finish != FinishReason::kNone; }
  // Whether the next chunk (from num_computed on) produces a logits row for each of its tokens.
  bool chunk_has_all_logits() const { return prompt_logits && num_computed < prompt_len; }
};

}  // namespace mls
