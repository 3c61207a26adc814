// End-to-end engine tests on the tiny fixtures: greedy tokens must not depend on batch
// composition, block size, chunking, preemption or prefix caching; sampling, n > 1, stops and
// aborts behave as the request asked.
#include "engine/engine.h"
#include "engine/engine_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_data.h"
#include "test_gpu.h"

namespace mls {
namespace {

ModelRunner& runner(const std::string& fixture, const std::string& device = "cpu",
                    ops::TopkTieOrder order = ops::kDefaultTopkTieOrder) {
  static std::map<std::tuple<std::string, std::string, ops::TopkTieOrder>,
                  std::unique_ptr<ModelRunner>>
      runners;
  auto& r = runners[{fixture, device, order}];
  if (!r)
    r = std::make_unique<ModelRunner>(RunnerOptions{.model = kTestData.string() + "/" + fixture,
                                                    .device = parse_device(device),
                                                    .topk_tie_order = order});
  return *r;
}

std::vector<int32_t> golden(const std::string& fixture, const std::string& name) {
  const auto f =
      io::SafetensorsFile::open(kTestData.string() + "/" + fixture + "/golden.safetensors");
  const io::TensorInfo* t = f.find(name);
  if (!t) raise<InvalidArgument>("{} has no {}", fixture, name);
  const auto* p = reinterpret_cast<const int32_t*>(t->data);
  return {p, p + t->numel()};
}

struct Job {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;  // per sample
  std::vector<FinishReason> finish;          // per sample
};

struct Pool {
  int64_t block_size = 16;
  int64_t num_blocks = 512;
};

// Runs the jobs as one batch (all added before the first step) and returns each one's outcome.
std::vector<Outcome> run(ModelRunner& r, const std::vector<Job>& jobs, const Pool& pool = {},
                         const EngineConfig& cfg = {}, EngineStats* stats = nullptr) {
  r.allocate_kv_cache(pool.num_blocks, pool.block_size);
  Engine engine(r, cfg);
  std::vector<Outcome> out(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    out[i].tokens.resize(jobs[i].params.n);
    out[i].finish.resize(jobs[i].params.n);
    engine.add_request({.id = std::to_string(i),
                        .prompt_ids = jobs[i].prompt,
                        .params = jobs[i].params,
                        .on_token =
                            [&out, i](const TokenEvent& ev) {
                              if (ev.token_id >= 0)
                                out[i].tokens[ev.sample_index].push_back(ev.token_id);
                              out[i].finish[ev.sample_index] = ev.finish;
                              return Verdict::kContinue;
                            },
                        .constraint = nullptr});
  }
  while (engine.step()) {
  }
  if (stats) *stats = engine.stats();
  return out;
}

using engine_test::greedy;
using engine_test::random_prompt;

// Mixed prompt lengths (1..200) and lengths of output; the fixture's own prompt comes first.
std::vector<Job> mixed_jobs(const std::string& fixture, int count) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> len(1, 200), out(1, 24);
  std::vector<Job> jobs;
  jobs.push_back({golden(fixture, "generate.prompt_ids"), greedy(40)});
  while (static_cast<int>(jobs.size()) < count) {
    const int l = jobs.size() == 1 ? 200 : jobs.size() == 2 ? 1 : len(rng);
    jobs.push_back({random_prompt(rng, l), greedy(out(rng))});
  }
  return jobs;
}

std::vector<std::vector<int32_t>> first_samples(const std::vector<Outcome>& o) {
  std::vector<std::vector<int32_t>> t;
  for (const auto& x : o) t.push_back(x.tokens[0]);
  return t;
}

// (fixture, device). On the GPU the tokens must equal the GPU's own single-request run (bf16
// rounding moves near-tied logits, so the float64 golden is the CPU's reference only).
class EngineFixture : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (device() != "cpu" && !have_gpu()) GTEST_SKIP() << "no CUDA device here";
  }
  const std::string& fixture() const { return std::get<0>(GetParam()); }
  const std::string& device() const { return std::get<1>(GetParam()); }
};

