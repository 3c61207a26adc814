// y[T, out] = x[T, in] · Wᵀ with W stored [out, in] (the checkpoint layout). Rows of x and y may
// be strided (views into wider activations); W is contiguous. On the GPU x and W are bf16 and y
// bf16 or f32 (fp32 accumulation); an FP8 (e4m3) W carries its block scales (Tensor::block_scale,
// f32 [ceil(out/128), ceil(in/128)]) and x is quantised per token in groups of 128 on the way.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {
namespace cpu {
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate);
void linear_batched(const Tensor& x, const Tensor& w, Tensor& y);
}  // namespace cpu
namespace cuda {
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate);
void linear_batched(const Tensor& x, const Tensor& w, Tensor& y);
}  // namespace cuda

// accumulate: y += x·Wᵀ instead of y = x·Wᵀ.
inline void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate = false) {
  MLS_DISPATCH(y, linear, x, w, y, accumulate);
}

// Per-head products, one call for all heads b: y[:, b, :] = x[:, b, :] · W[b]ᵀ with
// x [T, B, in] and y [T, B, out] (strided, unit innermost stride) and W [B, out, in] (rows
// contiguous, any batch stride: W may be a head-strided view of a larger matrix).
inline void linear_batched(const Tensor& x, const Tensor& w, Tensor& y) {
  MLS_DISPATCH(y, linear_batched, x, w, y);
}

#ifdef MLASERVE_CUDA
namespace cuda {
int64_t gemm_workspace_bytes();
}
#endif
// Bytes a rank's GEMM library holds as workspace on `device` (tag workspace, once per rank).
inline int64_t linear_workspace_bytes(Device device) {
#ifdef MLASERVE_CUDA
  if (!device.is_cpu()) return cuda::gemm_workspace_bytes();
#endif
  (void)device;
  return 0;
}

}  // namespace mls::ops
