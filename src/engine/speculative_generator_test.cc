#include "engine/speculative_generator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "engine/model_runner.h"
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

const char* const kFixtures[] = {"tiny-dsv3", "tiny-dsv32", "tiny-glm5", "tiny-glm5-fp8"};

TEST(SpeculativeGenerator, GreedyEqualsPlainGreedyOnEveryFamily) {
  for (const char* fixture : kFixtures) {
    SCOPED_TRACE(fixture);
    const Case c(fixture);
    ASSERT_EQ(c.reference.size(), static_cast<size_t>(kMaxTokens));
    for (int64_t k = 1; k <= 4; ++k) {
      SCOPED_TRACE(k);
      const SpeculativeResult r = generate_greedy_speculative(*c.model, kPrompt, kMaxTokens, k);
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
      const SpeculativeResult r =
          generate_greedy_speculative(*c.model, kPrompt, kMaxTokens, k, {}, right);
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
    const SpeculativeResult r =
        generate_greedy_speculative(*c.model, kPrompt, kMaxTokens, k, {}, mixed);
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
  const SpeculativeResult r =
      generate_greedy_speculative(*c.model, kPrompt, kMaxTokens, 4, stop, right);
  EXPECT_EQ(r.output_ids, expected);
}

TEST(SpeculativeGenerator, NeedsTheMtpLayer) {
  const std::unique_ptr<Model> plain = Model::load(kTestData / "tiny-dsv32", {});
  EXPECT_THROW(generate_greedy_speculative(*plain, kPrompt, 4, 1), InvalidArgument);
  const Case c("tiny-dsv32");
  EXPECT_THROW(generate_greedy_speculative(*c.model, kPrompt, 4, 0), InvalidArgument);
  EXPECT_THROW(generate_greedy_speculative(*c.model, kPrompt, 4, kMaxSpeculativeTokens + 1),
               InvalidArgument);
}

}  // namespace
}  // namespace mls
