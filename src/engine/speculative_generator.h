// Speculative decoding with the checkpoint's MTP layer for one sequence on one rank: the
// reference loop of docs/speculative-decoding.md, as simple_generator.h is for plain greedy
// decoding. Each round drafts up to k tokens with the MTP layer applied recursively, each drawn
// from the draft's distribution under the request's sampling transforms and checked against the
// request's output constraint (the first draft it refuses ends the draft); verifies them in one
// target forward of k + 1 query tokens through the paged cache; and keeps what the rejection
// rule (rejection_sampler.h) accepts plus one token drawn from the target. Greedy output equals
// plain greedy decoding token for token, sampled output follows the target's distribution, and
// constrained output equals plain constrained decoding's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/speculative_round.h"
#include "engine/speculative_stats.h"
#include "engine/token_constraint.h"
#include "model/model.h"

namespace mls {

struct SpeculativeResult {
  std::vector<int32_t> output_ids;
  SpeculativeStats stats;
};

struct SpeculativeOptions {
  int64_t num_speculative_tokens = 1;  // k
  int64_t max_tokens = 16;
  // Temperature, top-k/p, min-p, penalties, logit_bias, allowed ids, bad words and min_tokens
  // as the engine's Sampler applies them (n, logprobs and max_tokens are not read here).
  SamplingParams params = greedy();
  uint64_t seed = 0;  // the draws' streams (SampleInput::seed)
  // The engine's stop ids (stop_token_ids plus EOS): the output ends after one, included.
  std::vector<int64_t> stop_ids;
  // The request's output constraint (cloned; not advanced), or null.
  std::shared_ptr<const TokenConstraint> constraint;
  DraftOverride draft_override;
  int64_t block_size = 16;  // KV cache blocks, allocated here

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0;
    return p;
  }
};

// `model` must hold its MTP layers (LoadOptions::mtp) on a single rank. The output ends as the
// engine ends it: a stop id (once min_tokens are out), a token the constraint refuses, a
// terminated constraint with no stop ids, or max_tokens.
SpeculativeResult generate_speculative(const Model& model, std::span<const int32_t> prompt,
                                       const SpeculativeOptions& opts);

}  // namespace mls
