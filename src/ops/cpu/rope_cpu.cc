#include <algorithm>
#include <vector>

#include "ops/copy.h"
#include "ops/cpu/rope_row.h"
#include "ops/rope.h"

namespace mls::ops::cpu {

void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                RopeStyle style) {
  const int d = table.dim();
  const int half = d / 2;
  const bool two_d = x.ndim() == 2;
  const int64_t heads = two_d ? 1 : x.dim(1);
  const int64_t head_stride = two_d ? 0 : x.stride(1);
  std::vector<float> c(half), s(half), tmp(d);
  for (int64_t t = 0; t < x.dim(0); ++t) {
    rope_cos_sin(table, positions.data<int32_t>()[t], c.data(), s.data());
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.data<float>() + t * x.stride(0) + h * head_stride + offset;
      rope_rotate(v, tmp.data(), half, c.data(), s.data(), style == RopeStyle::kInterleaved);
      std::copy(tmp.begin(), tmp.end(), v);
    }
  }
}

void rope_into(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style,
               Tensor& out) {
  ops::copy(x, out);
  cpu::apply_rope(out, 0, positions, table, style);
}

}  // namespace mls::ops::cpu
