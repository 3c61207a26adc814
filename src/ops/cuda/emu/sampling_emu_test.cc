// The sampling kernels (sampling_kernels.cu) run by the CPU emulator against the CPU op's draw
// (ops::cpu::sample_row, the definition in ops/sampling.h): greedy rows (whole, and split across
// CTAs in calls of few rows), temperature, top_k, top_p, min_p and their combinations, on peaked,
// flat and bf16-valued rows (many exact ties), with candidate sets small enough for the sorted
// path and large enough for the radix select and its tie pass; and the token mask.
//
// Tokens must be equal. The GPU test allows a rare difference where the two libms round an exp
// differently; here the emulated kernel calls the host's exp, as the CPU op does, so none is
// allowed. Logprobs: the kernel sums exp in float terms with double accumulation, the host in
// double: within 1e-5 absolute (as ops_cuda_sampling_test).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/sample_row_params.h"
#include "ops/cuda/sampling_kernels.h"
#include "ops/sampling.h"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

enum class Shape { kPeaked, kFlat, kBf16Ties };

std::vector<float> logits_row(int V, Shape shape, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, shape == Shape::kPeaked ? 4.0f : 0.3f);
  std::vector<float> row(V);
  for (auto& x : row) {
    x = d(g);
    if (shape == Shape::kBf16Ties) x = __bfloat162float(__float2bfloat16(x));
  }
  return row;
}

// Samples R rows of `logits` with `params` on the emulated kernel and checks each against the
// CPU op.
void check(int V, const std::vector<float>& logits, const std::vector<RowSampling>& params,
           const std::string& what) {
  const int R = static_cast<int>(params.size());
  std::vector<int32_t> ids(R, -1);
  std::vector<float> lps(R, NAN);
  std::vector<float> partials(static_cast<size_t>(scratch::sample_scratch_floats(R, V)), NAN);
  SampleArgs a{};
  a.logits = logits.data();
  a.stride = V;
  a.V = V;
  a.R = R;
  a.ids = ids.data();
  a.ids_stride = 1;
  a.logprobs = lps.data();
  a.lp_stride = 1;
  a.splits = static_cast<int>(scratch::sample_greedy_splits(R, V));
  a.partials = partials.empty() ? nullptr : partials.data();
  for (int r = 0; r < R; ++r) a.rows[r] = sample_row_params(params[r], V);
  ASSERT_EQ(launch_sample_rows(a, nullptr), cudaSuccess);
  cpu::SampleScratch s;
  for (int r = 0; r < R; ++r) {
    const std::span<const float> row(logits.data() + static_cast<size_t>(r) * V, V);
    const int32_t want = cpu::sample_row(row, params[r], s);
    EXPECT_EQ(ids[r], want) << what << " row " << r;
    EXPECT_NEAR(lps[r], static_cast<double>(row[want]) - cpu::log_sum_exp(row), 1e-5)
        << what << " row " << r;
  }
}

// One row per kind of sampling, on each shape of logits.
TEST(EmulatedSampling, EveryKindOfRowOnEveryShape) {
  constexpr int V = 3000;
  std::mt19937 g(17);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<RowSampling> kinds = {
      {.temperature = 0.0},                 // greedy
      {.temperature = 0.8},                 // temperature only
      {.temperature = 1.0, .top_k = 40},    // top_k
      {.temperature = 1.2, .top_p = 0.9},   // top_p
      {.temperature = 0.7, .min_p = 0.05},  // min_p
      {.temperature = 1.0, .top_k = 200, .top_p = 0.95, .min_p = 0.01},
      {.temperature = 1.5, .top_k = V + 5},  // top_k past V: off
  };
  for (const Shape shape : {Shape::kPeaked, Shape::kFlat, Shape::kBf16Ties}) {
    std::vector<float> logits;
    std::vector<RowSampling> params;
    for (const RowSampling& k : kinds) {
      const std::vector<float> row = logits_row(V, shape, g);
      logits.insert(logits.end(), row.begin(), row.end());
      RowSampling p = k;
      p.uniform = std::ldexp(std::floor(u(g) * 0x1p53), -53);
      params.push_back(p);
    }
    check(V, logits, params, "shape " + std::to_string(static_cast<int>(shape)));
  }
}

// Flat rows of a large vocabulary: thousands of candidates (the radix select), with exact ties at
// the cut (bf16 values).
TEST(EmulatedSampling, LargeCandidateSetsTakeTheRadixSelect) {
  constexpr int V = 40000;
  std::mt19937 g(23);
  std::vector<float> logits;
  std::vector<RowSampling> params;
  const RowSampling kinds[] = {{.temperature = 1.0, .top_p = 0.7, .uniform = 0.3},
                               {.temperature = 1.0, .top_k = 5000, .uniform = 0.91},
                               {.temperature = 2.0, .min_p = 0.2, .uniform = 0.55}};
  for (const RowSampling& k : kinds) {
    const std::vector<float> row = logits_row(V, Shape::kBf16Ties, g);
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(k);
  }
  check(V, logits, params, "large");
}

// A call of two greedy rows at a large vocabulary splits each row across CTAs (partials merged):
// the first maximum, ties included.
TEST(EmulatedSampling, GreedyRowsSplitAcrossCtas) {
  constexpr int V = 150000;
  ASSERT_GT(scratch::sample_greedy_splits(2, V), 1);
  std::mt19937 g(29);
  std::vector<float> logits = logits_row(V, Shape::kBf16Ties, g);
  std::vector<float> second = logits_row(V, Shape::kPeaked, g);
  second[V - 1] = second[7] = 1000.0f;  // a tie for the maximum: the first one wins
  logits.insert(logits.end(), second.begin(), second.end());
  check(V, logits, {RowSampling{}, RowSampling{}}, "split greedy");
}

// Equal logits make equal masses (2^45 each): draws that land exactly on a candidate's boundary
// (uniform j / V) and a top_p whose bound is exactly a sum of masses (16 / 64), where an
// off-by-one comparison picks another token.
TEST(EmulatedSampling, BoundariesHitExactly) {
  constexpr int V = 64;
  const std::vector<RowSampling> params = {
      {.temperature = 1.0, .uniform = 5.0 / V},
      {.temperature = 1.0, .uniform = 63.0 / V},
      {.temperature = 1.0, .top_p = 16.0 / V, .uniform = 0.999},
      {.temperature = 1.0, .top_k = 8, .uniform = 0.5},
  };
  const std::vector<float> logits(params.size() * V, 0.0f);
  check(V, logits, params, "boundaries");
}

TEST(EmulatedSampling, TokenMaskSetsMaskedLogitsToMinusInfinity) {
  constexpr int V = 100, R = 3, W = (V + 31) / 32;
  std::vector<float> logits(R * V, 1.0f);
  std::vector<uint32_t> mask(R * W, 0xffffffffu);
  mask[1 * W + 0] = 0x0000ff00u;  // row 1: tokens 8..15 of the first word, and the rest
  mask[2 * W + 3] = 0x1u;         // row 2: of the last word only token 96
  ASSERT_EQ(launch_apply_token_mask(logits.data(), V, V, R, mask.data(), nullptr), cudaSuccess);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < V; ++t) {
      const bool allowed = mask[r * W + t / 32] >> (t % 32) & 1;
      EXPECT_EQ(logits[r * V + t], allowed ? 1.0f : -INFINITY) << "row " << r << " token " << t;
    }
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
