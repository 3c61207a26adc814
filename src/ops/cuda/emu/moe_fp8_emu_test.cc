// The grouped block-FP8 experts (moe_fp8_kernels.h: the skinny kernel of decode, its active
// expert list, and the tensor-core kernel of prefill, moe_fp8_tc_kernels.cu) run by the CPU
// emulator against the launchers' contract evaluated in float64: the walk over experts with no
// rows, one row and several tiles, partial weight tiles and K blocks, the skinny kernel's passes
// over an expert's rows, the tensor-core kernel's producer ring and its barriers and its
// promotions at every interval the launcher offers, the gated (SwiGLU) and plain epilogues. This
// checks the kernels' logic on any machine; their numerics on the device (FP8 MMAs keep fewer bits
// than the emulator's) are ops_cuda_moe_test's.
//
// Tolerance: the emulated MMAs add exactly; the kernels' promotions add in fp32 and their output
// is rounded to bf16 (2^-9 relative per element, about 1.1e-3 relative L2), so the FP8 linear's
// tolerance (4e-3 relative L2, ops_cuda_moe_test) holds with room; a wrong expert, row, scale or
// a promotion lost (one sub-step of a K block: an eighth of it or more) would not.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ops/cuda/emu/block_fp8_reference.h"
#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/moe_fp8_kernels.h"

