#include "multi_turn.h"

#include <chrono>
#include <random>
#include <string>

#include "core/error.h"

namespace mls::bench {
namespace {

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int32_t max_id) {
  std::uniform_int_distribution<int32_t> id(2, max_id - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = id(rng);
  return t;
}

}  // namespace

MultiTurnResult run_multi_turn(ModelRunner& runner, const MultiTurnSpec& spec,
                               const EngineConfig& cfg, int64_t num_blocks, int64_t block_size) {
  runner.allocate_kv_cache(num_blocks, block_size);
  Engine engine(runner, cfg);
  std::mt19937 rng(spec.seed);
  const auto system = random_tokens(rng, spec.system_tokens, spec.max_token_id);
  std::vector<std::vector<int32_t>> prompt(spec.conversations, system);
  MultiTurnResult r;
  r.answers.assign(spec.conversations, std::vector<std::vector<int32_t>>(spec.turns));
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = spec.answer_tokens;
  greedy.ignore_eos = true;

  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < spec.turns; ++t) {
    for (int c = 0; c < spec.conversations; ++c) {
      if (t > 0) {
        const auto& last = r.answers[c][t - 1];
        prompt[c].insert(prompt[c].end(), last.begin(), last.end());
      }
      const int64_t user = spec.user_min + (7 * c + 13 * t) % spec.user_spread;
      const auto text = random_tokens(rng, user, spec.max_token_id);
      prompt[c].insert(prompt[c].end(), text.begin(), text.end());
      r.prompt_tokens += static_cast<int64_t>(prompt[c].size());
    }
    int next = 0;
    while (next < spec.conversations || engine.has_work()) {
      if (next < spec.conversations) {
        auto& out = r.answers[next][t];
        engine.add_request({.id = std::to_string(next) + "." + std::to_string(t),
                            .prompt_ids = prompt[next],
                            .params = greedy,
                            .on_token = [&out](const TokenEvent& ev) {
                              if (ev.token_id >= 0) out.push_back(ev.token_id);
                              return Verdict::kContinue;
                            }});
        ++next;
      }
      engine.step();
    }
    for (int c = 0; c < spec.conversations; ++c)
      if (static_cast<int64_t>(r.answers[c][t].size()) != spec.answer_tokens)
        raise<InternalError>("conversation {} turn {}: {} answer tokens, want {}", c, t,
                             r.answers[c][t].size(), spec.answer_tokens);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineStats st = engine.stats();
  r.prefix_queries = st.prefix_cache_queries;
  r.prefix_hits = st.prefix_cache_hits;
  return r;
}

}  // namespace mls::bench
