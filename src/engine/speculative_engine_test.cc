// Speculative decoding with the MTP layer in the serving engine (docs/speculative-decoding.md):
// on the tiny fixtures with a random MTP layer (model/mtp_test_checkpoint.h) and the demo model
// with its trained one, greedy output with k = 1..4 equals plain decoding token for token for
// batches of concurrent requests of different lengths, with chunked prefill, preemption and prefix
// caching; drafts forced right or wrong exercise every acceptance length; a seed repeats its
// sampled output.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/chi_square_test_util.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/memory_planner.h"
#include "engine/speculative_stats.h"
#include "io/test_dir.h"
#include "model/mtp_test_checkpoint.h"
#include "test_data.h"
#include "test_gpu.h"

namespace mls {
namespace {

// A fixture copy with a random MTP layer, and a runner over it with the layer loaded.
struct MtpModel {
  io::testing::TestDir dir;
  std::unique_ptr<ModelRunner> runner;

  explicit MtpModel(const std::filesystem::path& fixture, Device device = Device::cpu()) {
    testing::write_mtp_checkpoint(fixture, dir.path(), 11);
    runner = std::make_unique<ModelRunner>(
        RunnerOptions{.model = dir.path(), .device = device, .mtp = true});
  }
};

MtpModel& mtp_model(const std::string& fixture, const std::string& device = "cpu") {
  static std::map<std::string, std::unique_ptr<MtpModel>> models;
  auto& m = models[fixture + "@" + device];
  if (!m) m = std::make_unique<MtpModel>(kTestData / fixture, parse_device(device));
  return *m;
}

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Pool {
  int64_t block_size = 16;
  int64_t num_blocks = 512;
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // per request (one sample each)
  // Per request, per sample index: its tokens and their logprobs (logprobs requests).
  std::vector<std::vector<std::vector<int32_t>>> samples;
  std::vector<std::vector<std::vector<Logprobs>>> logprobs;
  std::vector<std::vector<Logprobs>> prompt_logprobs;  // per request (prompt_logprobs requests)
  EngineStats stats;
};

// Runs the jobs as one batch (all added before the first step) with k speculative tokens.
Outcome run(ModelRunner& r, const std::vector<Job>& jobs, int64_t k, const Pool& pool = {},
            EngineConfig cfg = {}, const Engine::RequestDraftOverride& forced = nullptr) {
  r.allocate_kv_cache(pool.num_blocks, pool.block_size);
  cfg.limits.num_speculative_tokens = k;
  Engine engine(r, cfg);
  if (forced) engine.set_draft_override(forced);
  Outcome out;
  out.tokens.resize(jobs.size());
  out.samples.resize(jobs.size());
  out.logprobs.resize(jobs.size());
  out.prompt_logprobs.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    out.samples[i].resize(static_cast<size_t>(jobs[i].params.n));
    out.logprobs[i].resize(static_cast<size_t>(jobs[i].params.n));
    engine.add_request({.id = std::to_string(i),
                        .prompt_ids = jobs[i].prompt,
                        .params = jobs[i].params,
                        .on_token =
                            [&out, i](const TokenEvent& ev) {
                              if (ev.token_id < 0) return Verdict::kContinue;
                              const auto s = static_cast<size_t>(ev.sample_index);
                              out.tokens[i].push_back(ev.token_id);
                              out.samples[i][s].push_back(ev.token_id);
                              if (ev.logprobs) out.logprobs[i][s].push_back(*ev.logprobs);
                              if (ev.prompt_logprobs) out.prompt_logprobs[i] = *ev.prompt_logprobs;
                              return Verdict::kContinue;
                            },
                        .constraint = nullptr});
  }
  while (engine.step()) {
  }
  out.stats = engine.stats();
  return out;
}

using engine_test::greedy;
using engine_test::random_prompt;
using engine_test::target_probs;

// Ten requests, prompts of 1..150 tokens, outputs of 4..30.
std::vector<Job> mixed_jobs(uint32_t seed = 1234) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(2, 150), out(4, 30);
  std::vector<Job> jobs;
  while (jobs.size() < 10) {
    const int l = jobs.empty() ? 1 : jobs.size() == 1 ? 150 : len(rng);
    jobs.push_back({random_prompt(rng, l), greedy(out(rng))});
  }
  return jobs;
}

// Drafts equal to plain greedy's next token (from `want`), except at positions where
// position % wrong_every == 0 (0: never), which get a wrong one.
Engine::RequestDraftOverride forced_drafts(const std::vector<Job>& jobs,
                                           const std::vector<std::vector<int32_t>>& want,
                                           int64_t wrong_every) {
  return [&jobs, &want, wrong_every](const std::string& id, int64_t position, int32_t drafted) {
    const auto i = static_cast<size_t>(std::stoi(id));
    const int64_t out = position - static_cast<int64_t>(jobs[i].prompt.size());
    const int32_t right =
        out < static_cast<int64_t>(want[i].size()) ? want[i][static_cast<size_t>(out)] : drafted;
    if (wrong_every > 0 && position % wrong_every == 0) return right == 5 ? 6 : 5;
    return right;
  };
}

const char* const kFixtures[] = {"tiny-glm5", "tiny-dsv32", "tiny-dsv3"};

