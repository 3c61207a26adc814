// Inputs for the op tests: normal random f32 host tensors, i32 id lists, and DeepSeek-V3 / GLM-5
// style YaRN parameters.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/rope.h"

namespace mls::ops::test {

// f32 values drawn from N(mean, scale²) with a fixed seed.
inline Tensor random(const Shape& s, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(mean, scale);
  Tensor t = Tensor::empty(s, DType::kF32, MemTag::kActivation);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(g);
  return t;
}

inline Tensor ids(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32, MemTag::kActivation);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// YaRN as DeepSeek-V3 and GLM-5 configure it, with mscale != mscale_all_dim so that the cos/sin
// multiplier is not 1.
inline RopeParamsF yarn_params() {
  RopeParamsF p;
  p.theta = 10000.0;
  p.yarn = true;
  p.factor = 40.0;
  p.original_max_position_embeddings = 4096;
  p.beta_fast = 32.0;
  p.beta_slow = 1.0;
  p.mscale = 1.0;
  p.mscale_all_dim = 0.707;
  p.has_mscale = p.has_mscale_all_dim = true;
  return p;
}

}  // namespace mls::ops::test
