// Data movement: strided copies with dtype conversion (also between host and device), and row
// scatter/gather through index lists (cache writes, MoE permutation, logit rows).
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

namespace cpu {
void copy(const Tensor& src, Tensor& dst);
void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& dst);
void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst);
}  // namespace cpu
namespace cuda {
void copy(const Tensor& src, Tensor& dst);
void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& dst);
void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst);
}  // namespace cuda

// dst = src elementwise: same shape (up to 4 dims), any strides, f32/bf16 converting, i32 as is.
// Host ↔ device when the devices differ (then both must be contiguous and of one dtype).
inline void copy(const Tensor& src, Tensor& dst) {
  if (::mls::ops::is_meta(dst)) return;
#ifdef MLASERVE_CUDA
  if (dst.device().is_cpu() && src.device().is_cpu()) return cpu::copy(src, dst);
  return cuda::copy(src, dst);
#else
  return cpu::copy(src, dst);
#endif
}
// dst[rows[t]] = src[t] for t < src.dim(0): src [T, D], rows i32 [T], dst [R, D].
inline void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  MLS_DISPATCH(dst, scatter_rows, src, rows, dst);
}
// dst[t] = src[rows[t]] (zeros where rows[t] < 0): src [R, D], rows i32 [T], dst [T, D].
inline void gather_rows(const Tensor& src, const Tensor& rows, Tensor& dst) {
  MLS_DISPATCH(dst, gather_rows, src, rows, dst);
}

}  // namespace mls::ops
