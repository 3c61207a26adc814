// Op tests on the CPU against direct formulas from REFERENCE.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/indexer_topk.h"
#include "ops/linear.h"
#include "ops/moe_routing.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/test_inputs.h"

namespace mls::ops {
namespace {

Tensor filled(const Shape& s, const std::vector<float>& v) {
  Tensor t = Tensor::empty(s, DType::kF32, MemTag::kActivation);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

using test::ids;
using test::random;

TEST(Linear, MatchesNaiveWithStridedRows) {
  Tensor wide = random({3, 10}, 1);
  Tensor x = wide.narrow(1, 2, 5);  // row stride 10
  Tensor w = random({4, 5}, 2);
  Tensor y = Tensor::zeros({3, 4}, DType::kF32, MemTag::kActivation);
  linear(x, w, y);
  for (int t = 0; t < 3; ++t)
    for (int o = 0; o < 4; ++o) {
      double s = 0;
      for (int i = 0; i < 5; ++i) s += x.data<float>()[t * 10 + i] * w.data<float>()[o * 5 + i];
      EXPECT_NEAR(y.data<float>()[t * 4 + o], s, 1e-5);
    }
  Tensor bad = Tensor::zeros({3, 3}, DType::kF32, MemTag::kActivation);
  EXPECT_THROW(linear(x, w, bad), ShapeError);
}

TEST(Norm, RmsAndLayerNorm) {
  Tensor x = filled({1, 4}, {1, 2, 3, 4});
  Tensor w = filled({4}, {1, 0.5f, 2, 1});
  Tensor b = filled({4}, {0, 1, 0, -1});
  Tensor y = Tensor::empty({1, 4}, DType::kF32, MemTag::kActivation);
  rms_norm(x, w, 1e-6f, y);
  const double inv = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  EXPECT_NEAR(y.data<float>()[1], 0.5 * 2 * inv, 1e-6);
  layer_norm(x, w, b, 1e-6f, y);
  const double sd = std::sqrt(1.25 + 1e-6);
  EXPECT_NEAR(y.data<float>()[0], (1 - 2.5) / sd * 1 + 0, 1e-5);
  EXPECT_NEAR(y.data<float>()[3], (4 - 2.5) / sd * 1 - 1, 1e-5);
}

TEST(Rope, DefaultInvFreq) {
  RopeParamsF p;
  p.theta = 10000;
  const auto inv = rope_inv_freq(p, 8);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
  EXPECT_EQ(rope_attention_scaling(p), 1.0);
}

TEST(Rope, YarnInvFreqAndScaling) {
  RopeParamsF p;
  p.theta = 10000;
  p.yarn = true;
  p.factor = 4;
  p.original_max_position_embeddings = 1024;
  p.beta_fast = 32;
  p.beta_slow = 1;
  const int d = 16;
  const auto inv = rope_inv_freq(p, d);
  // Ramp bounds from REFERENCE.md, computed independently.
  auto corr = [&](double rot) {
    return d * std::log(1024 / (rot * 2 * std::numbers::pi)) / (2 * std::log(10000.0));
  };
  const double low = std::max(std::floor(corr(32)), 0.0);
  const double high = std::min(std::ceil(corr(1)), d - 1.0);
  for (int i = 0; i < d / 2; ++i) {
    const double pf = std::pow(10000.0, 2.0 * i / d);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    EXPECT_NEAR(inv[i], (1 / (4 * pf)) * ramp + (1 / pf) * (1 - ramp), 1e-6 / pf) << i;
  }
  // Only factor present: m(4, 1); mscale == mscale_all_dim: ratio 1.
  EXPECT_NEAR(rope_attention_scaling(p), 0.1 * std::log(4.0) + 1, 1e-12);
  p.has_mscale = p.has_mscale_all_dim = true;
  p.mscale = p.mscale_all_dim = 1.0;
  EXPECT_NEAR(rope_attention_scaling(p), 1.0, 1e-12);
  p.mscale_all_dim = 0.5;
  EXPECT_NEAR(rope_attention_scaling(p), yarn_mscale(4, 1) / yarn_mscale(4, 0.5), 1e-12);
  EXPECT_EQ(yarn_mscale(1.0, 3.0), 1.0);
}

TEST(Rope, InterleavedWritesHalfSplitAndHalfSplitRotates) {
  RopeParamsF p;
  p.theta = 100;
  RopeTable table(p, 4);
  const auto& inv = table.inv_freq();
  const int pos = 3;
  const std::vector<float> v = {1, 2, 3, 4};
  Tensor x = filled({1, 1, 6}, {9, 1, 2, 3, 4, 9});  // rotate dims [1, 5)
  apply_rope(x, 1, ids({pos}), table, RopeStyle::kInterleaved);
  const float* o = x.data<float>();
  for (int i = 0; i < 2; ++i) {
    const double c = std::cos(pos * inv[i]), s = std::sin(pos * inv[i]);
    EXPECT_NEAR(o[1 + i], v[2 * i] * c - v[2 * i + 1] * s, 1e-6);
    EXPECT_NEAR(o[3 + i], v[2 * i + 1] * c + v[2 * i] * s, 1e-6);
  }
  EXPECT_EQ(o[0], 9);
  EXPECT_EQ(o[5], 9);
  Tensor y = filled({1, 4}, v);
  apply_rope(y, 0, ids({pos}), table, RopeStyle::kHalfSplit);
  for (int i = 0; i < 2; ++i) {
    const double c = std::cos(pos * inv[i]), s = std::sin(pos * inv[i]);
    EXPECT_NEAR(y.data<float>()[i], v[i] * c - v[i + 2] * s, 1e-6);
    EXPECT_NEAR(y.data<float>()[i + 2], v[i + 2] * c + v[i] * s, 1e-6);
  }
}

// rope_into writes what apply_rope would leave in place, bit for bit, from a strided source
// (the query heads' rotary columns) into a strided destination (the latent query's), leaving the
// source and the destination's other columns as they were.
TEST(Rope, IntoEqualsCopyThenApplyRope) {
  RopeParamsF p;
  p.theta = 1e4;
  const RopeTable table(p, 8);
  const Tensor pos = ids({0, 5, 17});
  const auto values = [](const Tensor& t) {  // row-major values of a strided 3-d view
    std::vector<float> v;
    for (int64_t i = 0; i < t.dim(0); ++i)
      for (int64_t j = 0; j < t.dim(1); ++j)
        for (int64_t k = 0; k < t.dim(2); ++k)
          v.push_back(t.data<float>()[i * t.stride(0) + j * t.stride(1) + k * t.stride(2)]);
    return v;
  };
  for (const RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit}) {
    const Tensor q = random({3, 4, 20}, 11);  // rope part: columns 12..19
    const Tensor src = q.narrow(2, 12, 8);
    const std::vector<float> before = values(src);
    Tensor lat = Tensor::zeros({3, 4, 30}, DType::kF32, MemTag::kActivation);
    Tensor out = lat.narrow(2, 22, 8);
    rope_into(src, pos, table, style, out);
    Tensor want = Tensor::empty({3, 4, 8}, DType::kF32, MemTag::kActivation);
    copy(src, want);
    apply_rope(want, 0, pos, table, style);
    EXPECT_EQ(values(out), values(want));
    EXPECT_EQ(values(src), before);
    EXPECT_EQ(values(lat.narrow(2, 0, 22)), std::vector<float>(3 * 4 * 22, 0.0f));
  }
  Tensor wrong = Tensor::zeros({3, 4, 6}, DType::kF32, MemTag::kActivation);
  EXPECT_THROW(rope_into(random({3, 4, 6}, 1), pos, table, RopeStyle::kHalfSplit, wrong),
               ShapeError);
}

TEST(Attention, CausalAndSparseMatchNaive) {
  const int T = 5, H = 2, D = 3, Dv = 2;
  Tensor q = random({T, H, D}, 3), k = random({T, H, D}, 4), v = random({T, H, Dv}, 5);
  Tensor out = Tensor::empty({T, H, Dv}, DType::kF32, MemTag::kActivation);
  Tensor pos = ids({0, 1, 2, 3, 4});
  Tensor allowed = Tensor::empty({T, 2}, DType::kI32, MemTag::kActivation);
  const std::vector<int32_t> al = {0, -1, 0, 1, 2, 0, 3, 1, 4, 2};
  std::copy(al.begin(), al.end(), allowed.data<int32_t>());
  for (bool sparse : {false, true}) {
    AttentionArgs args{0.7f, sparse ? &allowed : nullptr, {}};
    attention(q, k, v, pos, args, out);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        std::vector<int> keys;
        for (int j = 0; j <= t; ++j)
          if (!sparse || al[t * 2] == j || al[t * 2 + 1] == j) keys.push_back(j);
        std::vector<double> p;
        double m = -1e30, sum = 0;
        for (int j : keys) {
          double s = 0;
          for (int d = 0; d < D; ++d)
            s += q.data<float>()[(t * H + h) * D + d] * k.data<float>()[(j * H + h) * D + d];
          p.push_back(s * 0.7);
          m = std::max(m, p.back());
        }
        for (auto& x : p) sum += (x = std::exp(x - m));
        for (int d = 0; d < Dv; ++d) {
          double o = 0;
          for (size_t i = 0; i < keys.size(); ++i)
            o += p[i] / sum * v.data<float>()[(keys[i] * H + h) * Dv + d];
          EXPECT_NEAR(out.data<float>()[(t * H + h) * Dv + d], o, 1e-5) << sparse << t << h;
        }
      }
  }
}

TEST(Attention, PagedKeysReadTheCacheInPlace) {
  // Positions 0..4 in blocks of 2 laid out as blocks {3, 0, 2} of a 4-block cache.
  const int T = 5, D = 3;
  Tensor q = random({T, 2, D}, 11), k = random({T, 1, D}, 12), v = random({T, 1, 2}, 13);
  const std::vector<int32_t> table = {3, 0, 2};
  Tensor kc = Tensor::zeros({8, 1, D}, DType::kF32, MemTag::kActivation);
  Tensor vc = Tensor::zeros({8, 1, 2}, DType::kF32, MemTag::kActivation);
  for (int j = 0; j < T; ++j) {
    const int row = table[j / 2] * 2 + j % 2;
    std::copy_n(k.data<float>() + j * D, D, kc.data<float>() + row * D);
    std::copy_n(v.data<float>() + j * 2, 2, vc.data<float>() + row * 2);
  }
  Tensor want = Tensor::empty({T, 2, 2}, DType::kF32, MemTag::kActivation);
  Tensor got = Tensor::empty({T, 2, 2}, DType::kF32, MemTag::kActivation);
  attention(q, k, v, ids({0, 1, 2, 3, 4}), {0.5f, nullptr, {}}, want);
  Tensor tables = ids(table).view({1, 3});
  Tensor seq = ids({0, 0, 0, 0, 0});
  AttentionArgs paged{
      .scale = 0.5f,
      .allowed = nullptr,
      .pages = {.block_tables = &tables, .token_seq = &seq, .block_size = 2, .max_keys = T}};
  attention(q, kc, vc, ids({0, 1, 2, 3, 4}), paged, got);
  for (int i = 0; i < got.numel(); ++i) EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]);
}