TEST(SpeculativeEngine, GreedyEqualsPlainForEveryKOnEveryFamily) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    ModelRunner& r = *mtp_model(fixture).runner;
    const auto jobs = mixed_jobs();
    const Outcome plain = run(r, jobs, 0);
    EXPECT_EQ(plain.stats.spec.num_drafts, 0);
    for (int64_t k = 1; k <= 4; ++k) {
      SCOPED_TRACE(k);
      const auto t0 = std::chrono::steady_clock::now();
      const Outcome spec = run(r, jobs, k);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_EQ(spec.tokens, plain.tokens);
      EXPECT_GT(spec.stats.spec.num_drafts, 0);
      EXPECT_EQ(spec.stats.generation_tokens, plain.stats.generation_tokens);
      // Greedy drafts and verify rows are drawn on the device (only ids come back); drawn on the
      // host from every logits row instead, the same drafts are made and accepted.
      EngineConfig host;
      host.device_sampling = false;
      const Outcome on_host = run(r, jobs, k, {}, host);
      EXPECT_EQ(on_host.tokens, plain.tokens);
      EXPECT_EQ(on_host.stats.spec.num_drafts, spec.stats.spec.num_drafts);
      EXPECT_EQ(on_host.stats.spec.num_draft_tokens, spec.stats.spec.num_draft_tokens);
      EXPECT_EQ(on_host.stats.spec.num_accepted_tokens, spec.stats.spec.num_accepted_tokens);
      EXPECT_EQ(on_host.stats.spec.accepted_per_position, spec.stats.spec.accepted_per_position);
      std::printf("%s k=%lld: %lld rounds, %lld drafts, %lld accepted (%.2f s)\n", fixture,
                  static_cast<long long>(k), static_cast<long long>(spec.stats.spec.num_drafts),
                  static_cast<long long>(spec.stats.spec.num_draft_tokens),
                  static_cast<long long>(spec.stats.spec.num_accepted_tokens), s);
    }
  }
}

// Drafts forced right are all accepted (a round emits k + 1 tokens); right except at every
// third position, every acceptance length occurs; the output is plain greedy's either way.
TEST(SpeculativeEngine, ForcedDraftsAreAcceptedUpToTheFirstWrongOne) {
  ModelRunner& r = *mtp_model("tiny-glm5").runner;
  const auto jobs = mixed_jobs(77);
  const Outcome plain = run(r, jobs, 0);
  for (int64_t k : {1, 3, 4}) {
    SCOPED_TRACE(k);
    const Outcome right = run(r, jobs, k, {}, {}, forced_drafts(jobs, plain.tokens, 0));
    EXPECT_EQ(right.tokens, plain.tokens);
    EXPECT_EQ(right.stats.spec.num_accepted_tokens, right.stats.spec.num_draft_tokens);
    EXPECT_GT(right.stats.spec.accepted_per_position[static_cast<size_t>(k - 1)], 0);
    const Outcome mixed = run(r, jobs, k, {}, {}, forced_drafts(jobs, plain.tokens, 3));
    EXPECT_EQ(mixed.tokens, plain.tokens);
    EXPECT_LT(mixed.stats.spec.num_accepted_tokens, mixed.stats.spec.num_draft_tokens);
    EXPECT_GT(mixed.stats.spec.num_accepted_tokens, 0);
  }
}

// Chunked prefill (budgets of 7 and 48 tokens, drafts included), preemption (a pool of 15
// blocks of 16 holds any one request but not the batch) and block sizes of 1 and 64, with
// drafts mostly right so that rounds carry several tokens.
TEST(SpeculativeEngine, ChunkingPreemptionAndBlockSizesKeepGreedyExact) {
  for (const char* fixture : {"tiny-glm5", "tiny-dsv3"}) {
    SCOPED_TRACE(fixture);
    ModelRunner& r = *mtp_model(fixture).runner;
    const auto jobs = mixed_jobs(5);
    const Outcome plain = run(r, jobs, 0);
    const auto forced = forced_drafts(jobs, plain.tokens, 4);
    for (int64_t budget : {7, 48}) {
      EngineConfig cfg;
      cfg.limits.max_num_batched_tokens = budget;
      EXPECT_EQ(run(r, jobs, 3, {}, cfg, forced).tokens, plain.tokens) << "budget " << budget;
      EXPECT_EQ(run(r, jobs, 2, {}, cfg).tokens, plain.tokens) << "budget " << budget;
    }
    for (int64_t bs : {1, 64})
      EXPECT_EQ(run(r, jobs, 4, {bs, 6000 / bs}, {}, forced).tokens, plain.tokens) << "bs " << bs;
    EngineConfig cfg;
    cfg.limits.max_num_batched_tokens = 64;
    const Outcome preempted = run(r, jobs, 3, {16, 15}, cfg, forced);
    EXPECT_EQ(preempted.tokens, plain.tokens);
    EXPECT_GT(preempted.stats.num_preemptions, 0);
  }
}

// Requests sharing prefixes, one after another: later ones take cached blocks (only committed
// tokens' blocks are published) and still decode exactly.
TEST(SpeculativeEngine, PrefixCachingKeepsGreedyExact) {
  ModelRunner& r = *mtp_model("tiny-dsv32").runner;
  std::mt19937 rng(3);
  const auto shared = random_prompt(rng, 70);
  std::vector<Job> jobs;
  for (int i = 0; i < 8; ++i) {
    auto p = shared;
    const auto tail = random_prompt(rng, 3 + 11 * i);
    p.insert(p.end(), tail.begin(), tail.end());
    jobs.push_back({p, greedy(12 + i)});
  }
  EngineConfig no_cache;
  no_cache.enable_prefix_caching = false;
  const Outcome plain = run(r, jobs, 0, {}, no_cache);
  const auto forced = forced_drafts(jobs, plain.tokens, 5);
  // One at a time through one engine, so that each finds the earlier ones' blocks.
  for (int64_t k : {1, 3}) {
    r.allocate_kv_cache(512, 16);
    EngineConfig cfg;
    cfg.limits.num_speculative_tokens = k;
    Engine engine(r, cfg);
    engine.set_draft_override(forced);
    for (size_t i = 0; i < jobs.size(); ++i) {
      std::vector<int32_t> got;
      engine.add_request({.id = std::to_string(i),
                          .prompt_ids = jobs[i].prompt,
                          .params = jobs[i].params,
                          .on_token =
                              [&got](const TokenEvent& ev) {
                                if (ev.token_id >= 0) got.push_back(ev.token_id);
                                return Verdict::kContinue;
                              },
                          .constraint = nullptr});
      while (engine.step()) {
      }
      EXPECT_EQ(got, plain.tokens[i]) << "request " << i << ", k " << k;
    }
    EXPECT_GE(engine.stats().prefix_cache_hits, 7 * 64);
  }
}

