// What the prefill experts' promotion intervals do to their error, on the CPU, under a model of
// Hopper's FP8 MMAs. The case is ops_cuda_moe_test's tensor-core one (12 experts, hidden 400,
// intermediate 208, top-3, 700 tokens: 2,100 rows), run as the kernels compute it: per 128-K
// block, sub-steps of P K summed by chained k32 MMAs into a fragment, promoted to the fp32
// accumulator scaled by the row's and block's scales; gate·up's SwiGLU rounded to bf16 and
// quantised to e4m3 for down; down rounded to bf16. The reference is the test's emulation
// (float64 sums, the same quantisations). It prints the path's rel-L2 for each (gate·up, down)
// pair of intervals.
//
// Models of one k32 MMA (--model):
//   exact   its sum, and the fragment's, in fp32: the floor (the skinny kernel measured the same);
//   rz      its exact sum plus the fragment, truncated toward zero to F bits after the leading one
//           (ops/cuda/fp8_sum_model.h, the emulator's model too);
//   align   the products and the fragment aligned to the largest exponent, each truncated to F
//           bits below it, then summed;
//   max     the products and the fragment summed exactly, the sum truncated toward zero to F bits
//           after the leading one of the largest of them: what bench/fp8_accumulator_probe shows
//           Hopper doing at F = 13 (bench/RESULTS.md "Session 27"). --group G adds the products
//           G at a time, truncating after each group (32: once an MMA).
// On the GPU (ops_cuda_moe_test, both projections at one interval) the path measured 3.15e-3,
// 4.02e-3 and 4.92e-3 rel-L2 at 32, 64 and 128 K (bench/RESULTS.md, sessions 11 and 20). rz
// brackets them with F = 13 and 14 and grows with the interval as they do (bench/RESULTS.md
// "Session 26").
//
// --compensate C scales each promotion by 1 + C · the MMAs it sums: rz's truncation removes
// about 2^-(F+2) / ln 2 of a sum on average, a bias this takes back (bench/fp8_accumulator_probe
// tells whether the device truncates so).
//
// --width H,I takes other widths (GLM-5's: 6144,2048) on three experts, each token routed to
// all three.
//
//   fp8_promotion_model [--model exact|rz|align|max] [--bits F] [--group G] [--compensate C]
//                       [--tokens N] [--width H,I] [--pairs 32/32,32/128]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/block_fp8_reference.h"
#include "ops/cuda/fp8_sum_model.h"
#include "ops/cuda/test_util.h"

namespace {

using mls::Tensor;
using mls::ops::cuda::kHopperFp8SumBits;
using mls::ops::cuda::truncated_fp8_sum;
using mls::ops::cuda::kernels::test::e4m3;
using mls::ops::cuda::kernels::test::quantise_act_row;
namespace t = mls::ops::test;

enum class Model { kExact, kRz, kAlign, kMax };

struct Mma {
  Model model;
  int bits;
  double compensate;  // each promotion scaled by 1 + compensate · the MMAs it sums
  int group = 32;