TEST(Attention, SharedLatentHeadBroadcasts) {
  Tensor q = random({2, 3, 4}, 6), k = random({2, 1, 4}, 7), v = random({2, 1, 2}, 8);
  Tensor out = Tensor::empty({2, 3, 2}, DType::kF32, MemTag::kActivation);
  attention(q, k, v, ids({0, 1}), {1.0f, nullptr, {}}, out);
  // Row 0 sees only key 0: the output is v[0] for every head.
  for (int h = 0; h < 3; ++h) EXPECT_NEAR(out.data<float>()[h * 2], v.data<float>()[0], 1e-6);
  EXPECT_THROW(attention(q, k, v, ids({0, 2}), {1.0f, nullptr, {}}, out), ShapeError);
}

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> w;
};

Routed route(const std::vector<float>& logits, const std::vector<float>& bias, RoutingArgs a) {
  const int64_t E = static_cast<int64_t>(bias.size());
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  Tensor l = filled({T, E}, logits), b = filled({E}, bias);
  Tensor i = Tensor::empty({T, a.top_k}, DType::kI32, MemTag::kActivation);
  Tensor w = Tensor::empty({T, a.top_k}, DType::kF32, MemTag::kActivation);
  moe_route(l, b, a, i, w);
  Routed r{{i.data<int32_t>(), i.data<int32_t>() + i.numel()},
           {w.data<float>(), w.data<float>() + w.numel()}};
  return r;
}

