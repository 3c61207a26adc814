// Element types and exact conversions between them and float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mls {

enum class DType : uint8_t { kF32, kBF16, kF16, kFP8E4M3, kI32, kI64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", ...
bool dtype_is_float(DType t);

// float32 <-> narrow floats, round-to-nearest-even. NaN stays NaN.
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float v);  // overflow -> inf, subnormals kept
// float8_e4m3fn (no infinities; S.1111.111 is NaN, max finite 448). Like PyTorch's cast,
// magnitudes that round past 448 become NaN rather than saturating.
float fp8e4m3_to_f32(uint8_t v);
uint8_t f32_to_fp8e4m3(float v);

// Converts n elements of a float dtype to float32.
void convert_to_f32(const void* src, DType src_type, float* dst, size_t n);
// Converts n float32 values to a float dtype.
void convert_from_f32(const float* src, void* dst, DType dst_type, size_t n);

}  // namespace mls