TEST_P(EngineFixture, BatchOf32MatchesEachRequestAloneAndTheGolden) {
  ModelRunner& r = runner(fixture(), device());
  const auto jobs = mixed_jobs(fixture(), 32);
  std::vector<std::vector<int32_t>> alone;
  for (const Job& j : jobs) alone.push_back(run(r, {j})[0].tokens[0]);
  const auto t0 = std::chrono::steady_clock::now();
  EngineStats st;
  const auto batch = first_samples(run(r, jobs, {}, {}, &st));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(batch, alone);
  if (device() == "cpu") {
    // The golden holds for the engine path in the torch reference tie order (which serves
    // without a prefix cache); the serving order parts from it after the first exact tie at a
    // DSA top-k cut that picks other keys (conformance_test counts them).
    EngineConfig no_cache;
    no_cache.enable_prefix_caching = false;
    ModelRunner& ref = runner(fixture(), "cpu", ops::TopkTieOrder::kTorchReference);
    EXPECT_EQ(run(ref, {jobs[0]}, {}, no_cache)[0].tokens[0],
              golden(fixture(), "generate.output_ids"));
  }
  std::printf(
      "%s on %s: 32 requests, %lld prompt + %lld generated tokens in %.3f s (%.0f output "
      "tok/s), KV pool %lld bytes\n",
      fixture().c_str(), device().c_str(), static_cast<long long>(st.prompt_tokens),
      static_cast<long long>(st.generation_tokens), s, st.generation_tokens / s,
      static_cast<long long>(r.allocator(0).stats().cur(MemTag::kKv)));
}

TEST_P(EngineFixture, BlockSizeChunkSizeAndPreemptionInvariance) {
  ModelRunner& r = runner(fixture(), device());
  const auto jobs = mixed_jobs(fixture(), 8);
  const auto want = first_samples(run(r, jobs));
  for (int64_t bs : {1, 16, 64}) {
    const Pool pool{bs, 6000 / bs};
    EXPECT_EQ(first_samples(run(r, jobs, pool)), want) << "block_size " << bs;
  }
  for (int64_t budget : {7, 64, 8192}) {
    EngineConfig cfg;
    cfg.limits.max_num_batched_tokens = budget;
    EXPECT_EQ(first_samples(run(r, jobs, {}, cfg)), want) << "token budget " << budget;
  }
  // 15 blocks of 16 hold any one request (≤ 240 tokens) but not the batch.
  EngineStats st;
  EngineConfig cfg;
  cfg.limits.max_num_batched_tokens = 64;
  EXPECT_EQ(first_samples(run(r, jobs, {16, 15}, cfg, &st)), want);
  EXPECT_GT(st.num_preemptions, 0);
}

