// Host references of block FP8 shared by the FP8 kernels' tests (on the GPU and on the emulator):
// the activations' quantisation (fp8_act_rows.cuh's rule), inputs, and the float64 GEMM contract
// (fp8_quant_kernels.h, moe_fp8_kernels.h):
//   y[r, n] = Σ_kb sx[r, kb] · sw[n / 128, kb] · Σ_{k in block kb} xq[r, k] · w[n, k].
#pragma once

#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace mls::ops::cuda::kernels::test {

inline double e4m3(uint8_t b) {
  __nv_fp8_e4m3 v;
  std::memcpy(&v, &b, 1);
  return static_cast<float>(v);
}

// e4m3 bytes of normal values spread over the format's range.
inline std::vector<uint8_t> random_e4m3(size_t n, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    const __nv_fp8_e4m3 x(d(g) * 4.0f);
    std::memcpy(&b, &x, 1);
  }
  return v;
}

// Block scales of the magnitude a quantisation gives (amax / 448 of unit-scale data).
inline std::vector<float> random_scales(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> d(0.5f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g) / 64.0f;
  return v;
}

// A row of K values quantised as the FP8 linears' activations are: per 128-group a scale of
// amax / 448 (1 for an all-zero group) and q = x / scale rounded to e4m3, saturating.
inline void quantise_act_row(const float* x, int64_t K, uint8_t* q, float* scales) {
  for (int64_t k0 = 0; k0 < K; k0 += 128) {
    const int64_t k1 = std::min(K, k0 + 128);
    float amax = 0.0f;
    for (int64_t k = k0; k < k1; ++k) amax = std::max(amax, std::fabs(x[k]));
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    scales[k0 / 128] = scale;
    for (int64_t k = k0; k < k1; ++k) {
      const __nv_fp8_e4m3 v(x[k] / scale);
      std::memcpy(&q[k], &v, 1);
    }
  }
}

// One output of the contract: x a row of K e4m3 bytes with its scale of block kb at
// x_scale[kb · x_scale_ld], w a weight row with its scales' row w_scale (one per K block).
inline double block_fp8_dot(const uint8_t* x, const float* x_scale, int64_t x_scale_ld,
                            const uint8_t* w, const float* w_scale, int64_t K) {
  double total = 0.0;
  for (int64_t kb = 0; kb * 128 < K; ++kb) {
    double s = 0.0;
    for (int64_t k = kb * 128; k < std::min(K, (kb + 1) * 128); ++k) s += e4m3(x[k]) * e4m3(w[k]);
    total += s * x_scale[kb * x_scale_ld] * w_scale[kb];
  }
  return total;
}

}  // namespace mls::ops::cuda::kernels::test