float sig(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

TEST(MoeRouting, BiasChoosesUnbiasedWeights) {
  // Expert 0 has the best raw score but a bias that drops it; the weights stay unbiased.
  Routed r = route({3, 1, 0, 2}, {-5, 0, 0, 0}, {1, 1, 2, true, 2.5f});
  std::sort(r.ids.begin(), r.ids.end());
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  const float s1 = sig(1), s3 = sig(2);
  Routed n = route({3, 1, 0, 2}, {-5, 0, 0, 0}, {1, 1, 2, true, 2.5f});
  for (int i = 0; i < 2; ++i) {
    const float raw = n.ids[i] == 1 ? s1 : s3;
    EXPECT_NEAR(n.w[i], raw / (s1 + s3) * 2.5f, 1e-6);
  }
  Routed u = route({3, 1, 0, 2}, {-5, 0, 0, 0}, {1, 1, 2, false, 1.0f});
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(u.w[i], u.ids[i] == 1 ? s1 : s3, 1e-6);
}

TEST(MoeRouting, GroupsKeepTheBestTopTwoSums) {
  // 4 groups of 2; group scores (sum of both, with bias 0): g0 = s(0)+s(0), g1 high, g2 higher,
  // g3 has one very high expert but a low partner.
  const std::vector<float> l = {0, 0, 2, 2, 3, 3, 6, -6};
  Routed r = route(l, std::vector<float>(8, 0), {4, 2, 2, true, 1.0f});
  std::sort(r.ids.begin(), r.ids.end());
  // Best groups by sum: g2 (s3+s3 = 1.90), g1 (s2+s2 = 1.76) beat g3 (s6+s-6 = 1.0).
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 5}));
  // Masked groups never win even when every kept expert's biased score is negative.
  Routed neg = route({-4, -4, -4, -4}, {-1, -1, 0.5f, 0.5f}, {2, 1, 2, true, 1.0f});
  std::sort(neg.ids.begin(), neg.ids.end());
  EXPECT_EQ(neg.ids, (std::vector<int32_t>{2, 3}));
  EXPECT_THROW(route(l, std::vector<float>(8, 0), {3, 2, 2, true, 1.0f}), ShapeError);
}