// Sampled output (temperature 1, seeded): a seed repeats its output with MTP on, whatever the
// batch around it; top_k 1 is greedy.
TEST(SpeculativeEngine, ASeedRepeatsItsSampledOutput) {
  ModelRunner& r = *mtp_model("tiny-glm5").runner;
  auto jobs = mixed_jobs(9);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].params.temperature = 1.0;
    jobs[i].params.seed = 100 + i;
  }
  const Outcome a = run(r, jobs, 3);
  EXPECT_EQ(run(r, jobs, 3).tokens, a.tokens);
  EXPECT_GT(a.stats.spec.num_drafts, 0);
  // Alone, and in a chunked batch: the same tokens.
  EXPECT_EQ(run(r, {jobs[3]}, 3).tokens[0], a.tokens[3]);
  EngineConfig chunked;
  chunked.limits.max_num_batched_tokens = 40;
  EXPECT_EQ(run(r, jobs, 3, {}, chunked).tokens, a.tokens);

  auto top1 = mixed_jobs(9);
  const Outcome plain = run(r, top1, 0);
  for (Job& j : top1) {
    j.params.temperature = 1.0;
    j.params.top_k = 1;
    j.params.seed = 5;
  }
  EXPECT_EQ(run(r, top1, 2).tokens, plain.tokens);
}

// Seeded requests of one prompt (temperature 1, top_k 3, 3 tokens, n samples each) for a fit of
// the first two tokens, and a draft override forcing the second token's draft of every even
// request to the target's greedy second token (so drafts are both accepted and rejected).
struct SeededFit {
  std::vector<int32_t> prompt = {1, 17, 300, 45, 999, 2, 64, 128, 7, 511, 33};
  SamplingParams params;
  std::vector<Job> jobs;
  Engine::RequestDraftOverride forced;

  SeededFit(ModelRunner& r, int n, uint64_t count) {
    params.n = n;
    params.top_k = 3;
    params.max_tokens = 3;  // the second token is drafted (none is past the last)
    params.ignore_eos = true;
    for (uint64_t seed = 0; seed < count; ++seed) {
      SamplingParams p = params;
      p.seed = seed;
      jobs.push_back({prompt, p});
    }
    const int32_t greedy_second = run(r, {{prompt, greedy(2)}}, 0).tokens[0][1];
    const auto second = static_cast<int64_t>(prompt.size()) + 1;
    forced = [greedy_second, second](const std::string& id, int64_t position, int32_t drafted) {
      return std::stoi(id) % 2 == 0 && position == second ? greedy_second : drafted;
    };
  }

  // The chi-square p-value of `outputs`' first two tokens against the target's joint
  // distribution of them.
  double p_value(ModelRunner& r, const std::vector<std::vector<int32_t>>& outputs) const {
    const int64_t vocab = r.config().vocab_size;
    const auto cell = [&](int32_t t0, int32_t t1) { return static_cast<size_t>(t0 * vocab + t1); };
    std::vector<int64_t> counts(static_cast<size_t>(vocab * vocab), 0);
    for (const auto& t : outputs) {
      EXPECT_EQ(t.size(), 3u);
      if (t.size() >= 2) ++counts[cell(t[0], t[1])];
    }
    SamplingParams one = params;
    one.n = 1;
    std::vector<double> expected(counts.size(), 0.0);
    const std::vector<double> first = target_probs(r, prompt, prompt.size(), one);
    for (int32_t t0 = 0; t0 < vocab; ++t0) {
      if (first[static_cast<size_t>(t0)] == 0) continue;
      std::vector<int32_t> tokens = prompt;
      tokens.push_back(t0);
      const std::vector<double> next = target_probs(r, tokens, prompt.size(), one);
      for (int32_t t1 = 0; t1 < vocab; ++t1)
        expected[cell(t0, t1)] = first[static_cast<size_t>(t0)] * next[static_cast<size_t>(t1)];
    }
    return testing::chi_square_p_value(counts, expected);
  }
};

// Sampled output through the engine follows the target: 400 seeded requests (temperature 1,
// top_k 3, k = 2) in one batch, odd seeds drafting with the MTP layer and even ones forced to
// the target's greedy second token (accepted with its probability), fit the target's joint
// distribution of the first two tokens: chi-square p-value > 1e-4, drafts both accepted and
// rejected.
TEST(SpeculativeEngine, SampledOutputFollowsTheTarget) {
  ModelRunner& r = *mtp_model("tiny-glm5").runner;
  const SeededFit fit(r, 1, 400);
  const Outcome got = run(r, fit.jobs, 2, {16, 2048}, {}, fit.forced);
  EXPECT_GT(got.stats.spec.num_accepted_tokens, 0);
  EXPECT_LT(got.stats.spec.num_accepted_tokens, got.stats.spec.num_draft_tokens);
  EXPECT_GT(fit.p_value(r, got.tokens), 1e-4);
}

