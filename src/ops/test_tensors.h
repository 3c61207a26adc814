// Host tensors for the CPU op tests: normal random f32 values and i32 id lists.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor.h"

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

}  // namespace mls::ops::test