// Steps whose rows all allow it draw where the logits are (ops::sample_rows); the tokens are the
// host Sampler's, greedy or seeded, and a request that needs the host's logits (logprobs,
// penalties) moves the steps it is in back to the host without changing anyone's tokens. On the
// CPU this checks the plumbing (row order, seeds, draw steps); on the GPU also the kernel, which
// agrees with the host except where a q rounds differently (~1e-8 per element, see
// ops/cuda/sampling_cuda_test.cc).
TEST_P(EngineFixture, DeviceSamplingDrawsWhatTheHostSamplerDraws) {
  ModelRunner& r = runner(fixture(), device());
  auto jobs = mixed_jobs(fixture(), 10);
  std::mt19937 rng(21);
  const auto with = [](double t, int64_t top_k, double top_p, double min_p, uint64_t seed) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    p.max_tokens = 12;
    p.ignore_eos = true;
    return p;
  };
  for (const SamplingParams& p :
       {with(0.8, 40, 0.9, 0.0, 1), with(1.1, 0, 1.0, 0.05, 2), with(0.7, 0, 0.5, 0.0, 3),
        with(1.0, 0, 1.0, 0.0, 4), with(1.3, 3, 1.0, 0.0, 5)})
    jobs.push_back({random_prompt(rng, 20 + static_cast<int>(jobs.size())), p});
  EngineConfig host;
  host.device_sampling = false;
  const auto on_host = first_samples(run(r, jobs, {}, host));
  EXPECT_EQ(first_samples(run(r, jobs)), on_host);
  EngineConfig chunked;
  chunked.limits.max_num_batched_tokens = 48;
  EXPECT_EQ(first_samples(run(r, jobs, {}, chunked)), on_host);

  SamplingParams needs_host = with(0.9, 0, 0.95, 0.0, 6);
  needs_host.logprobs = 0;
  needs_host.repetition_penalty = 1.2;
  needs_host.max_tokens = 5;
  jobs.push_back({random_prompt(rng, 25), needs_host});
  EXPECT_EQ(first_samples(run(r, jobs)), first_samples(run(r, jobs, {}, host)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineFixture,
                         ::testing::Combine(::testing::Values("tiny-glm5", "tiny-dsv32",
                                                              "tiny-dsv3"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Two requests in sequence sharing a 100-token prefix (the first has 120 tokens); the second
// finds `want_hits` tokens cached and generates exactly what it generates without the cache.
void check_prefix_reuse(const std::string& fixture, int second_len, int64_t want_hits) {
  ModelRunner& r = runner(fixture);
  std::mt19937 rng(99);
  const auto shared = random_prompt(rng, 100);
  auto a = shared, b = shared;
  const auto tail_a = random_prompt(rng, 20), tail_b = random_prompt(rng, second_len - 100);
  a.insert(a.end(), tail_a.begin(), tail_a.end());
  b.insert(b.end(), tail_b.begin(), tail_b.end());

  EngineConfig no_cache;
  no_cache.enable_prefix_caching = false;
  const auto want = run(r, {{b, greedy(16)}}, {}, no_cache)[0].tokens[0];

  r.allocate_kv_cache(64, 16);
  Engine engine(r, {});
  std::vector<int32_t> got;
  engine.add_request({.id = "a",
                      .prompt_ids = a,
                      .params = greedy(4),
                      .on_token = nullptr,
                      .constraint = nullptr});
  while (engine.step()) {
  }
  const EngineStats before = engine.stats();
  engine.add_request(
      {.id = "b", .prompt_ids = b, .params = greedy(16), .on_token = [&](const TokenEvent& ev) {
         got.push_back(ev.token_id);
         return Verdict::kContinue;
       }});
  while (engine.step()) {
  }
  const EngineStats after = engine.stats();
  EXPECT_EQ(after.prefix_cache_queries - before.prefix_cache_queries, second_len);
  EXPECT_EQ(after.prefix_cache_hits - before.prefix_cache_hits, want_hits);
  EXPECT_EQ(got, want);
}

// 6 full blocks of 16 = 96 tokens of the shared 100 are reused.
TEST(Engine, PrefixCacheReuseIsExact) {
  check_prefix_reuse("tiny-dsv3", 130, 96);
}

// DSA: the serving tie order makes a row's top-k independent of the keys after it, so blocks
// are shared whatever the prompt lengths (the fixtures' topk of 8 ties often at the cut).
TEST(Engine, PrefixCacheReuseIsExactWithTheDsaIndexer) {
  check_prefix_reuse("tiny-glm5", 120, 96);
  check_prefix_reuse("tiny-glm5", 130, 96);
  check_prefix_reuse("tiny-dsv32", 120, 96);
  check_prefix_reuse("tiny-dsv32", 170, 96);
}

// The torch reference order depends on the prompt length: no prefix cache with it.
TEST(Engine, DsaPrefixCachingNeedsTheServingTieOrder) {
  ModelRunner r(RunnerOptions{.model = kTestData.string() + "/tiny-glm5",
                              .topk_tie_order = ops::TopkTieOrder::kTorchReference});
  r.allocate_kv_cache(16, 16);
  EXPECT_THROW(Engine(r, {}), InvalidArgument);
  EngineConfig no_cache;
  no_cache.enable_prefix_caching = false;
  Engine engine(r, no_cache);
}

// forward_sample draws, per logits row, what ops::cpu::sample_row draws from forward()'s logits,
// with their raw logprob; on the GPU only ids and logprobs leave the device.
TEST(Engine, ForwardSampleDrawsFromTheForwardLogits) {
  for (const std::string dev : {"cpu", "cuda"}) {
    if (dev == "cuda" && !have_gpu()) continue;
    ModelRunner& r = runner("tiny-dsv3", dev);
    r.allocate_kv_cache(64, 16);
    std::mt19937 rng(8);
    ForwardBatch b;
    for (int i = 0; i < 3; ++i) {
      const auto prompt = random_prompt(rng, 10 + 9 * i);
      b.token_ids.insert(b.token_ids.end(), prompt.begin(), prompt.end());
      SequenceChunk c;
      c.num_new = static_cast<int64_t>(prompt.size());
      c.block_table = {4 * i, 4 * i + 1, 4 * i + 2};
      b.seqs.push_back(c);
    }
    const std::vector<ops::RowSampling> rows{
        {},
        {.temperature = 0.9, .top_k = 20, .top_p = 0.9, .min_p = 0.0, .uniform = 0.3},
        {.temperature = 1.2, .top_k = 0, .top_p = 1.0, .min_p = 0.02, .uniform = 0.77}};
    const Tensor logits = r.forward(b);
    const SampledRows got = r.forward_sample(b, rows);
    const int64_t V = r.config().vocab_size;
    ops::cpu::SampleScratch scratch;
    std::vector<float> lp(V);
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::span<const float> row(logits.data<float>() + i * V, V);
      EXPECT_EQ(got.ids[i], ops::cpu::sample_row(row, rows[i], scratch)) << dev << " row " << i;
      Sampler::log_softmax(row, lp);
      EXPECT_NEAR(got.logprobs[i], lp[got.ids[i]], 1e-5) << dev << " row " << i;
    }
    EXPECT_THROW(r.forward_sample(b, {rows[0]}), ShapeError);
  }
}

// prompt_logprobs are log_softmax of a one-pass forward's logits at each prompt position,
// whatever the chunking, the logits-row bound (max_num_seqs 3 shortens the chunks) or a cached
// prefix of the same prompt (never reused for such a request), on MLA and DSA models.
TEST(Engine, PromptLogprobsAreTheTeacherForcedLogSoftmax) {
  for (const std::string fixture : {"tiny-dsv3", "tiny-glm5"}) {
    SCOPED_TRACE(fixture);
    ModelRunner& r = runner(fixture);
    std::mt19937 rng(21);
    const auto prompt = random_prompt(rng, 45);
    const auto P = static_cast<int64_t>(prompt.size());
    r.allocate_kv_cache(64, 16);
    ForwardBatch b;
    b.token_ids = prompt;
    SequenceChunk c;
    c.num_new = P;
    c.block_table = {0, 1, 2};
    c.logits = SequenceChunk::Logits::kAll;
    b.seqs.push_back(c);
    const Tensor logits = r.forward(b);
    const int64_t V = r.config().vocab_size;
    std::vector<float> lp(V);

    for (const int64_t budget : {int64_t{8192}, int64_t{7}}) {
      r.allocate_kv_cache(64, 16);
      Engine engine(r, {.limits = {.max_num_batched_tokens = budget, .max_num_seqs = 3}});
      engine.add_request({.id = "warm", .prompt_ids = prompt, .params = greedy(2), .on_token = {}});
      while (engine.step()) {
      }
      SamplingParams p = greedy(3);
      p.prompt_logprobs = 2;
      std::vector<Logprobs> got;
      int events = 0;
      engine.add_request({.id = "scored",
                          .prompt_ids = prompt,
                          .params = p,
                          .on_token = [&](const TokenEvent& ev) {
                            if (ev.prompt_logprobs) got = *ev.prompt_logprobs, ++events;
                            return Verdict::kContinue;
                          }});
      while (engine.step()) {
      }
      EXPECT_EQ(events, 1);
      ASSERT_EQ(static_cast<int64_t>(got.size()), P - 1) << "budget " << budget;
      for (int64_t i = 0; i + 1 < P; ++i) {
        Sampler::log_softmax({logits.data<float>() + i * V, static_cast<size_t>(V)}, lp);
        EXPECT_EQ(got[i].sampled.token_id, prompt[i + 1]);
        EXPECT_NEAR(got[i].sampled.logprob, lp[prompt[i + 1]], 2e-5) << "position " << i + 1;
        ASSERT_EQ(got[i].top.size(), 2u);
        EXPECT_NEAR(got[i].top[0].logprob, *std::max_element(lp.begin(), lp.end()), 2e-5);
      }
    }
  }
}

TEST(Engine, SeededSamplingIsReproducibleAndBatchInvariant) {
  ModelRunner& r = runner("tiny-dsv32");
  SamplingParams p;
  p.temperature = 0.9;
  p.top_p = 0.95;
  p.top_k = 50;
  p.seed = 5;
  p.max_tokens = 20;
  p.ignore_eos = true;
  std::mt19937 rng(7);
  const Job seeded{random_prompt(rng, 30), p};
  const auto alone = run(r, {seeded})[0].tokens[0];
  EXPECT_EQ(run(r, {seeded})[0].tokens[0], alone);
  auto jobs = mixed_jobs("tiny-dsv32", 6);
  jobs.insert(jobs.begin() + 3, seeded);
  EngineConfig cfg;
  cfg.limits.max_num_batched_tokens = 32;
  EXPECT_EQ(run(r, jobs, {}, cfg)[3].tokens[0], alone);
  p.seed = 6;
  EXPECT_NE(run(r, {{seeded.prompt, p}})[0].tokens[0], alone);
}

TEST(Engine, ParallelSamplesShareThePromptBlocks) {
  ModelRunner& r = runner("tiny-dsv3");
  r.allocate_kv_cache(32, 16);
  Engine engine(r, {});
  SamplingParams p;
  p.n = 2;
  p.temperature = 1.0;
  p.seed = 3;
  p.max_tokens = 8;
  p.ignore_eos = true;
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> got(2);
  engine.add_request({.id = "n2",
                      .prompt_ids = random_prompt(rng, 40),
                      .params = p,
                      .on_token =
                          [&](const TokenEvent& ev) {
                            got[ev.sample_index].push_back(ev.token_id);
                            return Verdict::kContinue;
                          },
                      .constraint = nullptr});
  engine.step();  // prefill (blocks 0, 1, 2), two first tokens, fork
  const KvBlockManager& m = engine.block_manager();
  EXPECT_EQ(m.ref_count(0), 2);
  EXPECT_EQ(m.ref_count(1), 2);
  EXPECT_EQ(m.ref_count(2), 1);  // the partial block stays the first sample's own
  EXPECT_EQ(engine.stats().num_running, 2);
  while (engine.step()) {
  }
  EXPECT_EQ(got[0].size(), 8u);
  EXPECT_EQ(got[1].size(), 8u);
  EXPECT_NE(got[0], got[1]);
  EXPECT_DOUBLE_EQ(m.usage(), 0.0);
}

TEST(Engine, AbortFreesBlocksAndNotifies) {
  ModelRunner& r = runner("tiny-dsv3");
  r.allocate_kv_cache(32, 16);
  Engine engine(r, {});
  std::mt19937 rng(5);
  FinishReason finish = FinishReason::kNone;
  int tokens = 0;
  engine.add_request({.id = "x",
                      .prompt_ids = random_prompt(rng, 50),
                      .params = greedy(100),
                      .on_token =
                          [&](const TokenEvent& ev) {
                            tokens += ev.token_id >= 0;
                            finish = ev.finish;
                            return Verdict::kContinue;
                          },
                      .constraint = nullptr});
  engine.step();
  engine.step();
  EXPECT_GT(engine.block_manager().usage(), 0.0);
  engine.abort_request("x");
  EXPECT_FALSE(engine.step());
  EXPECT_EQ(finish, FinishReason::kAbort);
  EXPECT_EQ(tokens, 2);
  EXPECT_DOUBLE_EQ(engine.block_manager().usage(), 0.0);
  EXPECT_EQ(engine.stats().finished_requests, 1);
}

// The server answers a request from its events, so a metrics scrape made once a response is
// complete must count that response's tokens and no longer count it as running or waiting.
TEST(Engine, AFinishedSequencesStatsArePublishedBeforeItsClientSeesIt) {
  ModelRunner& r = runner("tiny-dsv3");
  r.allocate_kv_cache(32, 16);
  Engine engine(r, {});
  std::mt19937 rng(6);
  const auto prompt = random_prompt(rng, 30);
  std::vector<EngineStats> at_finish;
  int64_t tokens_seen = 0;
  const auto record = [&](const TokenEvent& ev) {
    tokens_seen += ev.token_id >= 0;
    if (ev.finish != FinishReason::kNone) {
      at_finish.push_back(engine.stats());
      EXPECT_EQ(at_finish.back().generation_tokens, tokens_seen);
    }
    return Verdict::kContinue;
  };
  engine.add_request({.id = "done",
                      .prompt_ids = prompt,
                      .params = greedy(5),
                      .on_token = record,
                      .constraint = nullptr});
  engine.add_request({.id = "aborted",
                      .prompt_ids = prompt,
                      .params = greedy(100),
                      .on_token = record,
                      .constraint = nullptr});
  while (at_finish.empty()) engine.step();
  ASSERT_EQ(at_finish.size(), 1u);
  EXPECT_EQ(at_finish[0].prompt_tokens, 60);
  EXPECT_EQ(at_finish[0].num_running, 1);
  EXPECT_EQ(at_finish[0].num_waiting, 0);
  engine.abort_request("aborted");
  while (engine.step()) {
  }
  ASSERT_EQ(at_finish.size(), 2u);
  EXPECT_EQ(at_finish[1].num_running, 0);
  EXPECT_EQ(at_finish[1].num_waiting, 0);
}

TEST(Engine, StopsOnStopIdsOwnerVerdictAndLength) {
  ModelRunner& r = runner("tiny-dsv3");
  std::mt19937 rng(11);
  const auto prompt = random_prompt(rng, 20);
  const auto ref = run(r, {{prompt, greedy(12)}})[0];
  EXPECT_EQ(ref.finish[0], FinishReason::kLength);

  SamplingParams p = greedy(12);
  p.stop_token_ids = {ref.tokens[0][4]};
  const auto stop_at = std::find(ref.tokens[0].begin(), ref.tokens[0].end(), ref.tokens[0][4]);
  const auto stopped = run(r, {{prompt, p}})[0];
  EXPECT_EQ(stopped.tokens[0], std::vector<int32_t>(ref.tokens[0].begin(), stop_at + 1));
  EXPECT_EQ(stopped.finish[0], FinishReason::kStop);

  // The owner's verdict on the third token, which reaches it while the fourth step runs (a
  // token that ends nothing is reported beside the next forward): the sequence ends there, and
  // the token that step drew is never reported nor counted.
  r.allocate_kv_cache(32, 16);
  Engine engine(r, {});
  std::vector<int32_t> got;
  Usage usage;
  FinishReason finish = FinishReason::kNone;
  engine.add_request({.id = "s",
                      .prompt_ids = prompt,
                      .params = greedy(12),
                      .on_token =
                          [&](const TokenEvent& ev) {
                            if (ev.token_id >= 0) got.push_back(ev.token_id);
                            usage = ev.usage;
                            finish = ev.finish;
                            return got.size() == 3 ? Verdict::kStop : Verdict::kContinue;
                          },
                      .constraint = nullptr});
  int steps = 1;
  while (engine.step()) ++steps;
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(got, std::vector<int32_t>(ref.tokens[0].begin(), ref.tokens[0].begin() + 3));
  EXPECT_EQ(finish, FinishReason::kStop);
  EXPECT_EQ(usage.completion_tokens, 3);
  EXPECT_EQ(engine.stats().generation_tokens, 3);
  EXPECT_DOUBLE_EQ(engine.block_manager().usage(), 0.0);
}

// A step drawn on the device reports its tokens that end nothing while the next step's forward
// runs; the token that ends a sequence goes out in its own step, after the ones before it.
TEST(Engine, TokensThatEndNothingAreReportedWhileTheNextStepRuns) {
  ModelRunner& r = runner("tiny-dsv3");
  std::mt19937 rng(12);
  const auto prompt = random_prompt(rng, 20);
  const auto ref = run(r, {{prompt, greedy(6)}})[0];
  r.allocate_kv_cache(32, 16);
  Engine engine(r, {});
  int steps_done = 0;
  std::vector<int32_t> got;
  std::vector<int> during;  // the step each token was reported in, from 1
  FinishReason finish = FinishReason::kNone;
  engine.add_request({.id = "d",
                      .prompt_ids = prompt,
                      .params = greedy(6),
                      .on_token =
                          [&](const TokenEvent& ev) {
                            got.push_back(ev.token_id);
                            during.push_back(steps_done + 1);
                            finish = ev.finish;
                            return Verdict::kContinue;
                          },
                      .constraint = nullptr});
  while (engine.step()) ++steps_done;
  EXPECT_EQ(got, ref.tokens[0]);
  EXPECT_EQ(during, (std::vector<int>{2, 3, 4, 5, 6, 6}));
  EXPECT_EQ(finish, FinishReason::kLength);
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.steps, 6);
  EXPECT_GT(st.forward_seconds, 0.0);
  EXPECT_GE(st.schedule_seconds, 0.0);
  EXPECT_GE(st.output_seconds, 0.0);
}

// An abort that finds a token still pending delivers it first, and the owner's verdict on it
// (kStop, as for a closed connection) ends the sequence once: one finish event, its blocks freed
// once, and the engine serves the next request.
TEST(Engine, AnAbortDeliversThePendingTokenAndFinishesOnce) {
  ModelRunner& r = runner("tiny-dsv3");
  std::mt19937 rng(13);
  const auto prompt = random_prompt(rng, 20);
  r.allocate_kv_cache(32, 16);
  Engine engine(r, {});
  std::vector<int32_t> got;
  std::vector<FinishReason> finishes;
  engine.add_request({.id = "a",
                      .prompt_ids = prompt,
                      .params = greedy(8),
                      .on_token =
                          [&](const TokenEvent& ev) {
                            if (ev.token_id >= 0) got.push_back(ev.token_id);
                            if (ev.finish != FinishReason::kNone) finishes.push_back(ev.finish);
                            return Verdict::kStop;
                          },
                      .constraint = nullptr});
  ASSERT_TRUE(engine.step());
  ASSERT_TRUE(got.empty()) << "the first token is reported beside the next forward";
  engine.abort_request("a");
  engine.step();
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(finishes, std::vector<FinishReason>{FinishReason::kStop});
  EXPECT_EQ(engine.stats().finished_requests, 1);
  EXPECT_DOUBLE_EQ(engine.block_manager().usage(), 0.0);
  const auto ref = run(r, {{prompt, greedy(3)}})[0];
  EXPECT_EQ(ref.finish[0], FinishReason::kLength);
  EXPECT_EQ(ref.tokens[0].size(), 3u);
}

TEST(Engine, RejectsRequestsPastMaxModelLen) {
  ModelRunner& r = runner("tiny-dsv3");
  r.allocate_kv_cache(32, 16);
  EngineConfig cfg;
  cfg.limits.max_model_len = 256;
  Engine engine(r, cfg);
  std::mt19937 rng(5);
  try {
    engine.add_request({.id = "long",
                        .prompt_ids = random_prompt(rng, 250),
                        .params = greedy(10),
                        .on_token = nullptr,
                        .constraint = nullptr});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("250"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  // max_tokens near INT64_MAX once overflowed the sum and slipped past the check.
  for (const int64_t max_tokens :
       {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 100}) {
    SamplingParams huge = greedy(1);
    huge.max_tokens = max_tokens;
    EXPECT_THROW(engine.add_request(
                     {.id = "huge", .prompt_ids = {5, 6}, .params = huge, .on_token = nullptr}),
                 InvalidArgument);
  }
  cfg.limits.max_model_len = 1000;
  EXPECT_THROW(Engine(r, cfg), InvalidArgument);  // 32 blocks of 16 hold 512 tokens
  SamplingParams bad;
  bad.top_p = 0;
  EXPECT_THROW(engine.add_request({.id = "p",
                                   .prompt_ids = {5},
                                   .params = bad,
                                   .on_token = nullptr,
                                   .constraint = nullptr}),
               InvalidArgument);
  EXPECT_FALSE(engine.has_work());
}

// An allocation failure inside a step (the allocator's fault hook, as a device out of memory
// would) ends that step's requests with the error and nothing else: requests queued after it,
// and the same prompt again, are served with the tokens of an unfaulted run.
TEST(Engine, AFailedStepFailsItsRequestsAndTheEngineGoesOn) {
  ModelRunner& r = runner("tiny-glm5");
  const auto jobs = mixed_jobs("tiny-glm5", 3);
  const auto want = first_samples(run(r, jobs));
  r.allocate_kv_cache(512, 16);
  Engine engine(r, {});
  std::vector<std::vector<int32_t>> got(jobs.size());
  std::vector<std::string> errors(jobs.size());
  std::vector<FinishReason> finish(jobs.size(), FinishReason::kNone);
  const auto add = [&](size_t i) {
    engine.add_request({.id = std::to_string(i),
                        .prompt_ids = jobs[i].prompt,
                        .params = jobs[i].params,
                        .on_token = [&, i](const TokenEvent& ev) {
                          if (ev.token_id >= 0) got[i].push_back(ev.token_id);
                          if (ev.error) errors[i] = *ev.error;
                          finish[i] = ev.finish;
                          return Verdict::kContinue;
                        }});
  };
  add(0);
  add(1);
  r.allocator(0).fail_nth_allocation(5);  // inside the first step's forward
  engine.step();
  for (size_t i : {0, 1}) {
    EXPECT_EQ(finish[i], FinishReason::kAbort) << i;
    EXPECT_TRUE(got[i].empty()) << i;
    EXPECT_NE(errors[i].find("injected failure"), std::string::npos) << errors[i];
  }
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(engine.block_manager().usage(), 0.0);  // the failed step's blocks are free again
  errors.assign(jobs.size(), "");
  got.assign(jobs.size(), {});
  for (size_t i = 0; i < jobs.size(); ++i) add(i);
  while (engine.step()) {
  }
  EXPECT_EQ(got, want);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_TRUE(errors[i].empty()) << errors[i];
    EXPECT_NE(finish[i], FinishReason::kAbort);
  }
}

}  // namespace
}  // namespace mls
