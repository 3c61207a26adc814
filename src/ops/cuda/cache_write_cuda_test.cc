// The fused cache writes on the GPU: bit for bit the composed CUDA ops they replace (the same row
// reductions and rotation, norm_row.cuh and rope_row.cuh), and the CPU op within the bf16
// tolerance of data_ops_cuda_test.cc (an output stored as bf16: 4e-3·|ref| + 1e-5·rms(ref)).
// Shapes cover every cut of the normalisation (a warp per row with 1, 2 and 4 packs per lane, a
// block per row, the scalar path for odd widths and misaligned rows), both rope styles, bf16 and
// f32, and slots in order, spread and skipped (-1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cache_write.h"
#include "ops/cuda/test_util.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/test_inputs.h"

namespace mls::ops::test {
namespace {

constexpr DType kBF = DType::kBF16;
constexpr DType kF = DType::kF32;

// The host f32 values as a kernel reading dtype `d` sees them (contiguous).
Tensor seen_as(const Tensor& host, DType d) {
  Tensor c = Tensor::empty(host.shape(), kF, MemTag::kActivation);
  copy(host, c);
  return d == kBF ? round_bf16(c) : c;
}

Tensor positions(int64_t n) {
  static const std::vector<int32_t> kPos = {0, 1, 7, 4095, 4096, 65535, 163839, 12345, 3, 500};
  std::vector<int32_t> p(n);
  for (int64_t t = 0; t < n; ++t) p[t] = kPos[t % kPos.size()] + static_cast<int32_t>(t / 10);
  return ids(p);
}

// In order, spread backwards over a cache of 2n + 3 rows, every third token skipped and shuffled.
std::vector<std::vector<int32_t>> slot_patterns(int64_t n) {
  std::vector<int32_t> ordered(n), spread(n), skipping(n);
  for (int64_t t = 0; t < n; ++t) {
    ordered[t] = static_cast<int32_t>(t);
    spread[t] = static_cast<int32_t>(2 * n + 2 - 2 * t);
    skipping[t] = t % 3 == 1 ? -1 : static_cast<int32_t>(t);
  }
  std::shuffle(skipping.begin(), skipping.end(), std::mt19937(11));
  return {ordered, spread, skipping};
}

::testing::AssertionResult bitwise(const Tensor& got, const Tensor& want) {
  const Tensor g = to_cpu(got), w = to_cpu(want);
  if (std::memcmp(g.raw(), w.raw(), g.nbytes()) == 0) return ::testing::AssertionSuccess();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::memcmp(g.data<float>() + i, w.data<float>() + i, sizeof(float)) != 0) {
      if (first < 0) first = i;
      ++bad;
    }
  return ::testing::AssertionFailure()
         << bad << " of " << g.numel() << " differ; first at " << first << ": "
         << g.data<float>()[first] << " vs " << w.data<float>()[first];
}

// Every element within rtol·|ref| + 1e-5·rms(ref), plus, for the first `rotated` columns of each
// row (half-split pairs i, i + rotated/2), pair_tol·|pair|: a rotated value moves with each of
// its two inputs, the normalised key, which the GPU rounds to the activation dtype before rotating
// it (as the composed ops store it: up to 2^-9 of each input in bf16) and reduces in another
// order; the pair's length is its inputs' length times the table's scaling.
::testing::AssertionResult close(const Tensor& got, const Tensor& ref, double rtol,
                                 int64_t rotated = 0, double pair_tol = 0) {
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  const int64_t width = ref.dim(1), half = rotated / 2;
  double ss = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) ss += static_cast<double>(r[i]) * r[i];
  const double atol = 1e-5 * std::sqrt(ss / static_cast<double>(ref.numel()));
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const int64_t col = i % width;
    double tol = rtol * std::fabs(r[i]) + atol;
    if (col < rotated) {
      const int64_t partner = col < half ? i + half : i - half;
      tol += pair_tol * std::hypot(static_cast<double>(r[i]), static_cast<double>(r[partner]));
    }
    if (!(std::fabs(static_cast<double>(g[i]) - r[i]) <= tol)) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << ref.numel() << " off; first at " << first
                                       << ": got " << g[first] << " want " << r[first];
}

