#include "engine/speculative_generator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/chi_square_test_util.h"
#include "engine/engine_test_util.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/simple_generator.h"
#include "engine/speculative_config.h"
#include "io/test_dir.h"
#include "model/mtp_test_checkpoint.h"
#include "test_data.h"

namespace mls {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kMaxTokens = 20;

const std::vector<int32_t> kPrompt = {1, 17, 300, 45, 999, 2, 64, 128, 7, 511, 33};

// A fixture with a random MTP layer, its plain greedy output and the model with its MTP layer.
struct Case {
  io::testing::TestDir dir;
  std::vector<int32_t> reference;
  std::unique_ptr<Model> model;

  explicit Case(const std::string& fixture) {
    testing::write_mtp_checkpoint(kTestData / fixture, dir.path(), 11);
    ModelRunner runner({.model = dir.path()});
    reference = generate_greedy(runner, kPrompt, kMaxTokens).output_ids;
    LoadOptions opts;
    opts.mtp = true;
    model = Model::load(dir.path(), opts);
  }
  // The token plain greedy decoding puts at sequence position `position`.
  int32_t at(int64_t position) const {
    return reference.at(static_cast<size_t>(position - static_cast<int64_t>(kPrompt.size())));
  }
};

SpeculativeResult speculate(const Model& model, int64_t k, const DraftOverride& forced = nullptr,
                            std::vector<int64_t> stop = {}) {
  SpeculativeOptions o;
  o.num_speculative_tokens = k;
  o.max_tokens = kMaxTokens;
  o.stop_ids = std::move(stop);
  o.draft_override = forced;
  return generate_speculative(model, kPrompt, o);
}

const char* const kFixtures[] = {"tiny-dsv3", "tiny-dsv32", "tiny-glm5", "tiny-glm5-fp8"};

TEST(SpeculativeGenerator, GreedyEqualsPlainGreedyOnEveryFamily) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const Case c(fixture);
    ASSERT_EQ(c.reference.size(), static_cast<size_t>(kMaxTokens));
    for (int64_t k = 1; k <= 4; ++k) {
      SCOPED_TRACE(k);
      const SpeculativeResult r = speculate(*c.model, k);
      EXPECT_EQ(r.output_ids, c.reference);
      EXPECT_GT(r.stats.num_drafts, 0);
      EXPECT_EQ(r.stats.num_draft_tokens, r.stats.num_drafts * k);
    }
  }
}

TEST(SpeculativeGenerator, RightDraftsAreAllAccepted) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const Case c(fixture);
    for (int64_t k : {1, 3, 4}) {
      SCOPED_TRACE(k);
      const auto right = [&](int64_t position, int32_t drafted) {
        return position - static_cast<int64_t>(kPrompt.size()) < kMaxTokens ? c.at(position)
                                                                            : drafted;
      };
      const SpeculativeResult r = speculate(*c.model, k, right);
      EXPECT_EQ(r.output_ids, c.reference);
      // Every round accepts all k and adds the target's token: 1 + rounds · (k + 1) tokens,
      // the last round cut at max_tokens.
      EXPECT_EQ(r.stats.num_drafts, (kMaxTokens - 1 + k) / (k + 1));
      EXPECT_EQ(r.stats.accepted_per_position[0], r.stats.num_drafts);
      EXPECT_EQ(r.stats.num_accepted_tokens, r.stats.num_drafts * k);
    }
  }
}

TEST(SpeculativeGenerator, PartlyRightDraftsKeepTheTargetsTokens) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const Case c(fixture);
    constexpr int64_t k = 4;
    // Right at every position except those ≡ 2 (mod 3): rejections at varying draft indices.
    const auto mixed = [&](int64_t position, int32_t drafted) {
      if (position - static_cast<int64_t>(kPrompt.size()) >= kMaxTokens) return drafted;
      const int32_t right = c.at(position);
      return position % 3 == 2 ? (right + 1) % 1024 : right;
    };
    const SpeculativeResult r = speculate(*c.model, k, mixed);
    EXPECT_EQ(r.output_ids, c.reference);
    EXPECT_GT(r.stats.num_accepted_tokens, 0);
    EXPECT_LT(r.stats.num_accepted_tokens, r.stats.num_draft_tokens);
    EXPECT_GT(r.stats.accepted_per_position[1], 0);
    EXPECT_LT(r.stats.accepted_per_position[1], r.stats.num_drafts);
  }
}

TEST(SpeculativeGenerator, StopsAtAStopIdInsideAnAcceptedDraft) {
  const Case c("tiny-glm5");
  const int64_t stop_at = 9;  // the 10th output token, reached through accepted drafts
  const std::vector<int64_t> stop = {c.reference[stop_at]};
  const auto first = std::find(c.reference.begin(), c.reference.end(), c.reference[stop_at]);
  const std::vector<int32_t> expected(c.reference.begin(), first + 1);
  const auto right = [&](int64_t position, int32_t drafted) {
    return position - static_cast<int64_t>(kPrompt.size()) < kMaxTokens ? c.at(position) : drafted;
  };
  const SpeculativeResult r = speculate(*c.model, 4, right, stop);
  EXPECT_EQ(r.output_ids, expected);
}