namespace mls::ops::cuda::kernels {
namespace {

using test::block_fp8_dot;
using test::random_e4m3;
using test::random_scales;

constexpr double kFp8Tol = 4e-3;

struct Case {
  std::vector<int32_t> rows_per_expert;
  int64_t N = 200, K = 272;  // a partial weight tile and a partial K block
  bool gated = false;
  bool skinny = false;  // the skinny kernel (with `passes`), else the tensor-core one
  int passes = 0;
  int promote_k = 0;
  int sms = 0;  // the emulated device's multiprocessors: 0, an H200's 132
  uint32_t seed = 1;
  uint32_t schedule_seed = 0;
};

struct Weights {
  std::vector<uint8_t> w;  // e4m3 [N, K]
  std::vector<float> s;    // [ceil(N / 128), sw_ld]
};

struct Outcome {
  std::vector<__nv_bfloat16> y;
  double worst = 0.0;
};

Outcome run(const Case& c) {
  std::mt19937 g(c.seed);
  const int E = static_cast<int>(c.rows_per_expert.size());
  std::vector<int32_t> offsets(E + 1, 0);
  for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + c.rows_per_expert[e];
  const int64_t rows = offsets[E], KB = (c.K + 127) / 128, NB = (c.N + 127) / 128;
  const std::vector<uint8_t> xq = random_e4m3(rows * c.K, g);
  const std::vector<float> xs = random_scales(KB * rows, g);  // x_scale[kb · rows + r]
  std::vector<Weights> w1(E), w2(E);
  std::vector<uint64_t> w1t(E), s1t(E), w2t(E), s2t(E);
  for (int e = 0; e < E; ++e) {
    for (auto* w : {&w1[e], &w2[e]}) {
      w->w = random_e4m3(c.N * c.K, g);
      w->s = random_scales(NB * KB, g);
    }
    w1t[e] = reinterpret_cast<uint64_t>(w1[e].w.data());
    s1t[e] = reinterpret_cast<uint64_t>(w1[e].s.data());
    w2t[e] = reinterpret_cast<uint64_t>(w2[e].w.data());
    s2t[e] = reinterpret_cast<uint64_t>(w2[e].s.data());
  }
  Outcome out;
  out.y.assign(rows * c.N, __float2bfloat16(NAN));
  MoeFp8GemmArgs a{};
  a.w1 = w1t.data();
  a.s1 = s1t.data();
  a.w2 = c.gated ? w2t.data() : nullptr;
  a.s2 = c.gated ? s2t.data() : nullptr;
  a.sw_ld = KB;
  a.xq = xq.data();
  a.ldq = c.K;
  a.x_scale = xs.data();
  a.x_scale_ld = rows;
  a.offsets = offsets.data();
  a.experts = E;
  a.rows = rows;
  a.promote_k = c.promote_k;
  a.y = out.y.data();
  a.ldy = c.N;
  a.N = c.N;
  a.K = c.K;
  a.gated = c.gated;
  std::vector<int32_t> active(E + 1, -1);
  a.active = active.data();
  a.max_active = static_cast<int>(std::min<int64_t>(E, rows));
  a.passes = c.passes;
  emu::set_schedule_seed(c.schedule_seed);
  emu::set_device_sms(c.sms);
  if (c.skinny) {
    EXPECT_EQ(launch_moe_active_experts(offsets.data(), E, active.data(), nullptr), cudaSuccess);
    int n = 0;
    for (int e = 0; e < E; ++e) {
      if (offsets[e + 1] > offsets[e]) {
        EXPECT_EQ(active[1 + n++], e);
      }
    }
    EXPECT_EQ(active[0], n);
    EXPECT_EQ(launch_moe_fp8_gemm(a, nullptr), cudaSuccess);
  } else {
    EXPECT_EQ(launch_moe_fp8_gemm_tc(a, nullptr), cudaSuccess);
  }
  emu::set_schedule_seed(0);
  emu::set_device_sms(0);

  // The contract (block_fp8_reference.h), SiLU(gate) · up when gated.
  const auto dot = [&](const Weights& w, int64_t r, int64_t n) {
    return block_fp8_dot(&xq[r * c.K], &xs[r], rows, &w.w[n * c.K], &w.s[(n / 128) * KB], c.K);
  };
  for (int e = 0; e < E; ++e)
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      double e2 = 0.0, r2 = 0.0;
      for (int64_t n = 0; n < c.N; ++n) {
        double want = dot(w1[e], r, n);
        if (c.gated) want = want / (1.0 + std::exp(-want)) * dot(w2[e], r, n);
        const double got = __bfloat162float(out.y[r * c.N + n]);
        e2 += (got - want) * (got - want);
        r2 += want * want;
      }
      const double rel = std::sqrt(e2 / r2);
      EXPECT_LE(rel, kFp8Tol) << "expert " << e << " row " << r;
      out.worst = std::max(out.worst, std::isnan(rel) ? INFINITY : rel);
    }
  return out;
}

// Experts with no rows, one row, a partial tile, and several tiles with a partial last one.
const std::vector<int32_t> kRows = {150, 0, 1, 60, 0, 257};

TEST(EmulatedMoeFp8, PlainProjection) {
  Case c;
  c.rows_per_expert = kRows;
  const Outcome r = run(c);
  std::printf("plain, promotion every 32 K: worst rel_l2 %.2e\n", r.worst);
}

TEST(EmulatedMoeFp8, GatedProjection) {
  Case c;
  c.rows_per_expert = kRows;
  c.gated = true;
  const Outcome r = run(c);
  std::printf("gated, promotion every 32 K: worst rel_l2 %.2e\n", r.worst);
}

// The launcher's other promotion intervals: two and four MMAs a sub-step.
TEST(EmulatedMoeFp8, EveryPromotionInterval) {
  for (const int promote_k : {64, 128})
    for (const bool gated : {false, true}) {
      Case c;
      c.rows_per_expert = {130, 3, 0, 70};
      c.K = 400;  // four K blocks, the last partial: whole loop iterations and a tail
      c.gated = gated;
      c.promote_k = promote_k;
      const Outcome r = run(c);
      std::printf("%s, promotion every %d K: worst rel_l2 %.2e\n", gated ? "gated" : "plain",
                  promote_k, r.worst);
    }
}

// A persistent grid of two CTAs: each walks many tiles, its producer running ahead of the
// consumers across tiles and around the ring of slots many times (K of nine blocks, more than the
// ring holds).
TEST(EmulatedMoeFp8, FewCtasWalkManyTilesAroundTheRing) {
  for (const bool gated : {false, true}) {
    Case c;
    c.rows_per_expert = {150, 0, 1, 60, 0, 257};
    c.K = 1040;
    c.gated = gated;
    c.sms = 2;
    const Outcome r = run(c);
    std::printf("%s on two CTAs: worst rel_l2 %.2e\n", gated ? "gated" : "plain", r.worst);
  }
}

// The skinny kernel of decode: one to four passes over each expert's rows (plain and gated),
// and the launcher's own choice.
TEST(EmulatedMoeFp8, SkinnyKernelEveryPassCount) {
  for (const int passes : {0, 1, 2, 4})
    for (const bool gated : {false, true}) {
      Case c;
      c.rows_per_expert = {21, 0, 1, 9, 0, 40};
      c.K = 400;
      c.gated = gated;
      c.skinny = true;
      c.passes = passes;
      const Outcome r = run(c);
      std::printf("skinny, %s, %d passes: worst rel_l2 %.2e\n", gated ? "gated" : "plain", passes,
                  r.worst);
    }
}

// Threads resumed in another order give the same bits.
TEST(EmulatedMoeFp8, InterleavingDoesNotChangeTheBits) {
  Case c;
  c.rows_per_expert = {140, 5, 0, 66};
  c.gated = true;
  const Outcome a = run(c);
  c.schedule_seed = 777;
  const Outcome b = run(c);
  ASSERT_EQ(a.y.size(), b.y.size());
  EXPECT_EQ(std::memcmp(a.y.data(), b.y.data(), a.y.size() * sizeof(__nv_bfloat16)), 0);
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
