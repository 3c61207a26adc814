#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace mls {
namespace {

// Reference decoders written from the bit fields, independent of dtype.cc.
float ref_fp8(uint8_t c) {  // e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa, no infinities
  const int e = (c >> 3) & 0xf, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const double mag = e == 0 ? m * std::pow(2.0, -9) : (8 + m) * std::pow(2.0, e - 10);
  return static_cast<float>((c & 0x80) ? -mag : mag);
}
float ref_f16(uint16_t c) {  // 1 sign, 5 exponent (bias 15), 10 mantissa
  const int e = (c >> 10) & 0x1f, m = c & 0x3ff;
  double mag;
  if (e == 31) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    mag = std::numeric_limits<double>::infinity();
  } else {
    mag = e == 0 ? m * std::pow(2.0, -24) : (1024 + m) * std::pow(2.0, e - 25);
  }
  return static_cast<float>((c & 0x8000) ? -mag : mag);
}
float bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  EXPECT_EQ(dtype_size(DType::kFP8E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::kI32), 4u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_TRUE(dtype_is_float(DType::kFP8E4M3));
  EXPECT_FALSE(dtype_is_float(DType::kI64));
}

TEST(DType, Fp8AllCodesDecodeAndReencode) {
  int nans = 0;
  for (int i = 0; i < 256; ++i) {
    const auto c = static_cast<uint8_t>(i);
    const float want = ref_fp8(c);
    const float got = fp8e4m3_to_f32(c);
    if (std::isnan(want)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << i;
      EXPECT_EQ(f32_to_fp8e4m3(got) & 0x7f, 0x7f) << i;  // some NaN code
      continue;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << i;  // -0 too
    EXPECT_EQ(f32_to_fp8e4m3(got), c) << i;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
}

TEST(DType, Fp8RoundsMidpointsToEven) {
  // Between each pair of adjacent positive codes: the midpoint goes to the even code, a hair
  // either side to the nearer one.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = ref_fp8(static_cast<uint8_t>(c)), hi = ref_fp8(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in float32
    const uint8_t even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(f32_to_fp8e4m3(mid), even) << c;
    EXPECT_EQ(f32_to_fp8e4m3(-mid), even | 0x80) << c;
    EXPECT_EQ(f32_to_fp8e4m3(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(f32_to_fp8e4m3(std::nextafter(mid, 1000.0f)), c + 1) << c;
  }
}

TEST(DType, Fp8OverflowAndUnderflow) {
  EXPECT_EQ(f32_to_fp8e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8e4m3(460.0f), 0x7e);  // rounds down to the max
  EXPECT_EQ(f32_to_fp8e4m3(464.0f), 0x7e);  // midpoint 448 | 480: even, i.e. 448
  EXPECT_EQ(f32_to_fp8e4m3(470.0f), 0x7f);  // rounds past 448: NaN, as PyTorch's cast
  EXPECT_EQ(f32_to_fp8e4m3(-470.0f), 0xff);
  EXPECT_EQ(f32_to_fp8e4m3(1e6f) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_fp8e4m3(std::numeric_limits<float>::infinity()) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_fp8e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  const float sub = std::ldexp(1.0f, -9);  // smallest subnormal
  EXPECT_EQ(f32_to_fp8e4m3(sub), 0x01);
  EXPECT_EQ(f32_to_fp8e4m3(sub / 2), 0x00);   // midpoint with 0: even
  EXPECT_EQ(f32_to_fp8e4m3(-sub / 2), 0x80);  // keeps the sign
  EXPECT_EQ(f32_to_fp8e4m3(sub * 0.5001f), 0x01);
  EXPECT_EQ(f32_to_fp8e4m3(sub * 1.5f), 0x02);  // midpoint 1 | 2: even
  EXPECT_EQ(f32_to_fp8e4m3(sub * 2.5f), 0x02);
  EXPECT_EQ(f32_to_fp8e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_fp8e4m3(-1e-30f), 0x80);
  EXPECT_EQ(f32_to_fp8e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8e4m3(std::ldexp(1.0f, -6) * 0.99f), 0x08);  // rounds up into the normals
}

TEST(DType, Bf16) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = bf16_to_f32(static_cast<uint16_t>(c));
    EXPECT_EQ(std::bit_cast<uint32_t>(f), c << 16);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << c;
    } else {
      EXPECT_EQ(f32_to_bf16(f), c) << c;
    }
  }
  EXPECT_EQ(f32_to_bf16(bits(0x3f808000)), 0x3f80);  // midpoint, even below
  EXPECT_EQ(f32_to_bf16(bits(0x3f818000)), 0x3f82);  // midpoint, even above
  EXPECT_EQ(f32_to_bf16(bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(bits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits(0xbf818000)), 0xbf82);
  // NaNs whose payload sits only in the dropped bits must not become infinities.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bits(0x7f800001)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bits(0xff800001)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(bits(0x00010000)), 0x0001);                   // float subnormals stay exact
}

TEST(DType, F16) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const auto h = static_cast<uint16_t>(c);
    const float want = ref_f16(h), got = f16_to_f32(h);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(got)))) << c;
      continue;
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << c;
    EXPECT_EQ(f32_to_f16(got), h) << c;
  }
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // midpoint with the next power: to even = inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // midpoint, even below
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // midpoint, even above
  const float sub = std::ldexp(1.0f, -24);                          // smallest subnormal
  EXPECT_EQ(f32_to_f16(sub), 0x0001);
  EXPECT_EQ(f32_to_f16(sub * 1023), 0x03ff);
  EXPECT_EQ(f32_to_f16(sub / 2), 0x0000);
  EXPECT_EQ(f32_to_f16(-sub / 2), 0x8000);
  EXPECT_EQ(f32_to_f16(sub * 1.5f), 0x0002);
  EXPECT_EQ(f32_to_f16(sub * 0.75f), 0x0001);
  EXPECT_EQ(f32_to_f16(sub * 1023.5f), 0x0400);  // rounds up into the normals
}

TEST(DType, ArrayConversions) {
  const std::vector<float> src = {0.0f, -1.5f, 3.25f, 448.0f, -0.015625f};
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kFP8E4M3}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<std::byte> buf(src.size() * dtype_size(t));
    convert_from_f32(src.data(), buf.data(), t, src.size());
    std::vector<float> back(src.size());
    convert_to_f32(buf.data(), t, back.data(), back.size());
    EXPECT_EQ(back, src);  // all exactly representable in every float dtype
  }
  std::vector<float> out(1);
  const int32_t i = 3;
  EXPECT_THROW(convert_to_f32(&i, DType::kI32, out.data(), 1), Error);
  int64_t i64 = 0;
  EXPECT_THROW(convert_from_f32(out.data(), &i64, DType::kI64, 1), Error);
}

}  // namespace
}  // namespace mls
