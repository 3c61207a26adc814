#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/error.h"

namespace mls {
namespace {

constexpr int64_t kVocab = 16;

std::vector<float> ramp() {  // logits 0, 0.25, ..., 3.75: token 15 most likely
  std::vector<float> v(kVocab);
  for (int64_t i = 0; i < kVocab; ++i) v[i] = 0.25f * static_cast<float>(i);
  return v;
}

SampleInput input(const SamplingParams& p, int64_t step_tokens = 0, uint64_t seed = 7) {
  static std::vector<int32_t> out;
  out.assign(step_tokens, 0);
  SampleInput in;
  in.params = &p;
  in.output = out;
  in.seed = seed;
  return in;
}

std::set<int32_t> draws(const SamplingParams& p, int n = 2000) {
  Sampler s(kVocab);
  const auto logits = ramp();
  std::set<int32_t> seen;
  for (int i = 0; i < n; ++i)
    seen.insert(s.sample(logits.data(), input(p, 0, static_cast<uint64_t>(i)), nullptr));
  return seen;
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  Sampler s(kVocab);
  std::vector<float> logits(kVocab, 0.0f);
  logits[3] = logits[9] = 2.0f;
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(s.sample(logits.data(), input(p), nullptr), 3);
}

TEST(Sampler, TopKNeverLeavesTheAllowedSet) {
  SamplingParams p;
  p.top_k = 3;
  const auto seen = draws(p);
  EXPECT_EQ(seen, (std::set<int32_t>{13, 14, 15}));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  SamplingParams p;
  p.top_p = 0.5;
  // Mass of the ramp from the top: keep tokens while the mass above them is < 0.5.
  const auto logits = ramp();
  std::vector<double> prob(kVocab);
  double z = 0;
  for (int64_t i = 0; i < kVocab; ++i) z += prob[i] = std::exp(logits[i]);
  std::set<int32_t> allowed;
  double above = 0;
  for (int64_t i = kVocab - 1; i >= 0 && above < 0.5; --i) {
    allowed.insert(static_cast<int32_t>(i));
    above += prob[i] / z;
  }
  const auto seen = draws(p);
  EXPECT_EQ(seen, allowed);
  EXPECT_GE(allowed.size(), 2u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.min_p = 0.3;  // p_i / p_max = exp(0.25 (i - 15)) >= 0.3  ⇔  i >= 15 - 4.8
  const auto seen = draws(p);
  EXPECT_EQ(seen, (std::set<int32_t>{11, 12, 13, 14, 15}));
}

TEST(Sampler, SameSeedSameTokenAndDrawsFollowTheDistribution) {
  Sampler s(kVocab);
  const auto logits = ramp();
  SamplingParams p;
  p.temperature = 0.7;
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(s.sample(logits.data(), input(p, i, 42), nullptr),
              s.sample(logits.data(), input(p, i, 42), nullptr));
  int top = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) top += s.sample(logits.data(), input(p, 0, i), nullptr) == 15;
  double z = 0;
  for (float l : logits) z += std::exp(l / 0.7);
  const double want = std::exp(logits[15] / 0.7) / z;
  EXPECT_NEAR(static_cast<double>(top) / n, want, 0.03);
}

TEST(Sampler, PenaltiesChangeLogitsAsSpecified) {
  Sampler s(kVocab);
  std::vector<float> logits(kVocab, 1.0f);
  logits[2] = 2.0f;
  logits[3] = -2.0f;
  logits[4] = 0.5f;
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  const std::vector<int32_t> prompt{2, 3, 2};
  const std::vector<int32_t> output{4, 4, 3};
  SampleInput in;
  in.params = &p;
  in.prompt = prompt;
  in.output = output;
  std::vector<float> got = logits;
  s.apply_penalties(got, in);
  EXPECT_FLOAT_EQ(got[2], 1.0f);                      // 2 / 2, in the prompt only
  EXPECT_FLOAT_EQ(got[3], -4.0f - 0.5f - 0.25f);      // -2 · 2, then once in the output
  EXPECT_FLOAT_EQ(got[4], 0.25f - 2 * 0.5f - 0.25f);  // 0.5 / 2, then twice in the output
  EXPECT_FLOAT_EQ(got[5], 1.0f);                      // untouched
  // Scratch state is cleared: the same call again gives the same result.
  std::vector<float> again = logits;
  s.apply_penalties(again, in);
  EXPECT_EQ(again, got);
}

TEST(Sampler, LogprobsAreTheRawLogSoftmax) {
  Sampler s(kVocab);
  const auto logits = ramp();
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  p.repetition_penalty = 3.0;  // penalties do not change the reported logprobs
  Logprobs lp;
  const std::vector<int32_t> prompt{15};
  SampleInput in = input(p);
  in.prompt = prompt;
  const int32_t tok = s.sample(logits.data(), in, &lp);
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  EXPECT_EQ(lp.sampled.token_id, tok);
  EXPECT_NEAR(lp.sampled.logprob, logits[tok] - std::log(z), 1e-5);
  EXPECT_EQ(lp.rank, kVocab - tok);
  ASSERT_EQ(lp.top.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lp.top[i].token_id, 15 - i);
    EXPECT_NEAR(lp.top[i].logprob, logits[15 - i] - std::log(z), 1e-5);
  }
}

// Without penalties or suppression the Sampler's draw is the op's on row_sampling(in): the
// engine's device path hands the op exactly these parameters.
TEST(Sampler, RowSamplingIsTheDrawTheSamplerMakes) {
  Sampler s(kVocab);
  const auto logits = ramp();
  ops::cpu::SampleScratch scratch;
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_LE(Sampler::row_sampling(input(greedy)).temperature, 0.0);
  for (int i = 0; i < 200; ++i) {
    SamplingParams p;
    p.temperature = 0.5 + 0.01 * i;
    p.top_k = i % 7;
    p.top_p = i % 3 == 0 ? 1.0 : 0.6;
    p.min_p = i % 5 == 0 ? 0.1 : 0.0;
    const SampleInput in = input(p, i % 9, 100 + i);
    const ops::RowSampling row = Sampler::row_sampling(in);
    EXPECT_EQ(row.uniform, Sampler::uniform(100 + i, 0, i % 9));
    EXPECT_EQ(s.sample(logits.data(), in, nullptr), ops::cpu::sample_row(logits, row, scratch));
  }
}

// distribution() is what sample() draws from: the same support, the cuts and masks applied,
// probabilities proportional to the op's relative probabilities (ops/sampling.h step 1: exp in
// double, rounded to float) inside the support.
TEST(Sampler, DistributionIsWhatTheDrawFollows) {
  Sampler s(kVocab);
  const auto logits = ramp();
  std::vector<double> probs(kVocab);
  // One logit step of 0.25 below the maximum at temperature 0.8.
  const double next_ratio =
      static_cast<float>(std::exp(-0.25 * static_cast<double>(static_cast<float>(1.0 / 0.8))));
  SamplingParams greedy;
  greedy.temperature = 0;
  s.distribution(logits.data(), input(greedy), probs);
  EXPECT_EQ(probs[15], 1.0);
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 5;
  p.top_p = 0.9;
  s.distribution(logits.data(), input(p), probs);
  std::set<int32_t> support;
  double sum = 0;
  for (int32_t t = 0; t < kVocab; ++t) {
    if (probs[t] > 0) support.insert(t);
    sum += probs[t];
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_EQ(support, draws(p));
  EXPECT_EQ(support.size(), 4u);  // top_p drops the fifth
  EXPECT_NEAR(probs[14] / probs[15], next_ratio, 1e-12);
  // A structured-output mask and a suppressed id take their tokens out.
  const std::vector<uint32_t> mask = {0x7fffu};  // tokens 0..14
  const std::vector<int64_t> eos{14};
  SampleInput in = input(p);
  in.allowed = mask;
  in.suppressed = eos;
  s.distribution(logits.data(), in, probs);
  EXPECT_EQ(probs[15], 0.0);
  EXPECT_EQ(probs[14], 0.0);
  EXPECT_NEAR(probs[12] / probs[13], next_ratio, 1e-12);
}

TEST(Sampler, SuppressedIdsAreNeverSampled) {
  Sampler s(kVocab);
  const auto logits = ramp();
  SamplingParams p;
  p.temperature = 0;
  const std::vector<int64_t> eos{15};
  SampleInput in = input(p);
  in.suppressed = eos;
  EXPECT_EQ(s.sample(logits.data(), in, nullptr), 14);
}

TEST(Sampler, LogitBiasShiftsTheLogitsButNotTheLogprobs) {
  Sampler s(kVocab);
  const auto logits = ramp();
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{2, 100.0f}, {15, -0.5f}};
  std::vector<float> row = logits;
  s.apply_constraints(row, input(p));
  EXPECT_FLOAT_EQ(row[2], logits[2] + 100.0f);
  EXPECT_FLOAT_EQ(row[15], logits[15] - 0.5f);
  EXPECT_FLOAT_EQ(row[7], logits[7]);
  Logprobs lp;
  EXPECT_EQ(s.sample(logits.data(), input(p), &lp), 2);  // +100 forces the token
  std::vector<float> raw(kVocab);
  Sampler::log_softmax(logits, raw);
  EXPECT_FLOAT_EQ(lp.sampled.logprob, raw[2]);  // logprobs stay those of the model
  p.logit_bias = {{15, -100.0f}};
  EXPECT_EQ(s.sample(logits.data(), input(p), nullptr), 14);  // -100 bans it
  p.temperature = 1.0;
  p.logit_bias = {{4, 100.0f}};
  EXPECT_EQ(draws(p, 200), (std::set<int32_t>{4}));
}

TEST(Sampler, AllowedTokenIdsAreTheOnlyDraws) {
  SamplingParams p;
  p.allowed_token_ids = {1, 5, 9};
  EXPECT_EQ(draws(p), (std::set<int32_t>{1, 5, 9}));
  p.temperature = 0;
  EXPECT_EQ(draws(p, 1), (std::set<int32_t>{9}));
}

TEST(Sampler, BadWordsBanTheTokenThatWouldCompleteThem) {
  Sampler s(kVocab);
  const auto logits = ramp();
  SamplingParams p;
  p.temperature = 0;
  p.bad_words_token_ids = {{15}, {3, 14}};
  SampleInput in = input(p);
  const std::vector<int32_t> after_3{7, 3}, after_other{3, 7};
  in.output = after_other;
  EXPECT_EQ(s.sample(logits.data(), in, nullptr), 14);  // 15 always banned; 3 not the last
  in.output = after_3;
  EXPECT_EQ(s.sample(logits.data(), in, nullptr), 13);  // "3 14" would complete: 14 banned
}

TEST(SamplingParams, ValidatesTokenConstraintsAgainstTheVocabulary) {
  SamplingParams p;
  p.logit_bias = {{kVocab, 1.0f}};
  EXPECT_THROW(p.validate(kVocab), InvalidArgument);
  p.logit_bias = {{1, 101.0f}};
  EXPECT_THROW(p.validate(kVocab), InvalidArgument);
  p.logit_bias = {{1, -100.0f}};
  EXPECT_NO_THROW(p.validate(kVocab));
  p.allowed_token_ids = {-1};
  EXPECT_THROW(p.validate(kVocab), InvalidArgument);
  p.allowed_token_ids = {};
  p.bad_words_token_ids = {{}};
  EXPECT_THROW(p.validate(kVocab), InvalidArgument);
  p.bad_words_token_ids = {{3, kVocab}};
  EXPECT_THROW(p.validate(kVocab), InvalidArgument);
  p.bad_words_token_ids = {};
  p.prompt_logprobs = -2;
  EXPECT_THROW(p.validate(kVocab), InvalidArgument);
}

}  // namespace
}  // namespace mls
