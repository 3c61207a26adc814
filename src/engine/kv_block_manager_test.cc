#include "engine/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace mls {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(KvBlockManager, AllocatesAndFreesWithRefCounts) {
  KvBlockManager m(8, 4, false);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(m.allocate(a, 10));  // 3 blocks
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(m.num_available(), 5);
  ASSERT_TRUE(m.allocate(a, 12));  // still 3
  EXPECT_EQ(a.size(), 3u);
  m.share(a, 2, b);
  EXPECT_EQ(m.ref_count(a[0]), 2);
  EXPECT_EQ(m.ref_count(a[2]), 1);
  EXPECT_FALSE(m.allocate(b, 4 * 9));  // would need 7 more, 5 left: nothing taken
  EXPECT_EQ(b.size(), 2u);
  m.free(a);
  EXPECT_EQ(m.ref_count(b[0]), 1);
  EXPECT_EQ(m.num_available(), 6);
  m.free(b);
  EXPECT_EQ(m.num_available(), 8);
  EXPECT_DOUBLE_EQ(m.usage(), 0.0);
}

TEST(KvBlockManager, PrefixCacheReusesFullBlocksAndKeepsOneTokenToCompute) {
  KvBlockManager m(16, 4, true);
  const auto tokens = iota_tokens(12);
  std::vector<uint64_t> h;
  m.extend_hashes(tokens, 0, h);
  ASSERT_EQ(h.size(), 3u);
  std::vector<int32_t> t1;
  EXPECT_EQ(m.take_cached_prefix(h, 12, t1), 0);
  ASSERT_TRUE(m.allocate(t1, 12));
  m.cache_blocks(t1, h);
  const std::vector<int32_t> first = t1;
  m.free(t1);
  EXPECT_EQ(m.num_available(), 16);  // cached blocks are evictable, hence available

  // Same 12 tokens: the last block must run again so that logits come out.
  std::vector<int32_t> t2;
  EXPECT_EQ(m.take_cached_prefix(h, 12, t2), 8);
  EXPECT_EQ(t2, std::vector<int32_t>(first.begin(), first.begin() + 2));
  EXPECT_EQ(m.prefix_queries(), 24);
  EXPECT_EQ(m.prefix_hits(), 8);
  m.free(t2);

  // Another salt (another prompt length on a DSA model) shares nothing.
  std::vector<uint64_t> h2;
  m.extend_hashes(tokens, 13, h2);
  std::vector<int32_t> t3;
  EXPECT_EQ(m.take_cached_prefix(h2, 12, t3), 0);
}

TEST(KvBlockManager, EvictsLeastRecentlyFreedCachedBlocks) {
  KvBlockManager m(3, 2, true);
  const auto tokens = iota_tokens(6);
  std::vector<uint64_t> h;
  m.extend_hashes(tokens, 0, h);
  std::vector<int32_t> t;
  ASSERT_TRUE(m.allocate(t, 6));
  m.cache_blocks(t, h);
  m.free(t);
  // Taking 2 fresh blocks evicts the tail blocks first: the prefix's first block survives.
  std::vector<int32_t> other;
  ASSERT_TRUE(m.allocate(other, 4));
  m.free(other);
  std::vector<int32_t> again;
  EXPECT_EQ(m.take_cached_prefix(h, 6, again), 2);
}

}  // namespace
}  // namespace mls
