#include <cstring>

#include "ops/copy.h"

namespace mls::ops::cpu {
namespace {

float load(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    default:
      return fp8e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
  }
}

void store(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(v);
      break;
    default:
      static_cast<uint8_t*>(base)[i] = f32_to_fp8e4m3(v);
  }
}

}  // namespace

void copy(const Tensor& src, Tensor& dst) {
  const bool same = src.dtype() == dst.dtype();
  if (src.numel() == 0) return;
  if (same && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  const int nd = src.ndim();
  const size_t es = dtype_size(src.dtype());
  if (same && nd == 2 && src.stride(1) == 1 && dst.stride(1) == 1) {  // rows: one memcpy each
    for (int64_t r = 0; r < src.dim(0); ++r)
      std::memcpy(static_cast<char*>(dst.raw()) + r * dst.stride(0) * es,
                  static_cast<const char*>(src.raw()) + r * src.stride(0) * es, src.dim(1) * es);
    return;
  }
  for (int64_t i = 0; i < src.numel(); ++i) {
    int64_t rem = i, so = 0, d_o = 0;
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = rem % src.dim(d);
      rem /= src.dim(d);
      so += idx * src.stride(d);
      d_o += idx * dst.stride(d);
    }
    if (same)
      std::memcpy(static_cast<char*>(dst.raw()) + d_o * es,
                  static_cast<const char*>(src.raw()) + so * es, es);
    else
      store(dst.raw(), dst.dtype(), d_o, load(src.raw(), src.dtype(), so));
  }
}

void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  const size_t es = dtype_size(src.dtype()), row_bytes = src.dim(1) * es;
  for (int64_t t = 0; t < src.dim(0); ++t) {
    const int32_t r = rows.data<int32_t>()[t];
    if (r < 0) continue;
    if (r >= dst.dim(0)) raise<ShapeError>("scatter_rows: row {} outside dst {}", r, dst.str());
    std::memcpy(static_cast<char*>(dst.raw()) + r * dst.stride(0) * es,
                static_cast<const char*>(src.raw()) + t * src.stride(0) * es, row_bytes);
  }
}

void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  const size_t es = dtype_size(src.dtype()), row_bytes = src.dim(1) * es;
  for (int64_t t = 0; t < dst.dim(0); ++t) {
    const int32_t r = rows.data<int32_t>()[t];
    char* d = static_cast<char*>(dst.raw()) + t * dst.stride(0) * es;
    if (r < 0) {
      std::memset(d, 0, row_bytes);
      continue;
    }
    if (r >= src.dim(0)) raise<ShapeError>("gather_rows: row {} outside src {}", r, src.str());
    std::memcpy(d, static_cast<const char*>(src.raw()) + r * src.stride(0) * es, row_bytes);
  }
}

}  // namespace mls::ops::cpu
