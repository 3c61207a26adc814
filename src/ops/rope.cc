#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mls::ops {

double yarn_mscale(double scale, double a) {
  return scale <= 1.0 ? 1.0 : 0.1 * a * std::log(scale) + 1.0;
}

std::vector<float> rope_inv_freq(const RopeParamsF& p, int dim) {
  const int half = dim / 2;
  std::vector<float> inv(half);
  // transformers: base ** (arange(0, dim, 2).float() / dim), all in fp32.
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i)
    pos_freqs[i] =
        std::pow(static_cast<float>(p.theta), static_cast<float>(2 * i) / static_cast<float>(dim));
  if (!p.yarn) {
    for (int i = 0; i < half; ++i) inv[i] = 1.0f / pos_freqs[i];
    return inv;
  }
  const double two_pi = 2.0 * std::numbers::pi;
  const double orig = p.original_max_position_embeddings;
  auto correction_dim = [&](double rot) {
    return dim * std::log(orig / (rot * two_pi)) / (2.0 * std::log(p.theta));
  };
  double low = std::floor(correction_dim(p.beta_fast));
  double high = std::ceil(correction_dim(p.beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
    const float extrap = 1.0f - ramp;
    const float interp_f = 1.0f / (static_cast<float>(p.factor) * pos_freqs[i]);
    const float extrap_f = 1.0f / pos_freqs[i];
    inv[i] = interp_f * (1.0f - extrap) + extrap_f * extrap;
  }
  return inv;
}

double rope_attention_scaling(const RopeParamsF& p) {
  if (!p.yarn) return 1.0;
  if (p.has_mscale && p.has_mscale_all_dim)
    return yarn_mscale(p.factor, p.mscale) / yarn_mscale(p.factor, p.mscale_all_dim);
  return yarn_mscale(p.factor, 1.0);
}

RopeTable::RopeTable(const RopeParamsF& p, int dim)
    : dim_(dim),
      inv_freq_(rope_inv_freq(p, dim)),
      scaling_(static_cast<float>(rope_attention_scaling(p))) {}

}  // namespace mls::ops
