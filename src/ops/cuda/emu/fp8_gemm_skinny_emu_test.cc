// The skinny block-FP8 GEMM of decode (fp8_quant_kernels.cu) run by the CPU emulator against its
// contract (fp8_quant_kernels.h) evaluated in float64: one and two outputs in a launch, tiles of
// 8 and 16 tokens, the register and the shared-memory-ring kernels, K split across CTAs with the
// last CTA of a tile summing the partials (its counters left zero), accumulation into y, rows and
// K not multiples of the tiles. This checks the kernels' logic on any machine; their numerics on
// the device are ops_cuda_gemm_test's.
//
// Tolerance: the emulated MMAs add exactly; the kernel's promotions and partial sums add in fp32
// and y is rounded to bf16 (about 1.1e-3 relative L2), so the FP8 linear's tolerance against an
// emulation of its quantisation (kFp8VsEmulatedTol, 4e-3 relative L2 in ops_cuda_gemm_test) holds;
// a misplaced or missing scale, block or partial cannot meet it. The two kernels give the same
// bits (their contract), which is checked exactly.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ops/cuda/block_fp8_reference.h"
#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/fp8_quant_kernels.h"

namespace mls::ops::cuda::kernels {
namespace {

using test::block_fp8_dot;
using test::random_e4m3;
using test::random_scales;

constexpr double kFp8VsEmulatedTol = 4e-3;
using bf16 = __nv_bfloat16;

struct Case {
  int64_t T = 1, K = 1024;
  int64_t N[2] = {200, 0};  // a second output when N[1] > 0
  bool accumulate = false;
  int num_sms = 132;  // what the split-K heuristic fills
  SkinnyKernel kernel = SkinnyKernel::kAuto;
  uint32_t seed = 1;
};

struct Outcome {
  std::vector<bf16> y[2];
  double worst = 0.0;
};

Outcome run(const Case& c) {
  std::mt19937 g(c.seed);
  const int64_t KB = (c.K + 127) / 128;
  // Rows of the quantised activations as launch_quantize_fp8_act writes them: 16-byte aligned
  // (zeros past K).
  const int64_t ldq = (c.K + 15) / 16 * 16;
  std::vector<uint8_t> xq = random_e4m3(c.T * ldq, g);
  for (int64_t t = 0; t < c.T; ++t)
    std::fill(xq.begin() + t * ldq + c.K, xq.begin() + (t + 1) * ldq, 0);
  const std::vector<float> xs = random_scales(KB * c.T, g);  // x_scale[kb · T + t]
  std::vector<uint8_t> w[2];
  std::vector<float> ws[2];
  std::vector<float> y0[2];  // y before the launch (accumulate)
  Outcome out;
  Fp8GemmArgs a{};
  for (int o = 0; o < 2; ++o) {
    if (c.N[o] == 0) continue;
    w[o] = random_e4m3(c.N[o] * c.K, g);
    ws[o] = random_scales((c.N[o] + 127) / 128 * KB, g);
    std::normal_distribution<float> d(0.0f, 1.0f);
    out.y[o].resize(c.T * c.N[o]);
    y0[o].resize(c.T * c.N[o]);
    for (size_t i = 0; i < y0[o].size(); ++i) {
      out.y[o][i] = __float2bfloat16(c.accumulate ? d(g) : NAN);
      y0[o][i] = c.accumulate ? __bfloat162float(out.y[o][i]) : 0.0f;
    }
    a.out[o] = {w[o].data(), ws[o].data(), out.y[o].data(), c.N[o], c.N[o]};
  }
  std::vector<float> partial(size_t{4} << 20, NAN);
  std::vector<int> counters(4096, 0);
  a.xq = xq.data();
  a.ldq = ldq;
  a.x_scale = xs.data();
  a.x_scale_ld = c.T;
  a.K = c.K;
  a.T = c.T;
  a.accumulate = c.accumulate;
  a.partial = partial.data();
  a.partial_bytes = partial.size() * sizeof(float);
  a.counters = counters.data();
  a.num_counters = static_cast<int64_t>(counters.size());
  a.num_sms = c.num_sms;
  a.kernel = c.kernel;
  EXPECT_EQ(launch_fp8_gemm_skinny(a, nullptr), cudaSuccess);
  EXPECT_TRUE(std::all_of(counters.begin(), counters.end(), [](int n) { return n == 0; }))
      << "split-K counters left nonzero";

  for (int o = 0; o < 2; ++o)
    for (int64_t t = 0; t < c.T && c.N[o] > 0; ++t) {
      double e2 = 0.0, r2 = 0.0;
      for (int64_t n = 0; n < c.N[o]; ++n) {
        const double want =
            y0[o][t * c.N[o] + n] +
            block_fp8_dot(&xq[t * ldq], &xs[t], c.T, &w[o][n * c.K], &ws[o][(n / 128) * KB], c.K);
        const double got = __bfloat162float(out.y[o][t * c.N[o] + n]);
        e2 += (got - want) * (got - want);
        r2 += want * want;
      }
      const double rel = std::sqrt(e2 / r2);
      EXPECT_LE(rel, kFp8VsEmulatedTol) << "output " << o << " token " << t;
      out.worst = std::max(out.worst, std::isnan(rel) ? INFINITY : rel);
    }
  return out;
}

TEST(EmulatedFp8Skinny, OneTokenSplitAcrossCtas) {
  Case c;
  c.K = 2048;  // 16 K blocks, split across CTAs to fill 132 SMs
  std::printf("T 1: worst rel_l2 %.2e\n", run(c).worst);
}

TEST(EmulatedFp8Skinny, TwoOutputsOfOneInput) {
  Case c;
  c.T = 8;
  c.N[0] = 200;
  c.N[1] = 72;
  std::printf("two outputs: worst rel_l2 %.2e\n", run(c).worst);
}

TEST(EmulatedFp8Skinny, TilesOfSixteenTokensAndAccumulation) {
  Case c;
  c.T = 21;  // two 16-token groups, the second partial
  c.accumulate = true;
  std::printf("T 21, accumulating: worst rel_l2 %.2e\n", run(c).worst);
}

// K not a multiple of 16: element loads in place of 16-byte ones, a partial last K block.
TEST(EmulatedFp8Skinny, UnalignedK) {
  Case c;
  c.T = 3;
  c.K = 200;
  std::printf("K 200: worst rel_l2 %.2e\n", run(c).worst);
}

// The register and ring kernels give the same bits, with and without a K split (one SM: no
// split; 132: split), each within the tolerance.
TEST(EmulatedFp8Skinny, RingAndRegisterKernelsGiveTheSameBits) {
  for (const int sms : {1, 132})
    for (const int64_t T : {int64_t{5}, int64_t{16}}) {
      Case c;
      c.T = T;
      c.K = 8192;  // 64 K blocks: eight a warp without a split
      c.N[0] = 48;
      c.num_sms = sms;
      c.kernel = SkinnyKernel::kRegisters;
      const Outcome regs = run(c);
      c.kernel = SkinnyKernel::kSharedRing;
      const Outcome ring = run(c);
      std::printf("T %ld on %d SMs: worst rel_l2 %.2e / %.2e\n", static_cast<long>(T), sms,
                  regs.worst, ring.worst);
      ASSERT_EQ(regs.y[0].size(), ring.y[0].size());
      EXPECT_EQ(std::memcmp(regs.y[0].data(), ring.y[0].data(), regs.y[0].size() * sizeof(bf16)), 0)
          << "T " << T << ", " << sms << " SMs";
    }
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