// Requests of every kind in one batch keep their outputs: a prompt logprobs request, a
// logprobs one and an n = 2 one beside plain ones, all drafting.
TEST(SpeculativeEngine, MixedRequestsKeepTheirOutputsBesideDraftingOnes) {
  ModelRunner& r = *mtp_model("tiny-dsv3").runner;
  auto jobs = mixed_jobs(21);
  jobs[1].params.logprobs = 2;
  jobs[2].params.prompt_logprobs = 1;
  jobs[3].params.n = 2;
  const Outcome plain = run(r, jobs, 0);
  const Outcome spec = run(r, jobs, 2);
  EXPECT_EQ(spec.samples, plain.samples);
  EXPECT_GT(spec.stats.spec.num_drafts, 0);
}

// Whether two logprobs entries agree: the same tokens and rank, values within `tol`; counts
// the values that are not bitwise equal in `inexact` and keeps the largest difference.
void expect_logprobs_near(const Logprobs& got, const Logprobs& want, float tol, int64_t& inexact,
                          float& largest) {
  EXPECT_EQ(got.sampled.token_id, want.sampled.token_id);
  EXPECT_NEAR(got.sampled.logprob, want.sampled.logprob, tol);
  inexact += got.sampled.logprob != want.sampled.logprob;
  largest = std::max(largest, std::abs(got.sampled.logprob - want.sampled.logprob));
  EXPECT_EQ(got.rank, want.rank);
  ASSERT_EQ(got.top.size(), want.top.size());
  for (size_t t = 0; t < got.top.size(); ++t) {
    EXPECT_EQ(got.top[t].token_id, want.top[t].token_id);
    EXPECT_NEAR(got.top[t].logprob, want.top[t].logprob, tol);
    inexact += got.top[t].logprob != want.top[t].logprob;
    largest = std::max(largest, std::abs(got.top[t].logprob - want.top[t].logprob));
  }
}

// Logprobs requests (logprobs 0 and 5) draft: with k = 1..3, the MTP layer's drafts and drafts
// forced mostly right (so that accepted drafts report the rows they were verified on), every
// token equals plain decoding's and so do its logprobs (the verify row j of a round is the row
// plain decoding draws the round's j-th token from).
TEST(SpeculativeEngine, LogprobsRequestsDraftAndReportPlainLogprobs) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    ModelRunner& r = *mtp_model(fixture).runner;
    auto jobs = mixed_jobs(41);
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].params.logprobs = i % 2 == 0 ? 0 : 5;
    const Outcome plain = run(r, jobs, 0);
    int64_t inexact = 0, values = 0;
    float largest = 0;
    for (int64_t k = 1; k <= 3; ++k) {
      SCOPED_TRACE(k);
      for (const bool forced : {false, true}) {
        const Outcome spec =
            run(r, jobs, k, {}, {}, forced ? forced_drafts(jobs, plain.tokens, 3) : nullptr);
        EXPECT_EQ(spec.samples, plain.samples);
        EXPECT_GT(spec.stats.spec.num_drafts, 0);
        // The random MTP layer's drafts are rarely right; forced ones mostly are.
        if (forced) {
          EXPECT_GT(spec.stats.spec.num_accepted_tokens, 0);
        }
        ASSERT_EQ(spec.logprobs.size(), plain.logprobs.size());
        for (size_t i = 0; i < jobs.size(); ++i) {
          const std::vector<Logprobs>& got = spec.logprobs[i][0];
          const std::vector<Logprobs>& want = plain.logprobs[i][0];
          ASSERT_EQ(got.size(), plain.samples[i][0].size());
          ASSERT_EQ(got.size(), want.size());
          for (size_t t = 0; t < got.size(); ++t) {
            expect_logprobs_near(got[t], want[t], 1e-5f, inexact, largest);
            values += 1 + static_cast<int64_t>(want[t].top.size());
          }
        }
      }
    }
    std::printf(
        "%s: %lld of %lld logprobs not bitwise equal to plain decoding's, largest "
        "difference %.3g\n",
        fixture, static_cast<long long>(inexact), static_cast<long long>(values),
        static_cast<double>(largest));
  }
}

// Prompt logprobs requests (prompt_logprobs 0 and 3) draft: with k = 1..3, drafts forced
// mostly right, whole, chunked (budget 7: the prompt is scored over several steps) and preempted
// (the recompute scores nothing twice), the tokens and the prompt's logprobs equal plain
// decoding's.
TEST(SpeculativeEngine, PromptLogprobsRequestsDraftAndScoreThePromptAsPlain) {
  ModelRunner& r = *mtp_model("tiny-dsv32").runner;
  auto jobs = mixed_jobs(71);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].params.prompt_logprobs = i % 2 == 0 ? 0 : 3;
  const Outcome plain = run(r, jobs, 0);
  EngineConfig chunked;
  chunked.limits.max_num_batched_tokens = 7;
  EngineConfig tight;
  tight.limits.max_num_batched_tokens = 64;
  int64_t inexact = 0;
  float largest = 0;
  for (int64_t k = 1; k <= 3; ++k) {
    SCOPED_TRACE(k);
    const auto forced = forced_drafts(jobs, plain.tokens, 4);
    const Outcome whole = run(r, jobs, k, {}, {}, forced);
    const Outcome parts = run(r, jobs, k, {}, chunked, forced);
    const Outcome preempted = run(r, jobs, k, {16, 15}, tight, forced);
    EXPECT_GT(preempted.stats.num_preemptions, 0);
    for (const Outcome* spec : {&whole, &parts, &preempted}) {
      EXPECT_EQ(spec->samples, plain.samples);
      EXPECT_GT(spec->stats.spec.num_accepted_tokens, 0);
      for (size_t i = 0; i < jobs.size(); ++i) {
        const std::vector<Logprobs>& got = spec->prompt_logprobs[i];
        const std::vector<Logprobs>& want = plain.prompt_logprobs[i];
        ASSERT_EQ(want.size(), jobs[i].prompt.size() - 1);
        ASSERT_EQ(got.size(), want.size());
        for (size_t t = 0; t < got.size(); ++t)
          expect_logprobs_near(got[t], want[t], 1e-5f, inexact, largest);
      }
    }
  }
  std::printf(
      "prompt logprobs: %lld not bitwise equal to plain decoding's, largest difference "
      "%.3g\n",
      static_cast<long long>(inexact), static_cast<double>(largest));
}