// Sampled output on every family: a seed repeats its output, and top_k 1 (a point mass under
// temperature) is greedy decoding.
TEST(SpeculativeGenerator, SampledRunsOnEveryFamily) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const Case c(fixture);
    for (int64_t k : {1, 4}) {
      SCOPED_TRACE(k);
      SpeculativeOptions o;
      o.num_speculative_tokens = k;
      o.max_tokens = kMaxTokens;
      o.params = SamplingParams{};
      o.params.temperature = 0.8;
      o.params.top_p = 0.9;
      o.seed = 9;
      const SpeculativeResult a = generate_speculative(*c.model, kPrompt, o);
      EXPECT_EQ(a.output_ids.size(), static_cast<size_t>(kMaxTokens));
      EXPECT_EQ(generate_speculative(*c.model, kPrompt, o).output_ids, a.output_ids);
      EXPECT_EQ(a.stats.num_draft_tokens, a.stats.num_drafts * k);
      o.params.top_k = 1;
      EXPECT_EQ(generate_speculative(*c.model, kPrompt, o).output_ids, c.reference);
    }
  }
}

// Sampled output (temperature 1): a seed repeats its output and another seed changes it; top_k 1
// is greedy; and over 400 seeds the first two tokens (the second one decided by the rejection
// rule, top 3 of the draft's distribution against the target's) fit the target's joint
// distribution: chi-square p-value > 1e-4. ~5 s.
TEST(SpeculativeGenerator, SampledOutputFollowsTheTarget) {
  const Case c("tiny-glm5");
  SpeculativeOptions o;
  o.num_speculative_tokens = 2;
  o.max_tokens = kMaxTokens;
  o.params = SamplingParams{};
  ASSERT_GT(o.params.temperature, 0.0);
  o.seed = 3;
  const SpeculativeResult a = generate_speculative(*c.model, kPrompt, o);
  EXPECT_EQ(a.output_ids.size(), static_cast<size_t>(kMaxTokens));
  EXPECT_EQ(generate_speculative(*c.model, kPrompt, o).output_ids, a.output_ids);
  o.seed = 4;
  EXPECT_NE(generate_speculative(*c.model, kPrompt, o).output_ids, a.output_ids);
  o.params.top_k = 1;
  EXPECT_EQ(generate_speculative(*c.model, kPrompt, o).output_ids, c.reference);

  o.params.top_k = 3;
  o.max_tokens = 2;
  const int64_t vocab = c.model->config().vocab_size;
  const auto cell = [&](int32_t t0, int32_t t1) { return static_cast<size_t>(t0 * vocab + t1); };
  std::vector<int64_t> counts(static_cast<size_t>(vocab * vocab), 0);
  SpeculativeStats stats(o.num_speculative_tokens);
  // Odd seeds draft with the MTP layer (its top 3 misses the target's here: every draft is
  // rejected); even seeds force the target's greedy second token (q a point mass, accepted with
  // probability p of it).
  const auto greedy_second = [&](int64_t position, int32_t drafted) {
    return position == static_cast<int64_t>(kPrompt.size()) + 1 ? c.at(position) : drafted;
  };
  for (uint64_t seed = 0; seed < 400; ++seed) {
    o.seed = seed;
    o.draft_override = seed % 2 ? DraftOverride() : DraftOverride(greedy_second);
    const SpeculativeResult r = generate_speculative(*c.model, kPrompt, o);
    ASSERT_EQ(r.output_ids.size(), 2u);
    ++counts[cell(r.output_ids[0], r.output_ids[1])];
    stats += r.stats;
  }
  // Both branches of the rule ran: drafts accepted and drafts rejected.
  EXPECT_GT(stats.num_accepted_tokens, 0);
  EXPECT_LT(stats.num_accepted_tokens, stats.num_drafts);
  ModelRunner runner({.model = c.dir.path()});
  std::vector<double> expected(counts.size(), 0.0);
  const std::vector<double> first =
      engine_test::target_probs(runner, kPrompt, kPrompt.size(), o.params);
  for (int32_t t0 = 0; t0 < vocab; ++t0) {
    if (first[static_cast<size_t>(t0)] == 0) continue;
    std::vector<int32_t> tokens = kPrompt;
    tokens.push_back(t0);
    const std::vector<double> second =
        engine_test::target_probs(runner, tokens, kPrompt.size(), o.params);
    for (int32_t t1 = 0; t1 < vocab; ++t1)
      expected[cell(t0, t1)] = first[static_cast<size_t>(t0)] * second[static_cast<size_t>(t1)];
  }
  EXPECT_GT(testing::chi_square_p_value(counts, expected), 1e-4);
}

TEST(SpeculativeGenerator, NeedsTheMtpLayer) {
  const std::unique_ptr<Model> plain = Model::load(kTestData / "tiny-dsv32", {});
  EXPECT_THROW(speculate(*plain, 1), InvalidArgument);
  const Case c("tiny-dsv32");
  EXPECT_THROW(speculate(*c.model, 0), InvalidArgument);
  EXPECT_THROW(speculate(*c.model, kMaxSpeculativeTokens + 1), InvalidArgument);
  SpeculativeOptions two_samples;
  two_samples.params.n = 2;
  EXPECT_THROW(generate_speculative(*c.model, kPrompt, two_samples), Unsupported);
}

}  // namespace
}  // namespace mls