TEST(MoeRouting, TiesFollowTorchOrder) {
  // Eight equal scores, top-2: torch's nth_element picks a deterministic pair; the result must
  // not depend on anything but the values.
  Routed a = route(std::vector<float>(8, 0.5f), std::vector<float>(8, 0), {1, 1, 2, true, 1.0f});
  Routed b = route(std::vector<float>(8, 0.5f), std::vector<float>(8, 0), {1, 1, 2, true, 1.0f});
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_NEAR(a.w[0] + a.w[1], 1.0f, 1e-6);
}

TEST(IndexerTopk, CausalRowsAndShortRows) {
  const int T = 4, H = 1, D = 2;
  Tensor q = filled({T, H, D}, {1, 0, 1, 0, 1, 0, 1, 0});
  Tensor k = filled({T, D}, {1, 0, 3, 0, 2, 0, -1, 0});
  Tensor w = filled({T, H}, {1, 1, 1, 1});
  Tensor chosen = Tensor::empty({T, 2}, DType::kI32, MemTag::kActivation);
  for (TopkTieOrder order : {TopkTieOrder::kServing, TopkTieOrder::kTorchReference}) {
    indexer_topk(q, k, w, ids({0, 1, 2, 3}), ids({4, 4, 4, 4}), 1.0f, {}, order, chosen);
    const int32_t* c = chosen.data<int32_t>();
    EXPECT_EQ(c[0], 0);  // one valid key: it, and the masked slot reads -1
    EXPECT_EQ(c[1], -1);
    std::vector<int32_t> row3(c + 6, c + 8);
    std::sort(row3.begin(), row3.end());
    EXPECT_EQ(row3, (std::vector<int32_t>{1, 2}));  // scores 1, 3, 2, relu(-1)=0
  }
}

