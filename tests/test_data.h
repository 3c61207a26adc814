// Where the tests find the checked-in fixtures and goldens (tests/data). Defined once for every
// test file: a unity build compiles several test files as one translation unit.
#pragma once

#include <cstdint>
#include <filesystem>

namespace mls {

inline const std::filesystem::path kTestData = MLASERVE_TEST_DATA;
// <|endoftext|> in the GLM test tokenizer (tests/data/tok-glm).
inline constexpr int32_t kTokGlmEndOfText = 980;

}  // namespace mls
