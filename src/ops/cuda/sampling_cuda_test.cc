// The sampling op: the CPU op's draw on hand-made rows (no GPU needed), then the CUDA op against
// the CPU op on the same f32 logits: realistic (peaked), flat, bf16-valued (many exact ties),
// clustered and all-equal rows, at V = 154880 and small V, for greedy, temperature only, top_k,
// top_p, min_p and their combinations, with candidate sets small enough for the sorted fast
// path and large enough for the radix select and its exact-tie pass. Greedy rows of calls of few
// rows, split across CTAs, against the CPU op and against the same rows in a call too wide to
// split (one CTA per row): ids bitwise equal.
//
// Tokens must be equal. Both ops compute q = float(exp(double)) and sum integer masses, so the
// only way they may differ is a q on which the two libms round differently: exp within ~2^-52
// of a float rounding midpoint (about 1 element in 10^8). A row whose ids differ must hold such
// an element (counted and reported); any other difference fails. Logprobs: the GPU sums exp in
// float terms with double accumulation (relative error ~1e-7 on the normaliser), the host in
// double: within 1e-5 absolute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/cuda/test_util.h"
#include "ops/sampling.h"

namespace mls::ops {
namespace {

constexpr int64_t kGlmVocab = 154880;

Tensor cpu_empty(const Shape& s, DType dt) {
  return Tensor::empty(s, dt, MemTag::kActivation);
}

Tensor gpu_empty(const Shape& s, DType dt) {
  return Tensor::empty(s, dt, MemTag::kActivation, test::gpu());
}

RowSampling greedy() {
  return {};
}

RowSampling sampled(double t, int64_t top_k = 0, double top_p = 1.0, double min_p = 0.0) {
  return {.temperature = t, .top_k = top_k, .top_p = top_p, .min_p = min_p, .uniform = 0.0};
}

// Rows take the configurations in turn, each with its own uniform (a multiple of 2^-53).
std::vector<RowSampling> assign(const std::vector<RowSampling>& configs, int64_t R, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<RowSampling> rows;
  for (int64_t r = 0; r < R; ++r) {
    RowSampling p = configs[r % configs.size()];
    p.uniform = static_cast<double>(g() >> 11) * 0x1p-53;
    rows.push_back(p);
  }
  return rows;
}

enum class Dist {
  kPeaked,      // N(0, 2) with 16 ids lifted by 4..12: a model's head and long tail
  kFlat,        // N(0, 1): huge nuclei
  kBf16,        // kPeaked rounded to bf16: many exactly equal q
  kDupMax,      // kPeaked with its maximum repeated at a higher id
  kAllEqual,    // one value: every q is 1
  kClustered4,  // 100 values 1e-4 apart: one top-level bucket, split by the second level
  kClustered6,  // 100 values 1e-6 apart: split only by the last level
};

Tensor make_logits(int64_t R, int64_t V, Dist d, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> id(0, V - 1);
  std::uniform_int_distribution<int> level(0, 99);
  std::uniform_real_distribution<float> lift(4.0f, 12.0f);
  Tensor t = cpu_empty({R, V}, DType::kF32);
  for (int64_t r = 0; r < R; ++r) {
    float* x = t.data<float>() + r * V;
    for (int64_t i = 0; i < V; ++i) {
      switch (d) {
        case Dist::kFlat:
          x[i] = n(g);
          break;
        case Dist::kAllEqual:
          x[i] = 1.5f;
          break;
        case Dist::kClustered4:
          x[i] = 1e-4f * static_cast<float>(level(g));
          break;
        case Dist::kClustered6:
          x[i] = 1e-6f * static_cast<float>(level(g));
          break;
        default:
          x[i] = 2.0f * n(g);
      }
    }
    if (d == Dist::kPeaked || d == Dist::kBf16 || d == Dist::kDupMax)
      for (int k = 0; k < 16; ++k) x[id(g)] += lift(g);
    if (d == Dist::kBf16)
      for (int64_t i = 0; i < V; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    if (d == Dist::kDupMax && V >= 2) {
      const int64_t m = std::max_element(x, x + V) - x;
      x[(m + 1 + id(g) % (V - 1)) % V] = x[m];
    }
  }
  return t;
}

Tensor make_mask(int64_t R, int64_t V);

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

Result run_cpu(const Tensor& logits, const std::vector<RowSampling>& rows) {
  const int64_t R = logits.dim(0);
  Tensor ids = cpu_empty({R}, DType::kI32), lp = cpu_empty({R}, DType::kF32);
  sample_rows(logits, rows, ids, lp);
  return {{ids.data<int32_t>(), ids.data<int32_t>() + R}, {lp.data<float>(), lp.data<float>() + R}};
}

Result run_gpu(const Tensor& logits, const std::vector<RowSampling>& rows) {
  const int64_t R = logits.dim(0);
  const Tensor dev = test::to_gpu(logits, DType::kF32);
  Tensor ids = gpu_empty({R}, DType::kI32), lp = gpu_empty({R}, DType::kF32);
  sample_rows(dev, rows, ids, lp);
  const Tensor hi = test::to_cpu(ids), hl = test::to_cpu(lp);
  return {{hi.data<int32_t>(), hi.data<int32_t>() + R}, {hl.data<float>(), hl.data<float>() + R}};
}

// Elements of a sampled row whose double exp lies within 4 double ulps of a float rounding
// midpoint: the only q two faithful libms may round apart.
int64_t fragile_elements(const float* x, int64_t V, const RowSampling& p) {
  if (p.temperature <= 0) return 0;
  const double mx = *std::max_element(x, x + V);
  const auto inv_t = static_cast<float>(1.0 / p.temperature);
  int64_t n = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double d = std::exp((static_cast<double>(x[i]) - mx) * inv_t);
    const auto f = static_cast<float>(d);
    const double up = (static_cast<double>(f) + std::nextafter(f, INFINITY)) / 2;
    const double down = (static_cast<double>(f) + std::nextafter(f, 0.0f)) / 2;
    const double tol = std::ldexp(d, -50);
    n += std::fabs(d - up) <= tol || std::fabs(d - down) <= tol;
  }
  return n;
}

// Compares the two ops on one batch; returns how many rows differ (each must be explained).
int64_t compare(const std::string& what, const Tensor& logits,
                const std::vector<RowSampling>& rows) {
  const Result want = run_cpu(logits, rows), got = run_gpu(logits, rows);
  const int64_t R = logits.dim(0), V = logits.dim(1);
  int64_t differ = 0;
  for (int64_t r = 0; r < R; ++r) {
    const RowSampling& p = rows[r];
    EXPECT_NEAR(got.logprobs[r], want.logprobs[r], 1e-5) << what << " row " << r;
    if (got.ids[r] == want.ids[r]) continue;
    ++differ;
    const int64_t fragile = fragile_elements(logits.data<float>() + r * V, V, p);
    std::printf(
        "%s row %lld: cpu %d gpu %d (T %g top_k %lld top_p %g min_p %g u %.17g), %lld "
        "elements near a rounding midpoint\n",
        what.c_str(), static_cast<long long>(r), want.ids[r], got.ids[r], p.temperature,
        static_cast<long long>(p.top_k), p.top_p, p.min_p, p.uniform,
        static_cast<long long>(fragile));
    EXPECT_GT(fragile, 0) << what << " row " << r << " differs without a q that may round apart";
  }
  return differ;
}

// --- the CPU op on hand-made rows ----------------------------------------------------------

std::map<int32_t, int> draw_counts(const std::vector<float>& logits, RowSampling p, int n) {
  const auto V = static_cast<int64_t>(logits.size());
  Tensor x = cpu_empty({n, V}, DType::kF32);
  std::vector<RowSampling> rows;
  for (int k = 0; k < n; ++k) {
    std::copy(logits.begin(), logits.end(), x.data<float>() + k * V);
    p.uniform = (k + 0.5) / n;
    rows.push_back(p);
  }
  std::map<int32_t, int> counts;
  for (int32_t id : run_cpu(x, rows).ids) ++counts[id];
  return counts;
}

TEST(SampleRowsCpu, InverseCdfInIdOrderOnAnEvenGridOfUniforms) {
  // Probabilities 0.1, 0.2, 0.3, 0.4: the first 100 of 1000 evenly spaced draws give id 0, ...
  const std::vector<float> logits{std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  const auto c = draw_counts(logits, sampled(1.0), 1000);
  EXPECT_NEAR(c.at(0), 100, 1);
  EXPECT_NEAR(c.at(1), 200, 1);
  EXPECT_NEAR(c.at(2), 300, 1);
  EXPECT_NEAR(c.at(3), 400, 1);
  // top_k 2 keeps 3 then 2 (descending): 4/7 of the draws, then 3/7.
  const auto k = draw_counts(logits, sampled(1.0, 2), 700);
  EXPECT_EQ(k.size(), 2u);
  EXPECT_NEAR(k.at(3), 400, 1);
  EXPECT_NEAR(k.at(2), 300, 1);
  // top_p 0.5: 0.4 is below 0.5, so 0.3 joins; min_p 0.6: only q >= 0.6 · 0.4 (ids 2 and 3).
  const auto tp = draw_counts(logits, sampled(1.0, 0, 0.5), 700);
  EXPECT_EQ(tp.size(), 2u);
  EXPECT_NEAR(tp.at(3), 400, 1);
  const auto mp = draw_counts(logits, sampled(1.0, 0, 1.0, 0.6), 700);
  EXPECT_EQ(mp.size(), 2u);
  EXPECT_NEAR(mp.at(2), 300, 1);
  // Temperature 0.5 squares the odds: 1, 4, 9, 16 out of 30.
  const auto t = draw_counts(logits, sampled(0.5), 3000);
  EXPECT_NEAR(t.at(0), 100, 1);
  EXPECT_NEAR(t.at(3), 1600, 1);
}

TEST(SampleRowsCpu, GreedyTiesTopKTiesAndRawLogprobs) {
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  const auto V = static_cast<int64_t>(logits.size());
  Tensor x = cpu_empty({2, V}, DType::kF32);
  std::copy(logits.begin(), logits.end(), x.data<float>());
  std::copy(logits.begin(), logits.end(), x.data<float>() + V);
  // Equal q rank by ascending id: top_k 1 keeps id 1, whatever the draw.
  RowSampling k1 = sampled(1.0, 1);
  k1.uniform = 0.999;
  const Result r = run_cpu(x, {greedy(), k1});
  EXPECT_EQ(r.ids[0], 1);
  EXPECT_EQ(r.ids[1], 1);
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  EXPECT_NEAR(r.logprobs[0], 2.0 - std::log(z), 1e-6);
}

TEST(SampleRowsCpu, StridedViewsAndBadShapes) {
  Tensor wide = make_logits(3, 40, Dist::kPeaked, 5);
  const Tensor x = wide.narrow(1, 3, 30);
  Tensor ids2 = cpu_empty({3, 2}, DType::kI32), lp2 = cpu_empty({3, 2}, DType::kF32);
  Tensor ids = ids2.select(1, 1), lp = lp2.select(1, 0);
  const std::vector<RowSampling> rows(3, greedy());
  sample_rows(x, rows, ids, lp);
  for (int64_t r = 0; r < 3; ++r) {
    const float* row = x.data<float>() + r * x.stride(0);
    EXPECT_EQ(ids.data<int32_t>()[r * 2], std::max_element(row, row + 30) - row);
  }
  EXPECT_THROW(sample_rows(x, std::vector<RowSampling>(2), ids, lp), ShapeError);
  Tensor bad = cpu_empty({3}, DType::kF32);
  EXPECT_THROW(sample_rows(x, rows, bad, lp), ShapeError);
}

// --- the CUDA op against the CPU op ----------------------------------------------------------

TEST(SampleRowsCuda, GreedyIsTheFirstMaximum) {
  MLS_REQUIRE_GPU();
  int64_t differ = 0;
  for (int64_t V : {int64_t{1}, int64_t{2}, int64_t{1000}, kGlmVocab})
    for (int64_t R : {1, 7, 256})
      for (Dist d : {Dist::kPeaked, Dist::kDupMax, Dist::kAllEqual, Dist::kBf16}) {
        if (V * R > 40'000'000) continue;
        const Tensor x = make_logits(R, V, d, static_cast<uint32_t>(V + R));
        differ += compare("greedy V " + std::to_string(V), x, assign({greedy()}, R, 1));
      }
  EXPECT_EQ(differ, 0);  // argmax has no rounding
}

// Masks most of a row with -inf (in place): only ids with id % 7 == r % 7 stay, and the ids
// before a late boundary, so that a row's first maximum may sit in a late slice.
void mask_row(Tensor& x, int64_t r) {
  const int64_t V = x.dim(1);
  float* row = x.data<float>() + r * V;
  for (int64_t i = 0; i < V; ++i)
    if (i % 7 != r % 7 || i < V / 3) row[i] = -INFINITY;
}

// The R rows of x as the first rows of a call of n rows (the rest repeat them).
Tensor widen(const Tensor& x, int64_t n) {
  const int64_t R = x.dim(0), V = x.dim(1);
  Tensor w = cpu_empty({n, V}, DType::kF32);
  for (int64_t r = 0; r < n; ++r)
    std::copy(x.data<float>() + (r % R) * V, x.data<float>() + (r % R + 1) * V,
              w.data<float>() + r * V);
  return w;
}

TEST(SampleRowsCuda, GreedyRowsSplitAcrossCtasMatchOneCtaAndTheCpu) {
  MLS_REQUIRE_GPU();
  const int64_t one_cta = scratch::kSampleTargetCtas;  // a call this wide is never split
  for (int64_t V : {int64_t{1000}, kGlmVocab, kSampleMaxVocab})
    for (int64_t R : {1, 2, 8}) {
      ASSERT_GT(scratch::sample_greedy_splits(R, V), 1) << "R " << R << " V " << V;
      ASSERT_EQ(scratch::sample_greedy_splits(one_cta, V), 1);
      for (Dist d : {Dist::kPeaked, Dist::kDupMax, Dist::kAllEqual, Dist::kBf16, Dist::kFlat}) {
        Tensor x = make_logits(R, V, d, static_cast<uint32_t>(7 * V + R));
        // -inf entries: row 1 mostly masked; the last row of 8 has its maximum at its last id.
        if (R > 1) mask_row(x, 1);
        if (R > 2) {
          float* last = x.data<float>() + (R - 1) * V;
          last[V - 1] = *std::max_element(last, last + V) + 1.0f;
        }
        const std::string what = "split greedy V " + std::to_string(V) + " R " + std::to_string(R);
        const auto rows = assign({greedy()}, R, 13);
        EXPECT_EQ(compare(what, x, rows), 0);
        // Bitwise the one-CTA path's id: the same rows in a call too wide to split.
        const Result split = run_gpu(x, rows),
                     wide = run_gpu(widen(x, one_cta), assign({greedy()}, one_cta, 13));
        for (int64_t r = 0; r < R; ++r) {
          EXPECT_EQ(split.ids[r], wide.ids[r]) << what << " row " << r;
          EXPECT_NEAR(split.logprobs[r], wide.logprobs[r], 1e-5) << what << " row " << r;
        }
        // Deterministic: a second run gives the same bits.
        const Result again = run_gpu(x, rows);
        for (int64_t r = 0; r < R; ++r) {
          EXPECT_EQ(again.ids[r], split.ids[r]);
          EXPECT_EQ(again.logprobs[r], split.logprobs[r]);
        }
      }
    }
}

TEST(SampleRowsCuda, SplitGreedyRowsBesideSampledRowsAndMasks) {
  MLS_REQUIRE_GPU();
  // Greedy rows on the split path, sampled rows on one CTA each, in one call; then the same
  // rows behind allowed-token masks (the engine's structured outputs).
  const std::vector<RowSampling> configs{greedy(), sampled(1.0), greedy(), sampled(0.8, 40, 0.9),
                                         sampled(1.0, 0, 0.95)};
  int64_t differ = 0;
  for (int64_t V : {int64_t{1000}, kGlmVocab})
    for (int64_t R : {2, 8}) {
      ASSERT_GT(scratch::sample_greedy_splits(R, V), 1);
      Tensor x = make_logits(R, V, Dist::kDupMax, static_cast<uint32_t>(V + 3 * R));
      const std::string what = "mixed V " + std::to_string(V) + " R " + std::to_string(R);
      differ += compare(what, x, assign(configs, R, 14));
      apply_token_mask(x, make_mask(R, V));
      differ += compare(what + " masked", x, assign(configs, R, 15));
    }
  std::printf("split greedy beside sampled rows: %lld rows differ\n",
              static_cast<long long>(differ));
  EXPECT_LE(differ, 1);  // greedy rows never (compare fails them); a sampled row only as above
}

TEST(SampleRowsCuda, TemperatureOnlyDrawsInIdOrder) {
  MLS_REQUIRE_GPU();
  const std::vector<RowSampling> configs{sampled(0.5), sampled(1.0), sampled(1.3), sampled(1e-3)};
  int64_t differ = 0;
  for (Dist d : {Dist::kPeaked, Dist::kFlat, Dist::kBf16, Dist::kAllEqual}) {
    differ +=
        compare("temperature V 154880", make_logits(64, kGlmVocab, d, 11), assign(configs, 64, 2));
    differ += compare("temperature V 33", make_logits(200, 33, d, 12), assign(configs, 200, 3));
  }
  std::printf("temperature only: %lld rows differ\n", static_cast<long long>(differ));
  EXPECT_LE(differ, 1);
}

TEST(SampleRowsCuda, TopKTopPMinPAndCombinations) {
  MLS_REQUIRE_GPU();
  const std::vector<RowSampling> configs{sampled(1.0, 1),
                                         sampled(1.0, 2),
                                         sampled(0.7, 40),
                                         sampled(1.0, 1000),
                                         sampled(1.0, 0, 0.5),
                                         sampled(0.8, 0, 0.9),
                                         sampled(1.0, 0, 0.95),
                                         sampled(1.2, 0, 0.999),
                                         sampled(1.0, 0, 1.0, 0.01),
                                         sampled(1.0, 0, 1.0, 0.1),
                                         sampled(0.6, 0, 1.0, 0.5),
                                         sampled(0.8, 50, 0.9),
                                         sampled(1.2, 0, 0.8, 0.05),
                                         sampled(1.0, 100, 1.0, 0.2),
                                         sampled(1.0, 5000, 0.95),
                                         sampled(1.0, 20, 0.7, 0.02)};
  int64_t differ = 0;
  for (Dist d : {Dist::kPeaked, Dist::kBf16, Dist::kDupMax}) {
    differ +=
        compare("filters V 154880", make_logits(256, kGlmVocab, d, 21), assign(configs, 256, 4));
    differ += compare("filters V 1000", make_logits(64, 1000, d, 22), assign(configs, 64, 5));
    differ += compare("filters V 2", make_logits(32, 2, d, 23), assign(configs, 32, 6));
  }
  std::printf("top_k/top_p/min_p: %lld rows differ\n", static_cast<long long>(differ));
  EXPECT_LE(differ, 1);
}

TEST(SampleRowsCuda, LargeCandidateSetsTakeTheRadixSelect) {
  MLS_REQUIRE_GPU();
  // Flat rows put ~10^5 tokens in a 0.9 nucleus and 20000 in a top_k; equal and clustered rows
  // make the crossing bucket too large at the first, second or every level.
  const std::vector<RowSampling> configs{sampled(1.0, 0, 0.9),      sampled(1.0, 20000),
                                         sampled(1.0, 20000, 0.95), sampled(1.0, 0, 0.5),
                                         sampled(1.0, 9000, 0.3),   sampled(0.9, 0, 0.99, 0.001),
                                         sampled(1.0, 150000),      sampled(2.0, 30000, 0.999)};
  int64_t differ = 0;
  for (Dist d : {Dist::kFlat, Dist::kAllEqual, Dist::kClustered4, Dist::kClustered6, Dist::kBf16}) {
    differ +=
        compare("large sets V 154880", make_logits(48, kGlmVocab, d, 31), assign(configs, 48, 7));
  }
  std::printf("large candidate sets: %lld rows differ\n", static_cast<long long>(differ));
  EXPECT_LE(differ, 1);
}

TEST(SampleRowsCuda, StridedViewsChunkedLaunchesAndDeterminism) {
  MLS_REQUIRE_GPU();
  const int64_t R = 300, V = 5000;  // two launches of at most 256 rows
  const Tensor host = make_logits(R, V + 5, Dist::kPeaked, 41);
  const auto rows =
      assign({greedy(), sampled(1.0), sampled(0.8, 30, 0.9), sampled(1.0, 0, 0.95)}, R, 8);
  const Tensor dev_wide = test::to_gpu(host, DType::kF32);
  const Tensor dev = dev_wide.narrow(1, 2, V);
  Tensor ids2 = gpu_empty({R, 2}, DType::kI32), lp2 = gpu_empty({R, 3}, DType::kF32);
  Tensor ids = ids2.select(1, 1), lp = lp2.select(1, 2);
  sample_rows(dev, rows, ids, lp);
  const Tensor got_ids = test::to_cpu(ids2), got_lp = test::to_cpu(lp2);
  // The reference: the same view on the host.
  const Result want = run_cpu(host.narrow(1, 2, V), rows);
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(got_ids.data<int32_t>()[r * 2 + 1], want.ids[r]) << "row " << r;
    EXPECT_NEAR(got_lp.data<float>()[r * 3 + 2], want.logprobs[r], 1e-5) << "row " << r;
  }
  // Bitwise the same on a second run.
  Tensor again_ids = gpu_empty({R}, DType::kI32), again_lp = gpu_empty({R}, DType::kF32);
  sample_rows(dev, rows, again_ids, again_lp);
  const Tensor a_ids = test::to_cpu(again_ids), a_lp = test::to_cpu(again_lp);
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(a_ids.data<int32_t>()[r], got_ids.data<int32_t>()[r * 2 + 1]);
    EXPECT_EQ(a_lp.data<float>()[r], got_lp.data<float>()[r * 3 + 2]);
  }
}

TEST(SampleRowsCuda, RejectsBadShapesAndHugeVocabularies) {
  MLS_REQUIRE_GPU();
  const Tensor x = gpu_empty({4, 10}, DType::kF32);
  Tensor ids = gpu_empty({4}, DType::kI32), lp = gpu_empty({4}, DType::kF32);
  const auto rows = assign({greedy()}, 4, 9);
  EXPECT_THROW(sample_rows(x, assign({greedy()}, 3, 9), ids, lp), ShapeError);
  Tensor ids_f32 = gpu_empty({4}, DType::kF32);
  EXPECT_THROW(sample_rows(x, rows, ids_f32, lp), ShapeError);
  const Tensor host_x = cpu_empty({4, 10}, DType::kF32);
  EXPECT_THROW(sample_rows(host_x, rows, ids, lp), ShapeError);
  const Tensor huge = gpu_empty({1, kSampleMaxVocab + 1}, DType::kF32);
  Tensor id1 = gpu_empty({1}, DType::kI32), lp1 = gpu_empty({1}, DType::kF32);
  EXPECT_THROW(sample_rows(huge, std::vector<RowSampling>(1), id1, lp1), Unsupported);
}

// --- allowed-token masks (structured outputs) ------------------------------------------------

// Row r allows every id with (id * (r + 3)) % 7 < 2, and row 0 every id (all-ones words).
Tensor make_mask(int64_t R, int64_t V) {
  const int64_t W = (V + 31) / 32;
  Tensor m = cpu_empty({R, W}, DType::kI32);
  auto* words = reinterpret_cast<uint32_t*>(m.data<int32_t>());
  std::fill(words, words + R * W, 0u);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < V; ++t)
      if (r == 0 || (t * (r + 3)) % 7 < 2) words[r * W + t / 32] |= 1u << (t % 32);
  for (int64_t w = 0; w < W && R > 0; ++w) words[w] = ~0u;  // row 0: padding bits set too
  return m;
}

