// The multi-turn workload (multi_turn.h) on the demo model, a DSA model: greedy outputs with the
// prefix cache on equal those with it off, while most prompt tokens come from the cache, and the
// hit count equals the dense-attention fixture's on the same workload (the DSA indexer no longer
// keys the cache on the prompt length). CPU, and the GPU where there is one, in batch-invariant
// mode: by default a GPU cuts small steps' sparse attention finer than a whole prompt's, so a
// cached row computed by a decode step differs from its recomputation in the last bits, which
// moves near-tied top-k picks and greedy tokens (ops/scratch_sizes.h, attention_splits).
#include "multi_turn.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "test_gpu.h"

namespace mls::bench {
namespace {

const std::string kDemo = std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5";
const std::string kDense = std::string(MLASERVE_TEST_DATA) + "/tiny-dsv3";

void check_cache_on_equals_off(Device device) {
  const MultiTurnSpec spec;
  ModelRunner demo({.model = kDemo, .device = device, .batch_invariant = true});
  EngineConfig off;
  off.enable_prefix_caching = false;
  const MultiTurnResult with = run_multi_turn(demo, spec, {});
  const MultiTurnResult without = run_multi_turn(demo, spec, off);
  for (int c = 0; c < spec.conversations; ++c)
    for (int t = 0; t < spec.turns; ++t)
      EXPECT_EQ(with.answers[c][t], without.answers[c][t]) << "conversation " << c << " turn " << t;
  EXPECT_EQ(without.prefix_hits, 0);
  // Every turn after the first reuses its conversation's previous prompt and answer, and the
  // system prompt is shared from the first conversation on.
  EXPECT_GT(with.hit_rate(), 0.75);

  ModelRunner dense({.model = kDense, .device = device});
  const MultiTurnResult base = run_multi_turn(dense, spec, {});
  EXPECT_EQ(with.prefix_queries, base.prefix_queries);
  EXPECT_EQ(with.prefix_hits, base.prefix_hits);
  std::printf("%s: prefix-cache hits %ld of %ld prompt tokens (%.1f%%), dense fixture %ld of %ld\n",
              device.str().c_str(), static_cast<long>(with.prefix_hits),
              static_cast<long>(with.prefix_queries), 100.0 * with.hit_rate(),
              static_cast<long>(base.prefix_hits), static_cast<long>(base.prefix_queries));
}

TEST(MultiTurn, DemoModelCacheOnEqualsOffCpu) {
  check_cache_on_equals_off(Device::cpu());
}

TEST(MultiTurn, DemoModelCacheOnEqualsOffCuda) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  check_cache_on_equals_off(Device::cuda(0));
}

}  // namespace
}  // namespace mls::bench
