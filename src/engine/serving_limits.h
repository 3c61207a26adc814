// The serving limits, written once: resolved from the command line and the model's config by
// the memory planner, recorded in the MemoryPlan it makes, and handed from there to the engine
// and its scheduler (an engine over a planned runner refuses other limits). The defaults below
// are the only place they are written.
#pragma once

#include <cstdint>
#include <string>

#include "io/model_config.h"

namespace mls {

struct ServingLimits {
  int64_t max_num_batched_tokens = 8192;  // token budget of one step
  int64_t max_num_seqs = 256;             // sequences in one step
  // Longest request (prompt + output). 0: not set by the user — the model's
  // max_position_embeddings, capped with a warning to what the KV pool holds; a value the user
  // set that the pool cannot hold fails start-up with the largest that fits.
  int64_t max_model_len = 0;
  int64_t block_size = 64;  // tokens per KV block
  // Speculative decoding with the MTP layer (--speculative-config): k drafts per decode, 0 off.
  // The plan profiles the verify and draft steps only when it is set.
  int64_t num_speculative_tokens = 0;

  bool operator==(const ServingLimits&) const = default;
  std::string str() const;
};

// Checks the ranges (InvalidArgument naming the flag) and that a set max_model_len does not pass
// the model's max_position_embeddings; returns the limits with an unset max_model_len resolved
// to max_position_embeddings (the planner then caps it to the KV pool).
ServingLimits resolve_serving_limits(const ServingLimits& requested, const io::ModelConfig& c);

}  // namespace mls