struct LatentCase {
  int64_t r, d, tokens, kv_offset;  // kv: columns [kv_offset, kv_offset + r + d) of wider rows
  const char* what;
};

TEST(CudaCacheWrite, LatentEqualsComposedOpsBitwiseAndCpu) {
  MLS_REQUIRE_GPU();
  const LatentCase cases[] = {
      {512, 64, 37, 64, "GLM-5 [512 | 64]: a warp per row, 2 packs per lane"},
      {512, 64, 1, 64, "one decode token"},
      {32, 16, 5, 8, "[32 | 16]: 1 pack per lane"},
      {1000, 64, 6, 8, "[1000 | 64]: 4 packs per lane"},
      {6144, 64, 3, 0, "[6144 | 64]: a block per row"},
      {36, 16, 9, 8, "[36 | 16]: scalar (odd width)"},
      {512, 64, 7, 3, "[512 | 64] misaligned rows: scalar"},
  };
  for (const LatentCase& lc : cases)
    for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
      for (const DType dt : {kBF, kF})
        for (const auto& slot_list : slot_patterns(lc.tokens)) {
          const int64_t r = lc.r, d = lc.d, n = lc.tokens, rows = 2 * n + 3;
          SCOPED_TRACE(::testing::Message()
                       << lc.what << ", " << dtype_name(dt)
                       << (style == RopeStyle::kInterleaved ? ", interleaved" : ", half-split")
                       << ", slot[0] " << slot_list[0]);
          const RopeTable table(test::yarn_params(), static_cast<int>(d));
          const Tensor a_h = random({n, lc.kv_offset + r + d + 16}, 1, 0.7f);
          const Tensor w_h = random({r}, 2, 0.2f);
          const Tensor cache_h = random({rows, r + d}, 3);
          const Tensor pos_h = positions(n), slots_h = ids(slot_list);

          const Tensor a = to_gpu(a_h, dt), kv = a.narrow(1, lc.kv_offset, r + d);
          const Tensor w = to_gpu(w_h, kF);
          const Tensor pos = to_gpu(pos_h, DType::kI32), slots = to_gpu(slots_h, DType::kI32);

          // As MlaAttention::project wrote the latent before: norm, copy, rotate, scatter.
          Tensor want = to_gpu(cache_h, dt);
          Tensor ckv = dev_empty({n, r + d}, dt);
          Tensor c = ckv.narrow(1, 0, r), k_rot = ckv.narrow(1, r, d);
          rms_norm(kv.narrow(1, 0, r), w, 1e-6f, c);
          copy(kv.narrow(1, r, d), k_rot);
          apply_rope(ckv, r, pos, table, style);
          scatter_rows(ckv, slots, want);

          Tensor got = to_gpu(cache_h, dt);
          latent_cache_write(kv, w, 1e-6f, pos, slots, table, style, got);
          EXPECT_TRUE(bitwise(got, want));

          Tensor ref = seen_as(cache_h, dt);
          latent_cache_write(seen_as(a_h, dt).narrow(1, lc.kv_offset, r + d), w_h, 1e-6f, pos_h,
                             slots_h, table, style, ref);
          EXPECT_TRUE(close(to_cpu(got), ref, dt == kBF ? kBf16OutTol : kF32OutTol));
        }
}

struct IndexerCase {
  int64_t n, d, tokens, x_offset;
  const char* what;
};

