#include <cmath>
#include <vector>

#include "ops/rope.h"

namespace mls::ops::cpu {

void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                RopeStyle style) {
  const int d = table.dim();
  const int half = d / 2;
  const bool two_d = x.ndim() == 2;
  const int64_t heads = two_d ? 1 : x.dim(1);
  const int64_t head_stride = two_d ? 0 : x.stride(1);
  const float* inv = table.inv_freq().data();
  const float scaling = table.scaling();
  std::vector<float> c(half), s(half), tmp(d);
  for (int64_t t = 0; t < x.dim(0); ++t) {
    const float pos = static_cast<float>(positions.data<int32_t>()[t]);
    for (int i = 0; i < half; ++i) {
      // The angle is an fp32 product, as transformers computes it; cos/sin of that value.
      const float angle = pos * inv[i];
      c[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scaling;
      s[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scaling;
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data<float>() + t * x.stride(0) + h * head_stride + offset;
      for (int i = 0; i < half; ++i) {
        const float a = style == RopeStyle::kInterleaved ? v[2 * i] : v[i];
        const float b = style == RopeStyle::kInterleaved ? v[2 * i + 1] : v[i + half];
        tmp[i] = a * c[i] - b * s[i];
        tmp[i + half] = b * c[i] + a * s[i];
      }
      for (int i = 0; i < d; ++i) v[i] = tmp[i];
    }
  }
}

}  // namespace mls::ops::cpu
