// The fused cache writes equal, bit for bit, the ops they replace: rms_norm, copy, apply_rope and
// scatter_rows for the MLA latent; layer_norm, apply_rope and scatter_rows for the indexer key.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/cache_write.h"
#include "ops/copy.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/test_inputs.h"

namespace mls::ops {
namespace {

using test::ids;
using test::random;

Tensor positions(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int32_t> p(n);
  for (auto& v : p) v = static_cast<int32_t>(g() % 6000);
  return ids(p);
}

// Slots for n tokens in a cache of `rows` rows: in order, reversed and spread, or every third
// token skipped (-1) with the rest shuffled.
std::vector<std::vector<int32_t>> slot_patterns(int64_t n, int64_t rows) {
  std::vector<int32_t> ordered(n), spread(n), skipping(n);
  for (int64_t t = 0; t < n; ++t) {
    ordered[t] = static_cast<int32_t>(t);
    spread[t] = static_cast<int32_t>(rows - 1 - 2 * t);
    skipping[t] = t % 3 == 1 ? -1 : static_cast<int32_t>(t);
  }
  std::shuffle(skipping.begin(), skipping.end(), std::mt19937(7));
  return {ordered, spread, skipping};
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Dims {
  int64_t r, d, tokens;
};

TEST(CacheWrite, LatentEqualsNormCopyRopeScatter) {
  for (const Dims dims : {Dims{32, 16, 5}, Dims{512, 64, 37}})
    for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
      for (const auto& slot_list : slot_patterns(dims.tokens, 2 * dims.tokens + 3)) {
        const int64_t r = dims.r, d = dims.d, n = dims.tokens, rows = 2 * n + 3;
        SCOPED_TRACE(::testing::Message() << "r " << r << " tokens " << n << " style "
                                          << static_cast<int>(style) << " slot0 " << slot_list[0]);
        const RopeTable table(test::yarn_params(), static_cast<int>(d));
        // The fused-A projection's [c | k_rot] columns inside wider rows.
        const Tensor a = random({n, 7 + r + d + 5}, 1, 1.0f, 0.3f);
        const Tensor kv = a.narrow(1, 7, r + d);
        const Tensor w = random({r}, 2, 1.0f, 1.0f);
        const Tensor pos = positions(n, 3), slots = ids(slot_list);

        Tensor want = random({rows, r + d}, 4);
        Tensor got = random({rows, r + d}, 4);
        Tensor ckv = Tensor::empty({n, r + d}, DType::kF32, MemTag::kActivation);
        Tensor c = ckv.narrow(1, 0, r), k_rot = ckv.narrow(1, r, d);
        rms_norm(kv.narrow(1, 0, r), w, 1e-6f, c);
        copy(kv.narrow(1, r, d), k_rot);
        apply_rope(ckv, r, pos, table, style);
        scatter_rows(ckv, slots, want);

        latent_cache_write(kv, w, 1e-6f, pos, slots, table, style, got);
        EXPECT_TRUE(bitwise_equal(got, want));
      }
}

TEST(CacheWrite, IndexerKeyEqualsLayerNormRopeScatter) {
  for (const Dims dims : {Dims{24, 8, 5}, Dims{128, 64, 37}})
    for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
      for (const auto& slot_list : slot_patterns(dims.tokens, 2 * dims.tokens + 3))
        for (const bool dense : {false, true}) {
          const int64_t di = dims.r, n = dims.tokens, rows = 2 * n + 3;
          SCOPED_TRACE(::testing::Message()
                       << "di " << di << " tokens " << n << " style " << static_cast<int>(style)
                       << " slot0 " << slot_list[0] << " dense " << dense);
          const RopeTable table(test::yarn_params(), static_cast<int>(dims.d));
          const Tensor proj = random({n, 3 + di + 9}, 5, 1.0f, 0.5f);
          const Tensor x = proj.narrow(1, 3, di);
          const Tensor w = random({di}, 6, 1.0f, 1.0f), b = random({di}, 7);
          const Tensor pos = positions(n, 8), slots = ids(slot_list);

          Tensor want = random({rows, di}, 9);
          Tensor got = random({rows, di}, 9);
          Tensor key = Tensor::empty({n, di}, DType::kF32, MemTag::kActivation);
          layer_norm(x, w, b, 1e-6f, key);
          apply_rope(key, 0, pos, table, style);
          scatter_rows(key, slots, want);

          Tensor got_key = random({n, di}, 10);
          indexer_key_write(x, w, b, 1e-6f, pos, slots, table, style, got,
                            dense ? &got_key : nullptr);
          EXPECT_TRUE(bitwise_equal(got, want));
          if (dense) {
            EXPECT_TRUE(bitwise_equal(got_key, key));
          }
        }
}

// A slot past the cache is an error, as for scatter_rows, raised before any row is written.
TEST(CacheWrite, SlotsOutsideTheCacheAreRejected) {
  const RopeTable table(RopeParamsF{}, 8);
  const Tensor kv = random({2, 24}, 1), w = random({16}, 2), pos = positions(2, 3);
  Tensor cache = Tensor::zeros({4, 24}, DType::kF32, MemTag::kActivation);
  EXPECT_THROW(
      latent_cache_write(kv, w, 1e-6f, pos, ids({0, 4}), table, RopeStyle::kHalfSplit, cache),
      ShapeError);
  EXPECT_EQ(cache.data<float>()[0], 0.0f);
  const Tensor b = random({24}, 4), w24 = random({24}, 5);
  EXPECT_THROW(
      indexer_key_write(kv, w24, b, 1e-6f, pos, ids({7, 0}), table, RopeStyle::kHalfSplit, cache),
      ShapeError);
}

}  // namespace
}  // namespace mls::ops