TEST(CudaCacheWrite, IndexerKeyEqualsComposedOpsBitwiseAndCpu) {
  MLS_REQUIRE_GPU();
  const IndexerCase cases[] = {
      {128, 64, 37, 8, "GLM-5 key 128, rope 64: a warp per row"},
      {128, 64, 1, 8, "one decode token"},
      {24, 8, 5, 0, "key 24, rope 8"},
      {2048, 128, 4, 0, "key 2048, rope 128: a block per row"},
      {100, 64, 6, 8, "key 100: scalar (odd width)"},
      {128, 64, 5, 1, "misaligned rows: scalar"},
  };
  for (const IndexerCase& ic : cases)
    for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
      for (const DType dt : {kBF, kF})
        for (const auto& slot_list : slot_patterns(ic.tokens))
          for (const bool dense : {false, true}) {
            const int64_t di = ic.n, n = ic.tokens, rows = 2 * n + 3;
            SCOPED_TRACE(::testing::Message()
                         << ic.what << ", " << dtype_name(dt)
                         << (style == RopeStyle::kInterleaved ? ", interleaved" : ", half-split")
                         << ", slot[0] " << slot_list[0] << (dense ? ", dense key" : ""));
            const RopeTable table(test::yarn_params(), static_cast<int>(ic.d));
            // A mean away from zero exercises the centred variance.
            Tensor proj_h = random({n, ic.x_offset + di + 16}, 4, 2.0f);
            for (int64_t i = 0; i < proj_h.numel(); ++i) proj_h.data<float>()[i] += 3.0f;
            Tensor w_h = random({di}, 5, 0.2f);
            for (int64_t i = 0; i < di; ++i) w_h.data<float>()[i] += 1.0f;
            const Tensor b_h = random({di}, 6, 0.1f);
            const Tensor cache_h = random({rows, di}, 7);
            const Tensor pos_h = positions(n), slots_h = ids(slot_list);

            const Tensor proj = to_gpu(proj_h, dt), x = proj.narrow(1, ic.x_offset, di);
            const Tensor w = to_gpu(w_h, kF), b = to_gpu(b_h, kF);
            const Tensor pos = to_gpu(pos_h, DType::kI32), slots = to_gpu(slots_h, DType::kI32);

            // As dsa_indexer wrote the key before: layer_norm, rotate, scatter.
            Tensor want = to_gpu(cache_h, dt);
            Tensor key = dev_empty({n, di}, dt);
            layer_norm(x, w, b, 1e-6f, key);
            apply_rope(key, 0, pos, table, style);
            scatter_rows(key, slots, want);

            Tensor got = to_gpu(cache_h, dt);
            Tensor got_key = dev_empty({n, di}, dt);
            indexer_key_write(x, w, b, 1e-6f, pos, slots, table, style, got,
                              dense ? &got_key : nullptr);
            EXPECT_TRUE(bitwise(got, want));
            if (dense) {
              EXPECT_TRUE(bitwise(got_key, key));
            }

            Tensor ref = seen_as(cache_h, dt);
            Tensor ref_key = Tensor::empty({n, di}, kF, MemTag::kActivation);
            indexer_key_write(seen_as(proj_h, dt).narrow(1, ic.x_offset, di), w_h, b_h, 1e-6f,
                              pos_h, slots_h, table, style, ref, &ref_key);
            const double rtol = dt == kBF ? kBf16OutTol : kF32OutTol;
            const double pair_tol = dt == kBF ? std::ldexp(1.0, -8) : kF32OutTol;
            EXPECT_TRUE(close(to_cpu(got), ref, rtol, ic.d, pair_tol));
            if (dense) {
              EXPECT_TRUE(close(to_cpu(got_key), ref_key, rtol, ic.d, pair_tol));
            }
          }
}

TEST(CudaCacheWrite, RejectsARotaryDimPastTheKernelsLimit) {
  MLS_REQUIRE_GPU();
  const RopeTable too_wide(RopeParamsF{}, 256);
  const Tensor pos = to_gpu(ids({0, 1}), DType::kI32);
  const Tensor slots = to_gpu(ids({0, 1}), DType::kI32);
  const Tensor kv = dev_empty({2, 512 + 256}, kBF), w = to_gpu(random({512}, 1), kF);
  Tensor cache = dev_empty({4, 512 + 256}, kBF);
  EXPECT_THROW(latent_cache_write(kv, w, 1e-6f, pos, slots, too_wide, RopeStyle::kHalfSplit, cache),
               Unsupported);
  const Tensor x = dev_empty({2, 256}, kBF), w256 = to_gpu(random({256}, 2), kF);
  Tensor index_cache = dev_empty({4, 256}, kBF);
  EXPECT_THROW(indexer_key_write(x, w256, w256, 1e-6f, pos, slots, too_wide, RopeStyle::kHalfSplit,
                                 index_cache),
               Unsupported);
}

}  // namespace
}  // namespace mls::ops::test
