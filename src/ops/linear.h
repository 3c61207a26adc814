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
void take_linear_workspace();
}  // namespace cuda

// Device scratch of one call: with an FP8 W, the quantised activations and their scales, and
// the weight's padded block scales when cuBLASLt takes the step (ops/scratch_sizes.h).
inline ScratchPlan linear_scratch(const Tensor& x, const Tensor& w) {
  if (w.dtype() != DType::kFP8E4M3) return {};
  const int64_t T = x.dim(0), N = w.dim(0), K = w.dim(1);
  return {{{scratch::fp8_act_bytes(T, K), DType::kFP8E4M3, MemTag::kWorkspace},
           {scratch::fp8_padded_scale_floats(T, N, K), DType::kF32, MemTag::kWorkspace}}};
}

// accumulate: y += x·Wᵀ instead of y = x·Wᵀ.
inline void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate = false) {
  MLS_DISPATCH_SCRATCH(y, linear_scratch(x, w), linear, x, w, y, accumulate);
}

// Per-head products, one call for all heads b: y[:, b, :] = x[:, b, :] · W[b]ᵀ with
// x [T, B, in] and y [T, B, out] (strided, unit innermost stride) and W [B, out, in] (rows
// contiguous, any batch stride: W may be a head-strided view of a larger matrix).
inline void linear_batched(const Tensor& x, const Tensor& w, Tensor& y) {
  MLS_DISPATCH(y, linear_batched, x, w, y);
}

// Bytes a rank's GEMM library holds as workspace on `device` for its whole life (tag workspace,
// taken by take_linear_workspace).
inline int64_t linear_workspace_bytes(Device device) {
  return device.is_cpu() ? 0 : scratch::kGemmWorkspaceBytes;
}

// Takes the calling rank thread's GEMM workspace (linear_workspace_bytes) from its allocator now:
// a rank does at start-up, outside any step, so that no step allocates it at its first GEMM.
inline void take_linear_workspace(Device device) {
  if (device.is_cpu()) return;
#ifdef MLASERVE_CUDA
  cuda::take_linear_workspace();
#else
  raise<Unsupported>("take_linear_workspace: this build has no CUDA backend");
#endif
}

}  // namespace mls::ops
