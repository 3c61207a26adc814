// Inputs and the float64 reference of the block-FP8 GEMM contract shared by the emulated FP8
// kernels' tests (fp8_quant_kernels.h, moe_fp8_kernels.h):
//   y[r, n] = Σ_kb sx[r, kb] · sw[n / 128, kb] · Σ_{k in block kb} xq[r, k] · w[n, k].
#pragma once

#include <cuda_fp8.h>

#include <algorithm>
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
