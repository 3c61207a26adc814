// Reading the transformers goldens (tests/data/<fixture>/golden.safetensors) for the
// conformance suites, and the fixture list they are parameterised over.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"

namespace mls::golden {

inline std::vector<float> as_f32(const io::TensorInfo& t) {
  std::vector<float> v(t.numel());
  convert_to_f32(t.data, *t.dtype, v.data(), v.size());
  return v;
}

inline std::vector<int32_t> as_i32(const io::TensorInfo& t) {
  const auto* p = reinterpret_cast<const int32_t*>(t.data);
  return std::vector<int32_t>(p, p + t.numel());
}

inline const auto kFixtures = ::testing::Values("tiny-glm5", "tiny-glm5-fp8", "tiny-dsv32",
                                                "tiny-dsv32-fp8", "tiny-dsv3", "tiny-dsv3-fp8");

// gtest parameter names allow no '-': tiny-glm5 → tiny_glm5.
inline std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

}  // namespace mls::golden
