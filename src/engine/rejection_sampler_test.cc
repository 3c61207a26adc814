// The rejection rule's output follows the target distribution: a chi-square goodness-of-fit test
// per emitted position on a vocabulary of 8, for k = 1..4 and draft distributions equal to,
// disjoint from, and partly zero where the target's is not; 40,000 rounds each from a fixed
// seed. A fit fails below a p-value of 1e-4 (a correct rule passes every one of the ~60 fits
// with probability > 0.99 for an arbitrary seed; this seed is fixed). ~1 s.
#include "engine/rejection_sampler.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine/chi_square_test_util.h"

namespace mls {
namespace {

constexpr int kVocab = 8;
constexpr int kRounds = 40000;
constexpr double kMinPValue = 1e-4;

using Dist = std::vector<double>;

Dist normalised(Dist w) {
  double s = 0;
  for (double x : w) s += x;
  for (double& x : w) x /= s;
  return w;
}

TEST(ChiSquare, PValuesMatchKnownQuantiles) {
  // Upper 5% and 0.1% points of chi-square with 1 and 7 degrees of freedom.
  EXPECT_NEAR(testing::upper_gamma_q(0.5, 3.841 / 2), 0.05, 1e-4);
  EXPECT_NEAR(testing::upper_gamma_q(3.5, 14.067 / 2), 0.05, 1e-4);
  EXPECT_NEAR(testing::upper_gamma_q(3.5, 24.322 / 2), 0.001, 1e-5);
}

double uniform(std::mt19937_64& g) {
  return static_cast<double>(g() >> 11) * 0x1.0p-53;
}

// Target rows differ per position (a rotation of one shape, with zeros), so that a row taken
// from the wrong position shows.
Dist target_row(int position) {
  const Dist base = {0.30, 0.05, 0.0, 0.20, 0.15, 0.0, 0.10, 0.20};
  Dist p(kVocab);
  for (int t = 0; t < kVocab; ++t) p[static_cast<size_t>((t + 3 * position) % kVocab)] = base[t];
  return p;
}

enum class DraftKind { kEqual, kDisjoint, kZerosWhereTargetIsNot, kOverlapping };

Dist draft_row(DraftKind kind, int position) {
  const Dist p = target_row(position);
  Dist q(kVocab, 0.0);
  switch (kind) {
    case DraftKind::kEqual:
      return p;
    case DraftKind::kDisjoint:  // mass only where p is 0
      for (int t = 0; t < kVocab; ++t) q[t] = p[t] == 0 ? 1.0 + t : 0.0;
      return normalised(q);
    case DraftKind::kZerosWhereTargetIsNot: {  // zero on half of p's support, p's zeros included
      int seen = 0;
      for (int t = 0; t < kVocab; ++t)
        q[t] = p[t] == 0 ? 0.5 : (seen++ % 2 == 0 ? 3.0 * p[t] : 0.0);
      return normalised(q);
    }
    case DraftKind::kOverlapping:
      for (int t = 0; t < kVocab; ++t) q[t] = 1.0 + (t * 7 + position) % 5;
      return normalised(q);
  }
  return q;
}

// Runs kRounds rounds of k drafts; per emitted position j (0..k), the tokens emitted there.
std::vector<std::vector<int64_t>> emitted_counts(int k, DraftKind kind, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<Dist> q, p;
  for (int i = 0; i < k; ++i) q.push_back(draft_row(kind, i));
  for (int i = 0; i <= k; ++i) p.push_back(target_row(i));
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(k + 1),
                                           std::vector<int64_t>(kVocab, 0));
  std::vector<int32_t> drafts(static_cast<size_t>(k));
  std::vector<double> u(static_cast<size_t>(k));
  for (int r = 0; r < kRounds; ++r) {
    for (int i = 0; i < k; ++i) drafts[i] = draw_token(q[i], uniform(g));
    for (double& x : u) x = uniform(g);
    const RejectionOutcome o = rejection_sample(drafts, q, p, u, uniform(g));
    for (int64_t j = 0; j < o.accepted; ++j) ++counts[j][drafts[j]];
    ++counts[o.accepted][o.token];
  }
  return counts;
}

TEST(RejectionSampler, EmittedTokensFollowTheTarget) {
  for (DraftKind kind : {DraftKind::kEqual, DraftKind::kDisjoint, DraftKind::kZerosWhereTargetIsNot,
                         DraftKind::kOverlapping}) {
    for (int k = 1; k <= 4; ++k) {
      SCOPED_TRACE(::testing::Message() << "draft kind " << static_cast<int>(kind) << ", k " << k);
      const auto counts = emitted_counts(k, kind, 1000 + k);
      for (int j = 0; j <= k; ++j) {
        int64_t n = 0;
        for (int64_t c : counts[j]) n += c;
        if (n < 1000) continue;  // too few rounds reach position j for a fit
        EXPECT_GT(testing::chi_square_p_value(counts[j], target_row(j)), kMinPValue)
            << "position " << j << ", " << n << " tokens";
      }
      if (kind == DraftKind::kEqual) {  // q = p: every draft is accepted
        int64_t bonus = 0;
        for (int64_t c : counts[k]) bonus += c;
        EXPECT_EQ(bonus, kRounds);
      }
      if (kind == DraftKind::kDisjoint) {  // no draft is ever accepted
        int64_t first = 0;
        for (int64_t c : counts[0]) first += c;
        EXPECT_EQ(first, kRounds);
        for (int j = 1; j <= k; ++j)
          for (int64_t c : counts[j]) EXPECT_EQ(c, 0);
      }
    }
  }
}

// The test has power: the drafts alone (every draft accepted) follow q, and the fit rejects them.
TEST(RejectionSampler, TheFitRejectsTheDraftDistribution) {
  std::mt19937_64 g(5);
  const Dist q = draft_row(DraftKind::kOverlapping, 0);
  std::vector<int64_t> counts(kVocab, 0);
  for (int r = 0; r < kRounds; ++r) ++counts[draw_token(q, uniform(g))];
  EXPECT_LT(testing::chi_square_p_value(counts, target_row(0)), kMinPValue);
  // Sampling the rejected position from p instead of the residual biases it away from p.
  const Dist p = target_row(0);
  std::vector<int64_t> naive(kVocab, 0);
  for (int r = 0; r < kRounds; ++r) {
    const int32_t x = draw_token(q, uniform(g));
    const bool accept = uniform(g) * q[x] < p[x];
    ++naive[accept ? x : draw_token(p, uniform(g))];
  }
  EXPECT_LT(testing::chi_square_p_value(naive, p), kMinPValue);
}

TEST(RejectionSampler, GreedyRowsAreExactMatchVerification) {
  auto point = [](int32_t t) {
    Dist d(kVocab, 0.0);
    d[t] = 1.0;
    return d;
  };
  const std::vector<Dist> q = {point(2), point(5), point(1)};
  const std::vector<Dist> p = {point(2), point(5), point(7), point(4)};
  const std::vector<int32_t> drafts = {2, 5, 1};
  const std::vector<double> u = {0.999, 0.999, 0.0};
  const RejectionOutcome o = rejection_sample(drafts, q, p, u, 0.5);
  EXPECT_EQ(o.accepted, 2);
  EXPECT_EQ(o.token, 7);
  const std::vector<int32_t> right = {2, 5, 7};
  const std::vector<Dist> q_right = {point(2), point(5), point(7)};
  const RejectionOutcome all = rejection_sample(right, q_right, p, u, 0.5);
  EXPECT_EQ(all.accepted, 3);
  EXPECT_EQ(all.token, 4);  // the bonus token
}

TEST(RejectionSampler, RejectsMismatchedRows) {
  const std::vector<Dist> q(2, Dist(kVocab, 1.0 / kVocab));
  const std::vector<Dist> p(2, Dist(kVocab, 1.0 / kVocab));
  const std::vector<int32_t> drafts = {1, 2};
  const std::vector<double> u = {0.5, 0.5};
  EXPECT_THROW(rejection_sample(drafts, q, p, u, 0.5), InvalidArgument);
  EXPECT_THROW(draw_token(Dist(kVocab, 0.0), 0.5), InvalidArgument);
}

}  // namespace
}  // namespace mls
