// One sequence's speculative round on hand-made logits (speculative_round.h): draws, the end of
// a draft, rows the MTP layer cannot draft from, and greedy acceptance.
#include "engine/speculative_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace mls {
namespace {

constexpr int64_t kRoundVocab = 8;

SpeculativeSequence view(const SamplingParams& p, const std::vector<int64_t>& stop) {
  return {.params = &p, .seed = 1, .stop_ids = stop, .prompt_len = 2, .vocab = kRoundVocab};
}

// A row whose largest logit is `top`.
std::vector<float> row(int32_t top) {
  std::vector<float> r(kRoundVocab, 0.0f);
  r[static_cast<size_t>(top)] = 5.0f;
  return r;
}

TEST(SpeculativeRound, GreedyDraftsEndAtKOrAStopId) {
  SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<int64_t> stop = {7};
  Sampler sampler(kRoundVocab);
  SpeculativeStats stats(3);
  const std::vector<int32_t> committed = {1, 2, 3};
  Drafter d(view(greedy, stop), committed, nullptr, 3);
  EXPECT_TRUE(d.add(sampler, row(4).data(), stats));
  EXPECT_TRUE(d.add(sampler, row(5).data(), stats));
  EXPECT_FALSE(d.add(sampler, row(6).data(), stats));  // the third of k = 3
  DraftRound r = d.take();
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(r.q.size(), 3u);
  EXPECT_TRUE(r.masks.empty());
  r.truncate(1);
  EXPECT_EQ(r.tokens, std::vector<int32_t>{4});

  Drafter s(view(greedy, stop), committed, nullptr, 3);
  EXPECT_FALSE(s.add(sampler, row(7).data(), stats));  // a stop id ends the draft after itself
  EXPECT_EQ(s.take().tokens, std::vector<int32_t>{7});
}

// A row with a NaN or an infinity drafts nothing (and never reaches the sort of the sampler).
TEST(SpeculativeRound, RowsThatAreNotFiniteDraftNothing) {
  SamplingParams sampled;
  Sampler sampler(kRoundVocab);
  SpeculativeStats stats(2);
  const std::vector<int32_t> committed = {1, 2, 3};
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> r = row(4);
    r[2] = bad;
    Drafter d(view(sampled, {}), committed, nullptr, 2);
    EXPECT_FALSE(d.add(sampler, r.data(), stats));
    EXPECT_TRUE(d.take().tokens.empty());
  }
  EXPECT_EQ(stats.num_structure_rejected, 0);
}

// Greedy verification: drafts equal to the target's argmax are kept up to the first that is not,
// where the target's own token follows; the round is counted.
TEST(SpeculativeRound, GreedyAcceptanceKeepsTheMatchingPrefix) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(kRoundVocab);
  SpeculativeStats stats(3);
  const std::vector<int32_t> committed = {1, 2, 3};
  Drafter d(view(greedy, {}), committed, nullptr, 3);
  for (int32_t t : {4, 5, 6}) d.add(sampler, row(t).data(), stats);
  const DraftRound round = d.take();
  std::vector<float> target;
  for (int32_t t : {4, 5, 1, 2}) {
    const std::vector<float> r = row(t);
    target.insert(target.end(), r.begin(), r.end());
  }
  const RejectionOutcome o =
      accept_round(sampler, view(greedy, {}), target.data(), committed, round, stats);
  EXPECT_EQ(o.accepted, 2);
  EXPECT_EQ(o.token, 1);
  EXPECT_EQ(stats.num_drafts, 1);
  EXPECT_EQ(stats.num_draft_tokens, 3);
  EXPECT_EQ(stats.num_accepted_tokens, 2);
  EXPECT_EQ(stats.accepted_per_position, (std::vector<int64_t>{1, 1, 0}));
}

// The same round drawn on the device: drafts taken as ids (point masses), verified from the
// target rows' ids, gives accept_round's outcome and counts; verified on the host instead (a
// step that reads logits), its empty q stands for the point masses.
TEST(SpeculativeRound, DeviceDrawnRoundsAcceptAsTheHostDoes) {
  SamplingParams greedy;
  greedy.temperature = 0;
  Sampler sampler(kRoundVocab);
  const std::vector<int32_t> committed = {1, 2, 3};
  const std::vector<int32_t> drafts = {4, 5, 6};
  std::vector<float> target;
  for (int32_t t : {4, 5, 1, 2}) {
    const std::vector<float> r = row(t);
    target.insert(target.end(), r.begin(), r.end());
  }
  SpeculativeStats host_stats(3), device_stats(3);
  Drafter h(view(greedy, {}), committed, nullptr, 3);
  Drafter d(view(greedy, {}), committed, nullptr, 3);
  for (int32_t t : drafts) {
    h.add(sampler, row(t).data(), host_stats);
    d.add_drawn(t, -0.5f, device_stats);
  }
  const DraftRound on_host = h.take(), on_device = d.take();
  EXPECT_EQ(on_device.tokens, on_host.tokens);
  EXPECT_TRUE(on_device.q[0].empty());
  const RejectionOutcome expect =
      accept_round(sampler, view(greedy, {}), target.data(), committed, on_host, host_stats);
  const std::vector<int32_t> ids = {4, 5, 1, 2};
  const RejectionOutcome got = accept_greedy_round(ids, on_device, device_stats);
  EXPECT_EQ(got.accepted, expect.accepted);
  EXPECT_EQ(got.token, expect.token);
  EXPECT_EQ(device_stats.num_accepted_tokens, host_stats.num_accepted_tokens);
  EXPECT_EQ(device_stats.accepted_per_position, host_stats.accepted_per_position);
  const RejectionOutcome mixed =
      accept_round(sampler, view(greedy, {}), target.data(), committed, on_device, host_stats);
  EXPECT_EQ(mixed.accepted, expect.accepted);
  EXPECT_EQ(mixed.token, expect.token);
  // All drafts right: the bonus row's id follows them.
  const std::vector<int32_t> all = {4, 5, 6, 3};
  const RejectionOutcome bonus = accept_greedy_round(all, on_device, device_stats);
  EXPECT_EQ(bonus.accepted, 3);
  EXPECT_EQ(bonus.token, 3);
  // A row without a finite maximum, or an id outside the vocabulary, drafts nothing.
  Drafter nan(view(greedy, {}), committed, nullptr, 3);
  EXPECT_FALSE(nan.add_drawn(4, std::numeric_limits<float>::quiet_NaN(), device_stats));
  EXPECT_TRUE(nan.take().tokens.empty());
  Drafter out(view(greedy, {}), committed, nullptr, 3);
  EXPECT_FALSE(out.add_drawn(kRoundVocab, -1.0f, device_stats));
  EXPECT_TRUE(out.take().tokens.empty());
}

}  // namespace
}  // namespace mls