  static double truncate_to(double v, int exp) {
    const double unit = std::ldexp(1.0, exp);
    return std::trunc(v / unit) * unit;
  }
  static int exponent(double v) {
    int e = 0;
    std::frexp(v, &e);
    return e;
  }
  // The fragment after one k32 MMA over products p (exact in double) into `frag`.
  float operator()(const double* p, int n, float frag, bool accumulate) const {
    const double c = accumulate ? frag : 0.0;
    if (model == Model::kAlign) {
      int top = INT32_MIN;
      if (c != 0) top = exponent(c);
      for (int i = 0; i < n; ++i)
        if (p[i] != 0) top = std::max(top, exponent(p[i]));
      if (top == INT32_MIN) return 0.0f;
      double s = truncate_to(c, top - bits);
      for (int i = 0; i < n; ++i) s += truncate_to(p[i], top - bits);
      return static_cast<float>(s);
    }
    if (model == Model::kMax) {
      double acc = c;
      for (int g0 = 0; g0 < n; g0 += group) {
        int top = acc != 0 ? exponent(acc) : INT32_MIN;
        double t = acc;
        for (int i = g0; i < std::min(n, g0 + group); ++i) {
          t += p[i];
          if (p[i] != 0) top = std::max(top, exponent(p[i]));
        }
        acc = top == INT32_MIN ? 0.0 : truncate_to(t, top - 1 - bits);
      }
      return static_cast<float>(acc);
    }
    double s = c;
    for (int i = 0; i < n; ++i) s += p[i];
    return static_cast<float>(model == Model::kExact ? s : truncated_fp8_sum(s, bits));
  }
};

struct Experts {
  std::vector<t::Fp8Weight> gate, up, down;
};

// Row n of w against a quantised row (xq, xs), promoted every `promote` K.
float kernel_dot(const Mma& mma, const uint8_t* xq, const float* xs, const t::Fp8Weight& w,
                 int64_t n, int promote) {
  const int64_t K = w.q.dim(1), KB = (K + 127) / 128;
  const uint8_t* wq = w.q.data<uint8_t>() + n * K;
  const float* ws = w.scale.data<float>() + (n / 128) * KB;
  float acc = 0.0f;
  double p[32];
  for (int64_t kb = 0; kb < KB; ++kb) {
    const int64_t block_end = std::min(K, kb * 128 + 128);
    const float scale = xs[kb] * ws[kb];
    for (int64_t k0 = kb * 128; k0 < block_end; k0 += promote) {
      float frag = 0.0f;
      int mmas = 0;
      for (int64_t c0 = k0; c0 < std::min(block_end, k0 + promote); c0 += 32, ++mmas) {
        const int n32 = static_cast<int>(std::min<int64_t>(32, block_end - c0));
        for (int i = 0; i < n32; ++i) p[i] = e4m3(xq[c0 + i]) * e4m3(wq[c0 + i]);
        frag = mma(p, n32, frag, c0 != k0);
      }
      acc = std::fma(frag, static_cast<float>(scale * (1.0 + mma.compensate * mmas)), acc);
    }
  }
  return acc;
}

float round_bf16(float v) {
  return mls::bf16_to_f32(mls::f32_to_bf16(v));
}

double path_error(const Experts& ex, const Tensor& x, const std::vector<int32_t>& ids, int top_k,
                  const Mma& mma, int promote_gu, int promote_down) {
  const int64_t T = x.dim(0), H = x.dim(1), I = ex.gate[0].q.dim(0);
  std::vector<uint8_t> xq(H), hq(I), want_hq(I);
  std::vector<float> xs((H + 127) / 128), hs((I + 127) / 128), want_hs(hs.size());
  std::vector<float> h(I), want_h(I), xe(H);
  double num = 0, den = 0;
  for (int64_t r = 0; r < T; ++r) {
    quantise_act_row(x.data<float>() + r * H, H, xq.data(), xs.data());
    for (int64_t k = 0; k < H; ++k) xe[k] = static_cast<float>(e4m3(xq[k])) * xs[k / 128];
    for (int j = 0; j < top_k; ++j) {
      const auto e = static_cast<size_t>(ids[r * top_k + j]);
      for (int64_t n = 0; n < I; ++n) {
        double gs = 0, us = 0;
        for (int64_t k = 0; k < H; ++k) {
          gs += static_cast<double>(xe[k]) * ex.gate[e].deq.data<float>()[n * H + k];
          us += static_cast<double>(xe[k]) * ex.up[e].deq.data<float>()[n * H + k];
        }
        want_h[n] = round_bf16(static_cast<float>(gs / (1.0 + std::exp(-gs)) * us));
        const float g = kernel_dot(mma, xq.data(), xs.data(), ex.gate[e], n, promote_gu);
        const float u = kernel_dot(mma, xq.data(), xs.data(), ex.up[e], n, promote_gu);
        h[n] = round_bf16(g / (1.0f + std::exp(-g)) * u);
      }
      quantise_act_row(want_h.data(), I, want_hq.data(), want_hs.data());
      quantise_act_row(h.data(), I, hq.data(), hs.data());
      for (int64_t n = 0; n < H; ++n) {
        double want = 0;
        for (int64_t k = 0; k < I; ++k)
          want += e4m3(want_hq[k]) * want_hs[k / 128] * ex.down[e].deq.data<float>()[n * I + k];
        const float wantf = static_cast<float>(want);
        const double d =
            round_bf16(kernel_dot(mma, hq.data(), hs.data(), ex.down[e], n, promote_down)) - wantf;
        num += d * d;
        den += static_cast<double>(wantf) * wantf;
      }
    }
  }
  return std::sqrt(num / den);
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--model exact|rz|align|max] [--bits F] [--group G] [--compensate C] "
               "[--tokens N] [--width HIDDEN,INTERMEDIATE] [--pairs GU/DOWN,...]  (intervals 32, "
               "64 or 128)\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Mma mma{Model::kRz, kHopperFp8SumBits, 0.0};
  int64_t tokens = 700;
  std::optional<std::pair<int64_t, int64_t>> width;  // (hidden, intermediate)
  std::vector<std::pair<int, int>> pairs = {{32, 32}, {64, 64}, {128, 128}, {32, 128}};
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return usage(argv[0]);
    const std::string flag = argv[i], value = argv[++i];
    if (flag == "--model" && value == "exact") {
      mma.model = Model::kExact;
    } else if (flag == "--model" && value == "rz") {
      mma.model = Model::kRz;
    } else if (flag == "--model" && value == "align") {
      mma.model = Model::kAlign;
    } else if (flag == "--model" && value == "max") {
      mma.model = Model::kMax;
    } else if (flag == "--bits") {
      mma.bits = std::atoi(value.c_str());
      if (mma.bits < 4 || mma.bits > 23) return usage(argv[0]);
    } else if (flag == "--group") {
      mma.group = std::atoi(value.c_str());
      if (mma.group < 1 || mma.group > 32) return usage(argv[0]);
    } else if (flag == "--compensate") {
      mma.compensate = std::atof(value.c_str());
    } else if (flag == "--width") {
      char* end = nullptr;
      const long h = std::strtol(value.c_str(), &end, 10);
      if (*end != ',') return usage(argv[0]);
      const long i_w = std::strtol(end + 1, &end, 10);
      if (*end != '\0' || h < 16 || i_w < 16) return usage(argv[0]);
      width = std::pair<int64_t, int64_t>{h, i_w};
    } else if (flag == "--tokens") {
      tokens = std::atoll(value.c_str());
      if (tokens < 6) return usage(argv[0]);
    } else if (flag == "--pairs") {
      pairs.clear();
      for (const char* p = value.c_str(); *p;) {
        char* end = nullptr;
        const long gu = std::strtol(p, &end, 10);
        if (*end != '/') return usage(argv[0]);
        const long down = std::strtol(end + 1, &end, 10);
        for (const long v : {gu, down})
          if (v != 32 && v != 64 && v != 128) return usage(argv[0]);
        pairs.emplace_back(static_cast<int>(gu), static_cast<int>(down));
        if (*end != ',' && *end != '\0') return usage(argv[0]);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      return usage(argv[0]);
    }
  }