// n = 3 greedy: every sample drafts once the first draw has forked the request and equals plain
// decoding's, with the MTP layer's drafts and drafts forced mostly right.
TEST(SpeculativeEngine, GreedySamplesOfOneRequestEqualPlain) {
  ModelRunner& r = *mtp_model("tiny-glm5").runner;
  auto jobs = mixed_jobs(51);
  for (Job& j : jobs) j.params.n = 3;
  const Outcome plain = run(r, jobs, 0);
  std::vector<std::vector<int32_t>> first;
  for (const auto& s : plain.samples) first.push_back(s[0]);
  for (int64_t k : {1, 3}) {
    SCOPED_TRACE(k);
    const Outcome spec = run(r, jobs, k);
    EXPECT_EQ(spec.samples, plain.samples);
    EXPECT_GT(spec.stats.spec.num_drafts, 0);
    const Outcome forced = run(r, jobs, k, {}, {}, forced_drafts(jobs, first, 4));
    EXPECT_EQ(forced.samples, plain.samples);
    EXPECT_GT(forced.stats.spec.num_accepted_tokens, 0);
  }
}

// n = 3 sampled (temperature 1, seeded): a seed repeats its output, the samples of a request are
// not all equal, two samples with the same first token go on independently, and every sample's
// first two tokens fit the target's joint distribution
// (chi-square p-value > 1e-4 over 150 requests of 3 samples, top_k 3, k = 2; even seeds with
// the parent's second-token draft forced to the target's greedy one).
TEST(SpeculativeEngine, SampledSamplesOfOneRequestAreIndependentAndFollowTheTarget) {
  ModelRunner& r = *mtp_model("tiny-glm5").runner;
  auto jobs = mixed_jobs(61);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i].params.n = 3;
    jobs[i].params.temperature = 1.0;
    jobs[i].params.seed = 300 + i;
  }
  const Outcome a = run(r, jobs, 2);
  EXPECT_EQ(run(r, jobs, 2).samples, a.samples);
  EXPECT_GT(a.stats.spec.num_drafts, 0);
  int64_t differing = 0;
  for (const auto& s : a.samples) differing += !(s[0] == s[1] && s[1] == s[2]);
  EXPECT_EQ(differing, static_cast<int64_t>(jobs.size()));

  const SeededFit fit(r, 3, 150);
  const Outcome got = run(r, fit.jobs, 2, {16, 2048}, {}, fit.forced);
  EXPECT_GT(got.stats.spec.num_accepted_tokens, 0);
  EXPECT_LT(got.stats.spec.num_accepted_tokens, got.stats.spec.num_draft_tokens);
  // Samples 1 and 2 of a request that drew the same first token have the same history: their
  // second tokens differ only if their streams do (streams shared between samples would repeat
  // the draw).
  int64_t same_first = 0, same_second = 0;
  for (const auto& request : got.samples)
    if (request[1][0] == request[2][0]) {
      ++same_first;
      same_second += request[1][1] == request[2][1];
    }
  EXPECT_GT(same_first, 10);
  EXPECT_LT(same_second, same_first);
  std::vector<std::vector<int32_t>> outputs;
  for (const auto& request : got.samples)
    outputs.insert(outputs.end(), request.begin(), request.end());
  EXPECT_GT(fit.p_value(r, outputs), 1e-4);
}

// Stops inside an accepted round end the output there: stop ids, max_tokens and an owner's
// kStop verdict, as plain decoding ends it.
TEST(SpeculativeEngine, StopsInsideARoundEndTheOutputThere) {
  ModelRunner& r = *mtp_model("tiny-glm5").runner;
  auto jobs = mixed_jobs(31);
  const Outcome plain = run(r, jobs, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& t = plain.tokens[i];
    if (t.size() > 3) jobs[i].params.stop_token_ids = {t[t.size() / 2]};
  }
  const Outcome stopped_plain = run(r, jobs, 0);
  const Outcome stopped = run(r, jobs, 4, {}, {}, forced_drafts(jobs, plain.tokens, 0));
  EXPECT_EQ(stopped.tokens, stopped_plain.tokens);
  EXPECT_LT(stopped.stats.generation_tokens, plain.stats.generation_tokens);
}

