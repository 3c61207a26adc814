#include "server/stop_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

namespace mls::server {
namespace {

// The earliest start of any stop string in `text`, by brute force.
std::optional<size_t> naive(const std::vector<std::string>& stops, const std::string& text) {
  size_t best = std::string::npos;
  for (const std::string& s : stops) best = std::min(best, text.find(s));
  return best == std::string::npos ? std::nullopt : std::optional(best);
}

TEST(StopMatcher, AgreesWithBruteForceWhenFedPieceByPiece) {
  std::mt19937 rng(7);
  const auto random_string = [&](size_t max_len) {
    std::string s(1 + rng() % max_len, 'a');
    for (char& c : s) c = static_cast<char>('a' + rng() % 3);  // small alphabet: many overlaps
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops(1 + rng() % 6);
    for (auto& s : stops) s = random_string(5);
    const std::string text = random_string(40);
    const StopMatcher m(stops);
    StopMatcher::State state = 0;
    std::string held;  // what OutputStream keeps: the unreleased tail
    size_t released = 0;
    std::optional<size_t> found;
    for (size_t i = 0; i < text.size() && !found;) {
      const size_t n = std::min<size_t>(1 + rng() % 4, text.size() - i);
      const size_t from = held.size();
      held += text.substr(i, n);
      i += n;
      if (const auto start = m.scan(state, held, from)) {
        found = released + *start;
        break;
      }
      const size_t cut = held.size() - m.pending(state);
      held.erase(0, cut);
      released += cut;
    }
    // Matches are detected when they end, so the first found is the earliest among those that
    // end in the same piece; brute force over the text up to that piece agrees.
    const auto expect = naive(stops, text);
    ASSERT_EQ(found.has_value(), expect.has_value()) << text;
    if (!found) continue;
    const std::string prefix = text.substr(0, released + held.size());
    EXPECT_EQ(*found, *naive(stops, prefix)) << text;
  }
}

TEST(StopMatcher, HoldsBackOnlyAPossiblePrefix) {
  const StopMatcher m({"STOP", "TOPAZ"});
  StopMatcher::State state = 0;
  EXPECT_FALSE(m.scan(state, "xxST", 0));
  EXPECT_EQ(m.pending(state), 2u);
  EXPECT_FALSE(m.scan(state, "xxSTO", 4));
  EXPECT_EQ(m.pending(state), 3u);
  EXPECT_FALSE(m.scan(state, "xxSTOx", 5));
  EXPECT_EQ(m.pending(state), 0u);
  state = 0;
  EXPECT_EQ(m.scan(state, "aSTOPAZ", 0), 1u);  // STOP ends first
  EXPECT_TRUE(StopMatcher({}).empty());
}

// The per-token work must not grow with the number of stop strings: the limits' worst case
// (128 strings, 16 KiB, sharing prefixes with the text) costs about what one string costs. The
// old loop called find() once per stop string per token, 128 times the work.
TEST(StopMatcher, CostPerByteDoesNotGrowWithTheStopStrings) {
  std::vector<std::string> many;
  for (size_t i = 0; i < kMaxStopStrings; ++i)
    many.push_back(std::string(kMaxStopBytes / kMaxStopStrings - 2, 'a') + char('A' + i / 26) +
                   char('A' + i % 26));
  const std::string text(1 << 20, 'a');  // every position continues many stop prefixes
  const auto seconds = [&](const std::vector<std::string>& stops) {
    const StopMatcher m(stops);
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      StopMatcher::State state = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < text.size(); i += 4)
        m.scan(state, std::string_view(text).substr(0, i + 4), i);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double one = seconds({"b"}), all = seconds(many);
  std::printf("1 MiB in 4-byte tokens: 1 stop string %.4f s, %zu strings of %zu bytes %.4f s\n",
              one, many.size(), many[0].size(), all);
  EXPECT_LT(all, 4 * one + 0.05);
}

}  // namespace
}  // namespace mls::server
