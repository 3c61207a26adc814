// The rotation on the CPU, shared by ops::apply_rope (rope_cpu.cc) and the fused cache writes
// (cache_write_cpu.cc) so that a value rotated by either gets the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/rope.h"

namespace mls::ops::cpu {

// c[i] and s[i] for i < dim/2: cos and sin of position pos's angles, times the table's scaling.
inline void rope_cos_sin(const RopeTable& table, int32_t pos, float* c, float* s) {
  const float p = static_cast<float>(pos);
  const float* inv = table.inv_freq().data();
  const float scaling = table.scaling();
  for (int i = 0; i < table.dim() / 2; ++i) {
    // The angle is an fp32 product, as transformers computes it; cos/sin of that value.
    const float angle = p * inv[i];
    c[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * scaling;
    s[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * scaling;
  }
}

// out[0, 2·half) = the 2·half values at v rotated by (c, s), written half-split: pairs
// (v[2i], v[2i + 1]) if interleaved, else (v[i], v[i + half]). out must not overlap v.
inline void rope_rotate(const float* v, float* out, int half, const float* c, const float* s,
                        bool interleaved) {
  for (int i = 0; i < half; ++i) {
    const float a = interleaved ? v[2 * i] : v[i];
    const float b = interleaved ? v[2 * i + 1] : v[i + half];
    out[i] = a * c[i] - b * s[i];
    out[i + half] = b * c[i] + a * s[i];
  }
}

}  // namespace mls::ops::cpu