// On the GPU (eager draft and verify steps, the carry in device memory): greedy output with
// k = 1..4 equals the GPU's own plain output, drafts forced mostly right, whole and chunked.
TEST(SpeculativeEngine, GpuGreedyEqualsPlain) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    ModelRunner& r = *mtp_model(fixture, "cuda").runner;
    const auto jobs = mixed_jobs(41);
    const Outcome plain = run(r, jobs, 0);
    const auto forced = forced_drafts(jobs, plain.tokens, 4);
    for (int64_t k = 1; k <= 4; ++k) {
      SCOPED_TRACE(k);
      EXPECT_EQ(run(r, jobs, k).tokens, plain.tokens);
      const Outcome right = run(r, jobs, k, {}, {}, forced);
      EXPECT_EQ(right.tokens, plain.tokens);
      EXPECT_GT(right.stats.spec.num_accepted_tokens, 0);
    }
    EngineConfig chunked;
    chunked.limits.max_num_batched_tokens = 48;
    EXPECT_EQ(run(r, jobs, 3, {}, chunked, forced).tokens, plain.tokens);
  }
}

// On the GPU, logprobs requests (the host path) and n = 3 greedy requests (whose samples take
// the device path once forked) with MTP equal the GPU's own output without: tokens, and
// logprobs within 1e-5.
TEST(SpeculativeEngine, GpuLogprobsAndSamplesEqualPlain) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    ModelRunner& r = *mtp_model(fixture, "cuda").runner;
    auto jobs = mixed_jobs(43);
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (i % 2 == 0) jobs[i].params.logprobs = i % 4 == 0 ? 0 : 5;
      if (i % 2 == 1) jobs[i].params.n = 3;
    }
    const Outcome plain = run(r, jobs, 0);
    std::vector<std::vector<int32_t>> first;
    for (const auto& s : plain.samples) first.push_back(s[0]);
    int64_t inexact = 0;
    float largest = 0;
    for (int64_t k = 1; k <= 3; ++k) {
      SCOPED_TRACE(k);
      const Outcome spec = run(r, jobs, k, {}, {}, forced_drafts(jobs, first, 4));
      EXPECT_EQ(spec.samples, plain.samples);
      EXPECT_GT(spec.stats.spec.num_accepted_tokens, 0);
      for (size_t i = 0; i < jobs.size(); i += 2) {
        ASSERT_EQ(spec.logprobs[i][0].size(), plain.logprobs[i][0].size());
        for (size_t t = 0; t < plain.logprobs[i][0].size(); ++t)
          expect_logprobs_near(spec.logprobs[i][0][t], plain.logprobs[i][0][t], 1e-5f, inexact,
                               largest);
      }
    }
    std::printf("%s on the GPU: %lld logprobs not bitwise equal, largest difference %.3g\n",
                fixture, static_cast<long long>(inexact), static_cast<double>(largest));
  }
}

// With a memory plan on the GPU (an FP8 fixture, whose decode graphs capture): the verify steps
// replay the decode graphs, the MTP layer's draft steps its own, and greedy output with k = 1..3
// equals the eager (--enforce-eager) runner's under the same plan.
TEST(SpeculativeEngine, GpuGraphsServeVerifyAndDraftSteps) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  const ServingLimits base{.max_num_batched_tokens = 256,
                           .max_num_seqs = 64,  // buckets up to 64: 10 verifies of k + 1 <= 4
                           .max_model_len = 512,
                           .block_size = 16};
  const auto jobs = mixed_jobs(43);
  std::map<bool, std::map<int64_t, Outcome>> out;  // [eager][k]
  // The graph runner's replays per k: decode graphs (in a run where every sequence drafts, a
  // verify step's) and the MTP layer's.
  std::map<int64_t, std::pair<int64_t, int64_t>> replays;
  for (const bool eager : {false, true}) {
    io::testing::TestDir dir;
    testing::write_mtp_checkpoint(kTestData / "tiny-glm5-fp8", dir.path(), 11);
    ModelRunner r(RunnerOptions{
        .model = dir.path(), .device = Device::cuda(0), .enforce_eager = eager, .mtp = true});
    const auto serve = [&](int64_t k, const Engine::RequestDraftOverride& forced) {
      ServingLimits limits = base;
      limits.num_speculative_tokens = k;
      const PlanBudget budget{
          .device_bytes = int64_t{16} << 30,
          .kv_cache_memory_bytes =
              16 * limits.max_model_len * KvCache::bytes_per_token(r.config(), DType::kBF16, true)};
      apply_plan(r, plan_memory(r, limits, budget, ProfileMode::kReal));
      const int64_t before = r.graph_replays(), mtp_before = r.mtp_graph_replays();
      Engine engine(r, {.limits = limits});
      if (forced) engine.set_draft_override(forced);
      Outcome o;
      o.tokens.resize(jobs.size());
      for (size_t i = 0; i < jobs.size(); ++i)
        engine.add_request({.id = std::to_string(i),
                            .prompt_ids = jobs[i].prompt,
                            .params = jobs[i].params,
                            .on_token =
                                [&o, i](const TokenEvent& ev) {
                                  if (ev.token_id >= 0) o.tokens[i].push_back(ev.token_id);
                                  return Verdict::kContinue;
                                },
                            .constraint = nullptr});
      while (engine.step()) {
      }
      o.stats = engine.stats();
      if (!eager) replays[k] = {r.graph_replays() - before, r.mtp_graph_replays() - mtp_before};
      return o;
    };
    out[eager][0] = serve(0, nullptr);
    if (!eager) {
      EXPECT_FALSE(r.captured_buckets().empty());
      EXPECT_FALSE(r.captured_mtp_buckets().empty());
    }
    for (int64_t k = 1; k <= 3; ++k)
      out[eager][k] = serve(k, forced_drafts(jobs, out[eager][0].tokens, 4));
  }
  EXPECT_EQ(out[false][0].tokens, out[true][0].tokens);
  for (int64_t k = 1; k <= 3; ++k) {
    SCOPED_TRACE(k);
    // Replayed verify steps give the eager steps' bits (the drafts are forced, so the MTP steps'
    // bits, padded only in a replay, do not reach the output). Against plain decoding an FP8
    // model's greedy output may part: its FP8 GEMMs choose their algorithm and K split by the
    // step's row count (decode_graphs.h), and a verify step has k + 1 rows per sequence where a
    // decode has one. Counted, not required.
    EXPECT_EQ(out[false][k].tokens, out[true][k].tokens);
    EXPECT_EQ(out[false][k].stats.spec.num_accepted_tokens,
              out[true][k].stats.spec.num_accepted_tokens);
    EXPECT_GT(out[false][k].stats.spec.num_accepted_tokens, 0);
    int64_t parted = 0;
    for (size_t i = 0; i < jobs.size(); ++i)
      parted += out[false][k].tokens[i] != out[false][0].tokens[i];
    EXPECT_GT(replays[k].first, 0);   // verify steps
    EXPECT_GT(replays[k].second, 0);  // the MTP layer's catch-up and draft steps
    std::printf(
        "tiny-glm5-fp8 on the GPU with graphs, k=%lld: %lld rounds, %lld verify and %lld MTP "
        "graph replays; %lld of %zu outputs part from plain decoding's\n",
        static_cast<long long>(k), static_cast<long long>(out[false][k].stats.spec.num_drafts),
        static_cast<long long>(replays[k].first), static_cast<long long>(replays[k].second),
        static_cast<long long>(parted), jobs.size());
  }
}

