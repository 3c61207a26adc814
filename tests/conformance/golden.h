// Reading the transformers goldens (tests/data/<fixture>/golden.safetensors) for the
// conformance suites, and the fixture list they are parameterised over.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
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

// The GPU conformance criterion (issue 14) for one row, given transformers' own error on the same
// GPU in the same precision (the yardstick, tests/data/<fixture>/transformers_error.json, written
// there by bench/hf_fixture_error.py --write): at most 1.25 x that, and at most 2e-2 where
// transformers is within 2e-2.
inline double gpu_bound(double transformers_error) {
  constexpr double kRatio = 1.25, kAbsolute = 2e-2;
  return transformers_error <= kAbsolute ? std::min(kRatio * transformers_error, kAbsolute)
                                         : kRatio * transformers_error;
}

inline nlohmann::json yardstick(const std::string& fixture_dir) {
  std::ifstream y(fixture_dir + "/transformers_error.json");
  if (!y)
    ADD_FAILURE() << fixture_dir << "/transformers_error.json is missing: run "
                  << "`python3 bench/hf_fixture_error.py --write` on this GPU";
  return y ? nlohmann::json::parse(y) : nlohmann::json::object({{"rows", {}}});
}

// Relative L2 error of `got` (want.size() values) against `want`.
inline double rel_l2(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// gtest parameter names allow no '-': tiny-glm5 → tiny_glm5.
inline std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

}  // namespace mls::golden
