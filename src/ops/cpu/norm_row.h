// One row's normalisation on the CPU, shared by ops::rms_norm / layer_norm (norm_cpu.cc) and the
// fused cache writes (cache_write_cpu.cc) so that a row normalised by either gets the same bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace mls::ops::cpu {

// y = w * x / sqrt(mean(x²) + eps) over n values (the sum in double).
inline void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * inv);
}

// y = (x - mean) / sqrt(var + eps) * w + b over n values (mean and biased variance in double).
inline void layer_norm_row(const float* x, const float* w, const float* b, int64_t n, float eps,
                           float* y) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) * inv) * w[i] + b[i];
}

}  // namespace mls::ops::cpu