// The engine refuses speculative limits on a runner without the MTP layer.
TEST(SpeculativeEngine, NeedsTheMtpLayer) {
  ModelRunner r(RunnerOptions{.model = kTestData / "tiny-dsv3"});
  r.allocate_kv_cache(16, 16);
  EngineConfig cfg;
  cfg.limits.num_speculative_tokens = 2;
  EXPECT_THROW(Engine(r, cfg), InvalidArgument);
}

// The memory plan of a speculative server counts the MTP layer's KV and carry and profiles the
// verify and MTP steps (meta equals real); serving under it, with a pool small enough to
// preempt, never passes the profiled workspace; an engine with another k is refused.
TEST(SpeculativeEngine, PlannedServingStaysInsideThePlan) {
  ModelRunner& runner = *mtp_model("tiny-glm5").runner;
  const io::ModelConfig& c = runner.config();
  const ServingLimits limits{.max_num_batched_tokens = 128,
                             .max_num_seqs = 8,
                             .max_model_len = 256,
                             .block_size = 16,
                             .num_speculative_tokens = 3};
  const int64_t per_token = KvCache::bytes_per_token(c, DType::kF32, /*mtp=*/true);
  EXPECT_GT(per_token, KvCache::bytes_per_token(c, DType::kF32));
  const PlanBudget budget{.device_bytes = int64_t{1} << 30,
                          .utilization = 0.9,
                          .kv_cache_memory_bytes = per_token * 16 * 24};
  const MemoryPlan meta = plan_memory(runner, limits, budget, ProfileMode::kMeta);
  const MemoryPlan plan = plan_memory(runner, limits, budget, ProfileMode::kReal);
  EXPECT_EQ(meta.ranks[0].step_workspace_bytes, plan.ranks[0].step_workspace_bytes);
  EXPECT_EQ(plan.ranks[0].kv_bytes_per_token, per_token);
  EXPECT_EQ(plan.ranks[0].mtp_carry_bytes, 128 * c.hidden_size * 4);
  EXPECT_EQ(plan.num_blocks, 24);
  ServingLimits plain_limits = limits;
  plain_limits.num_speculative_tokens = 0;
  const MemoryPlan plain = plan_memory(runner, plain_limits, budget, ProfileMode::kMeta);
  EXPECT_GT(plan.ranks[0].step_workspace_bytes, plain.ranks[0].step_workspace_bytes);
  EXPECT_EQ(plain.ranks[0].mtp_carry_bytes, plan.ranks[0].mtp_carry_bytes);

  apply_plan(runner, plan);  // from here an allocation past the plan throws
  EXPECT_THROW(Engine(runner, {.limits = plain_limits}), InvalidArgument);
  Engine engine(runner, {.limits = plan.limits});
  engine_test::expect_stress_inside_plan(runner, plan, engine, 48);
  EXPECT_GT(engine.stats().spec.num_drafts, 0);
  // The runner serves the other tests unplanned again.
  runner.set_memory_limits({-1});
  runner.reserve_step_workspaces({0});
}

