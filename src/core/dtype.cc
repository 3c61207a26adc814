#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace mls {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kFP8E4M3:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
  }
  throw InternalError("bad dtype");
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
  }
  return "?";
}

bool dtype_is_float(DType t) {
  return t != DType::kI32 && t != DType::kI64;
}

float bf16_to_f32(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

uint16_t f32_to_bf16(float v) {
  uint32_t u = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep it a quiet NaN
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t v) {
  const uint32_t sign = (v & 0x8000u) << 16;
  const uint32_t exp = (v >> 10) & 0x1f;
  const uint32_t man = v & 0x3ff;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(man), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

// Rounds |x| (finite, >= 0) to a float with `man_bits` of mantissa and the given minimum normal
// exponent, round-to-nearest-even, returning the value as float (exact in float32).
static float round_to_format(float x, int man_bits, int min_exp) {
  if (x == 0.0f) return 0.0f;
  int e;
  std::frexp(x, &e);             // x = f * 2^e, f in [0.5, 1)
  e -= 1;                        // x = 1.m * 2^e
  if (e < min_exp) e = min_exp;  // subnormal range: fixed quantum
  const float quantum = std::ldexp(1.0f, e - man_bits);
  return std::nearbyint(x / quantum) * quantum;  // default rounding mode is to nearest even
}

uint16_t f32_to_f16(float v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7e00;
  float a = std::fabs(v);
  if (std::isinf(a)) return sign | 0x7c00;
  a = round_to_format(a, 10, -14);
  if (a >= 65536.0f) return sign | 0x7c00;
  if (a == 0.0f) return sign;
  int e;
  std::frexp(a, &e);
  e -= 1;
  if (e < -14) return sign | static_cast<uint16_t>(a / std::ldexp(1.0f, -24));  // subnormal
  const uint16_t man = static_cast<uint16_t>((a / std::ldexp(1.0f, e) - 1.0f) * 1024.0f);
  return sign | static_cast<uint16_t>((e + 15) << 10) | man;
}

float fp8e4m3_to_f32(uint8_t v) {
  const bool neg = v & 0x80;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 7;
  float mag;
  if (exp == 15 && man == 7) return std::nanf("");
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -9);
  } else {
    mag = std::ldexp(1.0f + man / 8.0f, exp - 7);
  }
  return neg ? -mag : mag;
}

uint8_t f32_to_fp8e4m3(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  if (std::isnan(v)) return 0x7f | sign;
  float a = std::fabs(v);
  if (std::isinf(a)) return 0x7f | sign;
  a = round_to_format(a, 3, -6);
  if (a > 448.0f) return 0x7f | sign;
  if (a == 0.0f) return sign;
  int e;
  std::frexp(a, &e);
  e -= 1;
  if (e < -6) return sign | static_cast<uint8_t>(a / std::ldexp(1.0f, -9));  // subnormal
  const uint8_t man = static_cast<uint8_t>((a / std::ldexp(1.0f, e) - 1.0f) * 8.0f);
  return sign | static_cast<uint8_t>((e + 7) << 3) | man;
}

void convert_to_f32(const void* src, DType t, float* dst, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kFP8E4M3: {
      float table[256];
      for (int i = 0; i < 256; ++i) table[i] = fp8e4m3_to_f32(static_cast<uint8_t>(i));
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = table[s[i]];
      return;
    }
    default:
      raise<ShapeError>("cannot convert {} to f32", dtype_name(t));
  }
}

void convert_from_f32(const float* src, void* dst, DType t, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kFP8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_fp8e4m3(src[i]);
      return;
    }
    default:
      raise<ShapeError>("cannot convert f32 to {}", dtype_name(t));
  }
}

}  // namespace mls
