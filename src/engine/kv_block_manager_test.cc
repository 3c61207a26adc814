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
  m.extend_hashes(tokens, h);
  ASSERT_EQ(h.size(), 3u);
  std::vector<int32_t> t1;
  EXPECT_EQ(m.take_cached_prefix(tokens, h, t1), 0);
  ASSERT_TRUE(m.allocate(t1, 12));
  m.cache_blocks(tokens, t1, h);
  const std::vector<int32_t> first = t1;
  m.free(t1);
  EXPECT_EQ(m.num_available(), 16);  // cached blocks are evictable, hence available

  // Same 12 tokens: the last block must run again so that logits come out.
  std::vector<int32_t> t2;
  EXPECT_EQ(m.take_cached_prefix(tokens, h, t2), 8);
  EXPECT_EQ(t2, std::vector<int32_t>(first.begin(), first.begin() + 2));
  EXPECT_EQ(m.prefix_queries(), 24);
  EXPECT_EQ(m.prefix_hits(), 8);
  m.free(t2);

  // A longer prompt with the same start (the next turn of a chat) reuses all three blocks; one
  // that differs in its second block reuses the first only.
  auto longer = iota_tokens(20);
  std::vector<uint64_t> hl;
  m.extend_hashes(longer, hl);
  std::vector<int32_t> t3;
  EXPECT_EQ(m.take_cached_prefix(longer, hl, t3), 12);
  m.free(t3);
  longer[5] = 99;
  hl.clear();
  m.extend_hashes(longer, hl);
  EXPECT_EQ(m.take_cached_prefix(longer, hl, t3), 4);
  m.free(t3);
}

TEST(KvBlockManager, EvictsLeastRecentlyFreedCachedBlocks) {
  KvBlockManager m(3, 2, true);
  const auto tokens = iota_tokens(6);
  std::vector<uint64_t> h;
  m.extend_hashes(tokens, h);
  std::vector<int32_t> t;
  ASSERT_TRUE(m.allocate(t, 6));
  m.cache_blocks(tokens, t, h);
  m.free(t);
  // Taking 2 fresh blocks evicts the tail blocks first: the prefix's first block survives.
  std::vector<int32_t> other;
  ASSERT_TRUE(m.allocate(other, 4));
  m.free(other);
  std::vector<int32_t> again;
  EXPECT_EQ(m.take_cached_prefix(tokens, h, again), 2);
}

// Computes and publishes `tokens` in a fresh table, then frees it (the blocks stay cached).
std::vector<int32_t> compute_and_cache(KvBlockManager& m, const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h;
  m.extend_hashes(tokens, h);
  std::vector<int32_t> t;
  m.take_cached_prefix(tokens, h, t);
  EXPECT_TRUE(m.allocate(t, static_cast<int64_t>(tokens.size())));
  m.cache_blocks(tokens, t, h);
  const std::vector<int32_t> table = t;
  m.free(t);
  return table;
}

int64_t cached_tokens(KvBlockManager& m, const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> h;
  m.extend_hashes(tokens, h);
  std::vector<int32_t> t;
  const int64_t hit = m.take_cached_prefix(tokens, h, t);
  m.free(t);
  return hit;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Every block hashes alike.
uint64_t constant_hash(uint64_t, std::span<const int32_t>) {
  return 7;
}

// Blind to the predecessor: equal blocks after different prefixes collide.
uint64_t tokens_only_hash(uint64_t, std::span<const int32_t> tokens) {
  return chained_block_hash(kFirstBlockParent, tokens);
}

TEST(KvBlockManager, ForcedHashCollisionNeverReusesOtherTokens) {
  KvBlockManager m(32, 4, true, constant_hash);
  const auto a = iota_tokens(5), b = iota_tokens(5, 100);  // one full block each
  compute_and_cache(m, a);
  EXPECT_EQ(cached_tokens(m, b), 0);  // a's block under b's hash: other tokens
  EXPECT_EQ(cached_tokens(m, a), 4);
  // The newest content takes the colliding entry over.
  compute_and_cache(m, b);
  EXPECT_EQ(cached_tokens(m, b), 4);
  EXPECT_EQ(cached_tokens(m, a), 0);
}

TEST(KvBlockManager, ForcedCollisionAfterAnotherPrefixIsAMiss) {
  KvBlockManager m(32, 4, true, tokens_only_hash);
  const auto x = iota_tokens(4, 500), y = iota_tokens(4, 600), shared = iota_tokens(4, 700);
  const auto tail = iota_tokens(1, 900);
  const auto x_shared = concat(concat(x, shared), tail), y_shared = concat(concat(y, shared), tail);
  compute_and_cache(m, x_shared);         // publishes [x][shared]
  compute_and_cache(m, concat(y, tail));  // publishes [y]
  // [y][shared]: [y] is cached; the next block's hash finds x's [shared], with equal tokens,
  // but its KV continues x, not y.
  EXPECT_EQ(cached_tokens(m, y_shared), 4);
  compute_and_cache(m, y_shared);  // publishes [shared] after y in place of x's
  EXPECT_EQ(cached_tokens(m, y_shared), 8);
  EXPECT_EQ(cached_tokens(m, x_shared), 4);  // [x] only
}

TEST(KvBlockManager, EqualPrefixesComputedTwicePublishOnce) {
  KvBlockManager m(32, 4, true);
  const auto p = iota_tokens(13);
  std::vector<uint64_t> h;
  m.extend_hashes(p, h);
  // Two sequences compute the same prompt side by side (neither found the other cached).
  std::vector<int32_t> t1, t2;
  ASSERT_TRUE(m.allocate(t1, 13));
  ASSERT_TRUE(m.allocate(t2, 13));
  m.cache_blocks(p, t1, h);
  m.cache_blocks(p, t2, h);
  m.free(t2);
  EXPECT_EQ(m.num_available(), 32 - 4);  // t2's blocks were private: plain free
  // A continuation of the prompt chains through t1's blocks.
  const auto longer = concat(p, iota_tokens(8, 50));
  std::vector<uint64_t> hl;
  m.extend_hashes(longer, hl);
  std::vector<int32_t> t3;
  EXPECT_EQ(m.take_cached_prefix(longer, hl, t3), 12);
  EXPECT_EQ(t3, std::vector<int32_t>(t1.begin(), t1.begin() + 3));
  m.free(t3);
  m.free(t1);
}

}  // namespace
}  // namespace mls