// 3 positive scores and 97 ReLU zeros, top-8: five of the tied zeros are kept. Serving keeps the
// lowest-indexed ones, listed in ascending order, whatever the row length (a prompt's, or the
// row's own); the torch reference's choice among them follows its algorithm for the row length.
TEST(IndexerTopk, ServingTiesGoToLowerIndicesWhateverTheRowLength) {
  const int keys = 100;
  std::vector<float> kv(keys, -1.0f);
  kv[40] = 2, kv[70] = 3, kv[90] = 1;
  Tensor q = filled({1, 1, 1}, {1}), k = filled({keys, 1}, kv), w = filled({1, 1}, {1});
  Tensor chosen = Tensor::empty({1, 8}, DType::kI32, MemTag::kActivation);
  const std::vector<int32_t> want = {0, 1, 2, 3, 4, 40, 70, 90};
  for (int32_t row_len : {keys, 700, 5000}) {
    indexer_topk(q, k, w, ids({keys - 1}), ids({row_len}), 1.0f, {}, TopkTieOrder::kServing,
                 chosen);
    EXPECT_EQ(std::vector<int32_t>(chosen.data<int32_t>(), chosen.data<int32_t>() + 8), want)
        << "row length " << row_len;
    const std::vector<bool> tie = cpu::indexer_ties_at_cut(q, k, w, ids({keys - 1}), 1.0f, {}, 8);
    EXPECT_EQ(tie, std::vector<bool>{true});

    indexer_topk(q, k, w, ids({keys - 1}), ids({row_len}), 1.0f, {}, TopkTieOrder::kTorchReference,
                 chosen);
    std::vector<int32_t> ref(chosen.data<int32_t>(), chosen.data<int32_t>() + 8);
    std::sort(ref.begin(), ref.end());
    EXPECT_TRUE(std::adjacent_find(ref.begin(), ref.end()) == ref.end());
    EXPECT_TRUE(ref.front() >= 0 && ref.back() < keys);
    for (int32_t j : {40, 70, 90})  // the positive keys, and five of the zeros
      EXPECT_TRUE(std::binary_search(ref.begin(), ref.end(), j)) << j;
  }
  // A row with a unique top-8 has no tie at the cut.
  for (int j = 0; j < keys; ++j) kv[j] = static_cast<float>(j);
  Tensor distinct = filled({keys, 1}, kv);
  EXPECT_EQ(cpu::indexer_ties_at_cut(q, distinct, w, ids({keys - 1}), 1.0f, {}, 8),
            std::vector<bool>{false});
}

TEST(Elementwise, SiluMulAddEmbedding) {
  Tensor g = filled({1, 2}, {0, 2}), u = filled({1, 2}, {3, 4});
  Tensor o = Tensor::empty({1, 2}, DType::kF32, MemTag::kActivation);
  silu_mul(g, u, o);
  EXPECT_NEAR(o.data<float>()[0], 0, 1e-7);
  EXPECT_NEAR(o.data<float>()[1], 2 * sig(2) * 4, 1e-5);
  add(g, u, o);
  EXPECT_EQ(o.data<float>()[1], 6);
  Tensor table = filled({2, 2}, {1, 2, 3, 4});
  Tensor e = Tensor::empty({3, 2}, DType::kF32, MemTag::kActivation);
  embedding(table, ids({5, 6, 0}), 5, e);  // a shard holding rows 5 and 6
  EXPECT_EQ(e.data<float>()[2], 3);
  EXPECT_EQ(e.data<float>()[4], 0);  // outside this shard
}

TEST(Dispatch, MetaOutputsSkipCompute) {
  CpuAllocator meta;
  meta.set_meta(true);
  Tensor y = Tensor::empty({2, 2}, DType::kF32, MemTag::kActivation, meta);
  Tensor x = random({2, 3}, 9), w = random({2, 3}, 10);
  EXPECT_NO_THROW(linear(x, w, y));
  EXPECT_EQ(meta.stats().pk(MemTag::kActivation), 16);
}

TEST(Copy, StridedTransposeAndDtypeConversion) {
  Tensor a = random({3, 4}, 21);
  Tensor t = Tensor::empty({4, 3}, DType::kF32, MemTag::kActivation);
  copy(a.transpose(0, 1), t);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(t.data<float>()[j * 3 + i], a.data<float>()[i * 4 + j]);
  Tensor b = Tensor::empty({3, 4}, DType::kBF16, MemTag::kActivation);
  copy(a, b);
  Tensor back = Tensor::empty({3, 4}, DType::kF32, MemTag::kActivation);
  copy(b, back);
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(back.data<float>()[i], bf16_to_f32(f32_to_bf16(a.data<float>()[i])));
  Tensor wrong = Tensor::empty({4, 4}, DType::kF32, MemTag::kActivation);
  EXPECT_THROW(copy(a, wrong), ShapeError);
}

