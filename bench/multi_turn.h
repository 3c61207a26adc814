// A multi-turn chat workload served through the engine, for the prefix cache: conversations
// sharing one system prompt, each turn's prompt the previous prompt + the previous answer + new
// user text (what a chat client or an agent loop sends). Token ids are synthetic (seeded), the
// answers the model's own greedy tokens; every length is fixed by the spec, so two models see
// prompts of the same lengths and the same block structure.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace mls::bench {

struct MultiTurnSpec {
  int conversations = 8;
  int turns = 6;
  int64_t system_tokens = 200;
  int64_t answer_tokens = 24;  // per turn (greedy, EOS ignored)
  // User text of turn t in conversation c: user_min + (7c + 13t) mod user_spread tokens, so that
  // prompts of one turn differ in length (on main, DSA reuse needed equal lengths).
  int64_t user_min = 20, user_spread = 29;
  int32_t max_token_id = 1000;  // ids in [2, max_token_id): inside every fixture's vocabulary
  uint32_t seed = 2021;
};

struct MultiTurnResult {
  std::vector<std::vector<std::vector<int32_t>>> answers;  // [conversation][turn]
  int64_t prompt_tokens = 0;                               // over all turns
  int64_t prefix_queries = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;     // of those, found cached: prefill tokens not computed
  double seconds = 0;
  double hit_rate() const {
    return prefix_queries > 0 ? static_cast<double>(prefix_hits) / prefix_queries : 0.0;
  }
};

// Runs the workload turn by turn: each round adds the conversations' next prompts one engine
// step apart (as separate clients would arrive) and steps until all are answered. The runner's
// KV cache is reallocated: `num_blocks` of `block_size`.
MultiTurnResult run_multi_turn(ModelRunner& runner, const MultiTurnSpec& spec,
                               const EngineConfig& cfg, int64_t num_blocks = 1024,
                               int64_t block_size = 16);

}  // namespace mls::bench