  // ops_cuda_moe_test's check_grouped_against_emulation: its experts, tokens and routing, or
  // --width's: three experts, each token routed to all three.
  const int64_t E = width ? 3 : 12, H = width ? width->first : 400, I = width ? width->second : 208;
  constexpr int top_k = 3;
  Experts ex;
  uint32_t seed = 500;
  for (int64_t e = 0; e < E; ++e) {
    ex.gate.push_back(t::make_fp8_weight(I, H, seed++));
    ex.up.push_back(t::make_fp8_weight(I, H, seed++));
    ex.down.push_back(t::make_fp8_weight(H, I, seed++));
  }
  std::vector<int32_t> ids(tokens * top_k);
  std::mt19937 g(9);
  for (int64_t r = 0; r < tokens; ++r) {
    ids[r * top_k] = 0;
    ids[r * top_k + 1] = width ? 1 : 1 + static_cast<int32_t>(g() % 5);
    ids[r * top_k + 2] = width ? 2 : 6 + static_cast<int32_t>(g() % 4);
  }
  if (!width) ids[5 * top_k + 2] = 10;
  const Tensor x = t::round_bf16(t::random({tokens, H}, 77));

  std::vector<std::future<double>> runs;
  for (const auto& [gu, down] : pairs)
    runs.push_back(std::async(std::launch::async, [&, gu, down] {
      return path_error(ex, x, ids, top_k, mma, gu, down);
    }));
  const char* names[] = {"exact", "rz", "align", "max"};
  for (size_t i = 0; i < pairs.size(); ++i)
    std::printf(
        "model %s, F %d, group %d, compensation %.2g, %ld tokens: gate·up every %3d K, down "
        "every %3d K: rel-L2 %.3e\n",
        names[static_cast<int>(mma.model)], mma.bits, mma.group, mma.compensate,
        static_cast<long>(tokens), pairs[i].first, pairs[i].second, runs[i].get());
  return 0;
}