TEST(Copy, ScatterAndGatherRows) {
  Tensor src = filled({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor cache = Tensor::zeros({4, 3}, DType::kF32, MemTag::kActivation);
  scatter_rows(src, ids({3, 1}), cache);
  EXPECT_EQ(cache.data<float>()[9], 1);
  EXPECT_EQ(cache.data<float>()[3], 4);
  EXPECT_EQ(cache.data<float>()[0], 0);
  Tensor out = Tensor::empty({3, 3}, DType::kF32, MemTag::kActivation);
  gather_rows(cache, ids({1, -1, 3}), out);
  EXPECT_EQ(out.data<float>()[0], 4);
  EXPECT_EQ(out.data<float>()[3], 0);  // −1 gathers zeros
  EXPECT_EQ(out.data<float>()[8], 3);
  EXPECT_THROW(scatter_rows(src, ids({9, 0}), cache), ShapeError);
}

TEST(Linear, BatchedOverHeadStridedWeights) {
  // W_UV-style: per head the rows [dn, dn + dv) of a [heads, dn + dv, r] matrix.
  const int T = 3, B = 2, in = 4, dn = 2, dv = 3;
  Tensor x = random({T, B, in}, 31);
  Tensor kvb = random({B * (dn + dv), in}, 32);
  const Tensor w = kvb.view({B, dn + dv, in}).narrow(1, dn, dv);
  Tensor y = Tensor::empty({T, B, dv}, DType::kF32, MemTag::kActivation);
  linear_batched(x, w, y);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      for (int o = 0; o < dv; ++o) {
        double want = 0;
        for (int i = 0; i < in; ++i)
          want += x.data<float>()[(t * B + b) * in + i] *
                  kvb.data<float>()[(b * (dn + dv) + dn + o) * in + i];
        EXPECT_NEAR(y.data<float>()[(t * B + b) * dv + o], want, 1e-5);
      }
}

TEST(Norm, AddRmsNormEqualsAddThenNorm) {
  Tensor x = random({3, 8}, 41), d = random({3, 8}, 42), w = random({8}, 43);
  Tensor x2 = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation);
  copy(x, x2);
  Tensor y = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation);
  Tensor y2 = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation);
  add_rms_norm(x, d, w, 1e-6f, y);
  add(x2, d, x2);
  rms_norm(x2, w, 1e-6f, y2);
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(x.data<float>()[i], x2.data<float>()[i]);
    EXPECT_EQ(y.data<float>()[i], y2.data<float>()[i]);
  }
}

TEST(Elementwise, FillUniformIndexesTheFullTensor) {
  // A column shard sees exactly the full tensor's values at its columns.
  Tensor full = Tensor::empty({3, 8}, DType::kF32, MemTag::kActivation);
  Tensor part = Tensor::empty({3, 4}, DType::kF32, MemTag::kActivation);
  fill_uniform(full,
               {.seed = 5, .bound = 0.5f, .offset = 0.0f, .row0 = 0, .col0 = 0, .full_cols = 8});
  fill_uniform(part,
               {.seed = 5, .bound = 0.5f, .offset = 0.0f, .row0 = 0, .col0 = 4, .full_cols = 8});
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(part.data<float>()[r * 4 + c], full.data<float>()[r * 8 + 4 + c]);
      EXPECT_LE(std::abs(part.data<float>()[r * 4 + c]), 0.5f);
    }
}

TEST(MoeRouting, AlignIsStableAndUnpermuteWeighs) {
  // Tokens 0..2 with two experts each out of 3.
  Tensor ids3 = ids({2, 0, 0, 1, 2, 1}).view({3, 2});
  Tensor src = Tensor::empty({6}, DType::kI32, MemTag::kActivation);
  Tensor dest = Tensor::empty({3, 2}, DType::kI32, MemTag::kActivation);
  Tensor off = Tensor::empty({4}, DType::kI32, MemTag::kActivation);
  moe_align(ids3, 3, src, dest, off);
  EXPECT_EQ(std::vector<int32_t>(off.data<int32_t>(), off.data<int32_t>() + 4),
            (std::vector<int32_t>{0, 2, 4, 6}));
  EXPECT_EQ(std::vector<int32_t>(src.data<int32_t>(), src.data<int32_t>() + 6),
            (std::vector<int32_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(std::vector<int32_t>(dest.data<int32_t>(), dest.data<int32_t>() + 6),
            (std::vector<int32_t>{4, 0, 1, 2, 5, 3}));
  // Identity experts: out[t] = Σ_i w[t, i] · x[t].
  Tensor x = random({3, 2}, 51);
  Tensor y = Tensor::empty({6, 2}, DType::kF32, MemTag::kActivation);
  gather_rows(x, src, y);
  Tensor w = filled({3, 2}, {0.25f, 0.75f, 1, 1, 0.5f, 0});
  Tensor out = Tensor::empty({3, 2}, DType::kF32, MemTag::kActivation);
  moe_unpermute(y, dest, w, out);
  const float sum[3] = {1.0f, 2.0f, 0.5f};
  for (int t = 0; t < 3; ++t)
    for (int d = 0; d < 2; ++d)
      EXPECT_FLOAT_EQ(out.data<float>()[t * 2 + d], sum[t] * x.data<float>()[t * 2 + d]);
}

}  // namespace
}  // namespace mls::ops
