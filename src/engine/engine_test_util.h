// Helpers shared by the engine's tests (engine_test, speculative_test, speculative_engine_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/memory_planner.h"
#include "engine/sampler.h"

namespace mls::engine_test {

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int32_t> id(2, 1023);
  std::vector<int32_t> p(len);
  for (auto& t : p) t = id(rng);
  return p;
}

inline SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// The target's distribution of the token after `tokens` (the prompt's first `prompt_len`).
inline std::vector<double> target_probs(ModelRunner& runner, const std::vector<int32_t>& tokens,
                                        size_t prompt_len, const SamplingParams& p) {
  const auto n = static_cast<int64_t>(tokens.size());
  runner.allocate_kv_cache(1, n);
  ForwardBatch batch;
  batch.token_ids = tokens;
  batch.seqs.push_back({.num_cached = 0,
                        .num_new = n,
                        .block_table = {0},
                        .prompt_len = static_cast<int64_t>(prompt_len)});
  const Tensor logits = runner.forward(batch);
  const int64_t vocab = runner.config().vocab_size;
  Sampler sampler(vocab);
  SampleInput in;
  in.params = &p;
  in.prompt = std::span(tokens).first(prompt_len);
  in.output = std::span(tokens).subspan(prompt_len);
  std::vector<double> probs(static_cast<size_t>(vocab));
  sampler.distribution(logits.data<float>(), in, probs);
  return probs;
}

// Serves 24 requests (every third of 200 prompt tokens, the others 1–60, each with at most
// `max_output` tokens up to the 256-token context) to the end through `engine` over a runner
// `plan` was applied to: no step passes the plan's workspace, the pool is exhausted (a
// preemption), and every request finishes without an error.
inline void expect_stress_inside_plan(ModelRunner& runner, const MemoryPlan& plan, Engine& engine,
                                      int max_output) {
  std::mt19937 g(7);
  int failed = 0;
  for (int i = 0; i < 24; ++i) {
    Request r;
    r.id = std::to_string(i);
    const int len = i % 3 == 0 ? 200 : 1 + static_cast<int>(g() % 60);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(2 + static_cast<int32_t>(g() % 1000));
    r.params.max_tokens = std::min(256 - len, max_output);
    r.params.ignore_eos = true;
    r.on_token = [&failed](const TokenEvent& ev) {
      failed += ev.error != nullptr;
      return Verdict::kContinue;
    };
    engine.add_request(std::move(r));
  }
  runner.allocator(0).reset_peaks();
  const int64_t between_steps = runner.allocator(0).stats().current_total;
  while (engine.step()) {
  }
  const RankPlan& p = plan.ranks[0];
  EXPECT_LE(runner.allocator(0).stats().step_high_water, p.step_workspace_bytes);
  EXPECT_LE(runner.allocator(0).stats().peak_total - between_steps,
            p.step_workspace_bytes + p.step_comm_bytes);
  EXPECT_GT(engine.stats().num_preemptions, 0) << "the pool should have been exhausted";
  EXPECT_EQ(engine.stats().finished_requests, 24);
  EXPECT_EQ(failed, 0);
}

}  // namespace mls::engine_test