// The GLM-5-shaped model (bench/models/glm5-shaped, dummy weights) with an MTP layer, planned
// for an H200 in meta mode (no GPU needed): the GPU's bf16 carry and the MTP steps traced
// through the CUDA ops' contracts, the MTP layer's weights and KV counted.
TEST(SpeculativeEngine, PlansTheGlm5ShapedModelWithMtpForAGpuInMetaMode) {
  io::testing::TestDir dir;
  const std::filesystem::path shaped =
      std::filesystem::path(MLASERVE_SOURCE_DIR) / "bench/models/glm5-shaped";
  auto config = nlohmann::json::parse(std::ifstream(shaped / "config.json"));
  config["num_nextn_predict_layers"] = 1;
  std::ofstream(dir / "config.json") << config.dump();
  const auto plan_for = [&](bool mtp, int64_t k) {
    ModelRunner runner({.model = dir.path(),
                        .load_format = LoadFormat::kDummy,
                        .device = Device::cuda(0),
                        .meta = true,
                        .mtp = mtp});
    const ServingLimits limits{.max_num_batched_tokens = 8192,
                               .max_num_seqs = 64,
                               .max_model_len = 4096,
                               .block_size = 64,
                               .num_speculative_tokens = k};
    return plan_memory(
        runner, limits,
        {.device_bytes = int64_t{140} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}},
        ProfileMode::kMeta);
  };
  const MemoryPlan plain = plan_for(false, 0);
  const MemoryPlan spec = plan_for(true, 3);
  const RankPlan &a = plain.ranks[0], &b = spec.ranks[0];
  EXPECT_GT(b.weights_bytes, a.weights_bytes);  // the MTP layer's
  EXPECT_GT(b.kv_bytes_per_token, a.kv_bytes_per_token);
  EXPECT_EQ(b.mtp_carry_bytes, int64_t{8192} * config["hidden_size"].get<int64_t>() * 2);
  EXPECT_GE(b.step_workspace_bytes, a.step_workspace_bytes);
  EXPECT_LT(spec.num_blocks, plain.num_blocks);
  std::printf(
      "glm5-shaped on an H200 (meta): MTP weights %.1f MiB, KV %lld -> %lld bytes/token, "
      "carry %.1f MiB, step workspace %.1f -> %.1f MiB, KV tokens %lld -> %lld\n",
      static_cast<double>(b.weights_bytes - a.weights_bytes) / (1 << 20),
      static_cast<long long>(a.kv_bytes_per_token), static_cast<long long>(b.kv_bytes_per_token),
      static_cast<double>(b.mtp_carry_bytes) / (1 << 20),
      static_cast<double>(a.step_workspace_bytes) / (1 << 20),
      static_cast<double>(b.step_workspace_bytes) / (1 << 20),
      static_cast<long long>(plain.kv_tokens), static_cast<long long>(spec.kv_tokens));
}

// The bundled demo model with its trained MTP layer (tools/demo-model/train_mtp.py), loaded once
// per device.
ModelRunner& demo_runner(const std::string& device) {
  static std::map<std::string, std::unique_ptr<ModelRunner>> runners;
  auto& r = runners[device];
  if (!r)
    r = std::make_unique<ModelRunner>(
        RunnerOptions{.model = std::filesystem::path(MLASERVE_SOURCE_DIR) / "models/demo-glm5",
                      .device = parse_device(device),
                      .mtp = true});
  return *r;
}

// The demo model's first 100 held-out samples (chat prompts, tool calls among them) as greedy
// requests that may run 8 tokens past their target.
std::vector<Job> demo_heldout_jobs() {
  const auto golden = nlohmann::json::parse(
      std::ifstream(std::filesystem::path(MLASERVE_SOURCE_DIR) / "models/demo-glm5/golden.json"));
  std::vector<Job> jobs;
  for (const auto& s : golden["heldout_eval"]) {
    SamplingParams p = greedy(static_cast<int64_t>(s["target_ids"].size()) + 8);
    p.ignore_eos = false;
    jobs.push_back({s["prompt_ids"].get<std::vector<int32_t>>(), p});
  }
  return jobs;
}

// The trained layer's k = 2 acceptance on the held-out samples is 0.906 on the CPU (a random
// layer's: 0.035); the floor fails any layer that did not learn.
constexpr double kDemoAcceptanceFloor = 0.5;

// The held-out samples decode with MTP on exactly as with it off, and the trained layer's drafts
// are mostly right.
TEST(SpeculativeEngine, DemoModelHeldOutSamplesAreExact) {
  ModelRunner& r = demo_runner("cpu");
  const std::vector<Job> jobs = demo_heldout_jobs();
  ASSERT_EQ(jobs.size(), 100u);
  EngineConfig cfg;
  cfg.limits.max_num_seqs = 32;
  const Outcome plain = run(r, jobs, 0, {16, 4096}, cfg);
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome spec = run(r, jobs, 2, {16, 4096}, cfg);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_GT(spec.stats.spec.acceptance_rate(), kDemoAcceptanceFloor);
  std::printf(
      "demo-glm5, trained MTP layer, k=2: 100 held-out samples in %.2f s, acceptance %.3f, "
      "mean acceptance length %.3f\n",
      s, spec.stats.spec.acceptance_rate(), spec.stats.spec.mean_acceptance_length());
}

// On the GPU, k = 1..4: greedy equals plain, and the acceptance figures of
// docs/speculative-decoding.md.
TEST(SpeculativeEngine, DemoModelTrainedLayerGpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  ModelRunner& r = demo_runner("cuda");
  const std::vector<Job> jobs = demo_heldout_jobs();
  EngineConfig cfg;
  cfg.limits.max_num_seqs = 32;
  const Outcome plain = run(r, jobs, 0, {16, 4096}, cfg);
  for (int64_t k = 1; k <= 4; ++k) {
    SCOPED_TRACE(k);
    const Outcome spec = run(r, jobs, k, {16, 4096}, cfg);
    EXPECT_EQ(spec.tokens, plain.tokens);
    const SpeculativeStats& st = spec.stats.spec;
    if (k == 2) {
      EXPECT_GT(st.acceptance_rate(), kDemoAcceptanceFloor);
    }
    std::string per_pos;
    for (int64_t a : st.accepted_per_position) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " %.3f",
                    static_cast<double>(a) / static_cast<double>(st.num_drafts));
      per_pos += buf;
    }
    std::printf(
        "demo-glm5 on the GPU, trained MTP layer, k=%lld: acceptance %.3f, mean acceptance "
        "length %.3f, drafts %lld, per position%s\n",
        static_cast<long long>(k), st.acceptance_rate(), st.mean_acceptance_length(),
        static_cast<long long>(st.num_drafts), per_pos.c_str());
  }
}

}  // namespace
}  // namespace mls