TEST(TokenMaskCpu, DisallowedLogitsBecomeMinusInfinity) {
  const int64_t R = 5, V = 77;
  Tensor x = make_logits(R, V, Dist::kPeaked, 51);
  const Tensor orig = make_logits(R, V, Dist::kPeaked, 51);
  const Tensor m = make_mask(R, V);
  apply_token_mask(x, m);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < V; ++t) {
      const bool allowed = r == 0 || (t * (r + 3)) % 7 < 2;
      const float got = x.data<float>()[r * V + t];
      if (allowed)
        EXPECT_EQ(got, orig.data<float>()[r * V + t]) << r << " " << t;
      else
        EXPECT_EQ(got, -INFINITY) << r << " " << t;
    }
  // A masked greedy draw takes the best allowed id.
  const Result drawn = run_cpu(x, assign({greedy()}, R, 1));
  for (int64_t r = 1; r < R; ++r) EXPECT_LT((drawn.ids[r] * (r + 3)) % 7, 2);
  const Tensor bad = cpu_empty({R, 2}, DType::kI32);
  EXPECT_THROW(apply_token_mask(x, bad), ShapeError);
}

TEST(TokenMaskCuda, SameAsTheCpuOpThenSampled) {
  MLS_REQUIRE_GPU();
  for (int64_t V : {int64_t{33}, int64_t{1000}, kGlmVocab}) {
    const int64_t R = 9;
    Tensor host = make_logits(R, V, Dist::kPeaked, 61);
    const Tensor mask = make_mask(R, V);
    Tensor dev = test::to_gpu(host, DType::kF32);
    const Tensor dev_mask = test::to_gpu(mask, DType::kI32);
    apply_token_mask(dev, dev_mask);
    apply_token_mask(host, mask);
    const Tensor got = test::to_cpu(dev);
    for (int64_t i = 0; i < R * V; ++i)
      ASSERT_EQ(got.data<float>()[i], host.data<float>()[i]) << "V " << V << " element " << i;
    const auto rows = assign({greedy(), sampled(1.0), sampled(0.8, 40, 0.9)}, R, 10);
    EXPECT_EQ(compare("masked V " + std::to_string(V), host, rows), 0);
  }
}

}  // namespace
}  // namespace mls::ops
