#include "cli/load_progress.h"

#include <gtest/gtest.h>

namespace mls::cli {
namespace {

using std::chrono::seconds;

TEST(LoadProgress, LogLinesEveryIntervalThenTheLast) {
  std::vector<std::string> lines;
  const auto t0 = LoadProgress::Clock::now();
  LoadProgress p(
      3, 2, false, [&](const std::string& l) { lines.push_back(l); }, seconds(5));
  constexpr int64_t kGiB = int64_t{1} << 30;
  p.update(0, 0, 2 * kGiB, t0);
  p.update(1, 0, 2 * kGiB, t0);
  p.update(0, kGiB, 2 * kGiB, t0 + seconds(1));  // within the interval: no line
  EXPECT_TRUE(lines.empty());
  p.update(1, kGiB, 2 * kGiB, t0 + seconds(6));
  ASSERT_EQ(lines.size(), 1u);
  // 2 of 4 GiB after ~6 s: about 0.33 GiB/s and 6 s to go.
  EXPECT_EQ(lines[0].rfind("Loading weights (3 shards):  50% 2.00/4.00 GiB, 0.3", 0), 0u)
      << lines[0];
  EXPECT_NE(lines[0].find("ETA 6 s"), std::string::npos) << lines[0];
  p.update(0, 2 * kGiB, 2 * kGiB, t0 + seconds(7));
  p.update(1, 2 * kGiB, 2 * kGiB, t0 + seconds(8));  // complete: printed at once
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("100% 4.00/4.00 GiB"), std::string::npos) << lines[1];
  p.update(1, 2 * kGiB, 2 * kGiB, t0 + seconds(20));  // and only once
  EXPECT_EQ(lines.size(), 2u);
}

TEST(LoadProgress, TerminalBar) {
  const auto t0 = LoadProgress::Clock::now();
  LoadProgress p(
      1, 1, true, [](const std::string&) {}, seconds(0));
  p.update(0, 1, 4, t0);
  const std::string bar = p.line(t0 + seconds(1));
  EXPECT_EQ(bar.rfind("\rLoading 1 shard [#######.......................]  25%", 0), 0u) << bar;
}

}  // namespace
}  // namespace mls::cli
