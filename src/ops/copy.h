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

// A transfer between devices moves one contiguous run, or rows: 2-d with unit inner stride on
// both sides (a few rows of a wider table, as one strided transfer).
inline bool transferable(const Tensor& t) {
  return t.is_contiguous() || (t.ndim() == 2 && t.stride(1) == 1);
}

// dst = src elementwise: same shape (up to 4 dims), any strides, floats converting, other dtypes
// as they are. Host ↔ device when the devices differ (then of one dtype, both transferable).
inline void copy_contract(const Tensor& src, const Tensor& dst) {
  const Contract c("copy", dst);
  c.need(dst.shape() == src.shape() && dst.ndim() <= 4, "dst", dst, "src's shape {} (<= 4 dims)",
         src.shape().str());
  c.need(dst.dtype() == src.dtype() || (dtype_is_float(src.dtype()) && dtype_is_float(dst.dtype())),
         "dst", dst, "src's dtype {} or, from a float, a float", dtype_name(src.dtype()));
  if (src.device() != dst.device())
    c.need(src.dtype() == dst.dtype() && transferable(src) && transferable(dst), "dst", dst,
           "of src's dtype ({} on {}), both contiguous or rows, to move between devices", src.str(),
           src.device().str());
}

inline void copy(const Tensor& src, Tensor& dst) {
  copy_contract(src, dst);
  if (::mls::ops::is_meta(dst)) return;
#ifdef MLASERVE_CUDA
  if (dst.device().is_cpu() && src.device().is_cpu())
    cpu::copy(src, dst);
  else
    cuda::copy(src, dst);
#else
  cpu::copy(src, dst);
#endif
  after_op("copy");
}
// src and dst: 2-d of one width and dtype with unit inner stride, on one device with rows.
inline void rows_contract(const char* op, const Tensor& src, const Tensor& rows, const Tensor& dst,
                          int64_t n) {
  const Contract c(op, dst);
  c.rows("src", src, 2);
  c.rows("dst", dst, 2);
  c.need(dst.dim(1) == src.dim(1) && dst.dtype() == src.dtype(), "dst", dst,
         "{} rows {} wide like src", dtype_name(src.dtype()), src.dim(1));
  c.index("rows", rows, n);
  c.on_device("src", src);
  c.disjoint("dst", dst, "src", src);
}
inline void scatter_rows_contract(const Tensor& src, const Tensor& rows, const Tensor& dst) {
  rows_contract("scatter_rows", src, rows, dst, src.dim(0));
}
inline void gather_rows_contract(const Tensor& src, const Tensor& rows, const Tensor& dst) {
  rows_contract("gather_rows", src, rows, dst, dst.dim(0));
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
