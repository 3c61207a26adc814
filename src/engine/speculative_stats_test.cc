#include "engine/speculative_stats.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mls {
namespace {

TEST(SpeculativeStats, AddsAndDerivesVllmRates) {
  SpeculativeStats a(3);
  EXPECT_EQ(a.acceptance_rate(), 0.0);
  EXPECT_EQ(a.mean_acceptance_length(), 1.0);
  a.num_drafts = 4;
  a.num_draft_tokens = 12;
  a.num_accepted_tokens = 6;
  a.accepted_per_position = {3, 2, 1};
  SpeculativeStats b(3);
  b.num_drafts = 2;
  b.num_draft_tokens = 5;  // a round cut short by the constraint
  b.num_accepted_tokens = 3;
  b.accepted_per_position = {2, 1, 0};
  b.num_structure_rejected = 1;
  a += b;
  EXPECT_EQ(a.num_drafts, 6);
  EXPECT_EQ(a.num_draft_tokens, 17);
  EXPECT_EQ(a.num_accepted_tokens, 9);
  EXPECT_EQ(a.num_structure_rejected, 1);
  EXPECT_EQ(a.accepted_per_position, (std::vector<int64_t>{5, 3, 1}));
  EXPECT_DOUBLE_EQ(a.acceptance_rate(), 9.0 / 17.0);
  EXPECT_DOUBLE_EQ(a.mean_acceptance_length(), 1.0 + 9.0 / 6.0);
  EXPECT_THROW(a += SpeculativeStats(2), InvalidArgument);
}

}  // namespace
}  // namespace mls
