// y[T, out] = x[T, in] · Wᵀ with W stored [out, in] (the checkpoint layout). Rows of x and y may
// be strided (views into wider activations); W is contiguous. On the GPU x and W are bf16 and y
// bf16 or f32 (fp32 accumulation); an FP8 (e4m3) W carries its block scales (Tensor::block_scale,
// f32 [ceil(out/128), ceil(in/128)]) and x is quantised per token in groups of 128 on the way.
#pragma once

#include "ops/dispatch.h"
#include "ops/fp8_input.h"

namespace mls::ops {
namespace cpu {
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate);
void linear_pair(const Tensor& x, const Tensor& w1, Tensor& y1, const Tensor& w2, Tensor& y2);
void linear_batched(const Tensor& x, const Tensor& w, Tensor& y);
// The CPU computes from x itself: its activations are never quantised (xq is empty there).
inline void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate, const Tensor&) {
  linear(x, w, y, accumulate);
}
inline void linear_pair(const Tensor& x, const Tensor& w1, Tensor& y1, const Tensor& w2, Tensor& y2,
                        const Tensor&) {
  linear_pair(x, w1, y1, w2, y2);
}
}  // namespace cpu
namespace cuda {
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate, const Tensor& xq);
void linear_pair(const Tensor& x, const Tensor& w1, Tensor& y1, const Tensor& w2, Tensor& y2,
                 const Tensor& xq);
void linear_batched(const Tensor& x, const Tensor& w, Tensor& y);
void take_linear_workspace();
void pad_block_scale(const Tensor& scale, Tensor& padded);
}  // namespace cuda

// Whether bf16 linears may choose their kernel by the step's token count: the weight-streaming
// kernel for at most 8 tokens on small weights (the MoE router; ops/cuda/bf16_gemv_kernels.h),
// and cuBLASLt's algorithm for the step's own row count (ops/cuda/cublaslt_gemm.cc) rather than
// one for every count. A token's result then depends on its step's size. Off by default: bf16
// models keep the GPU's batch, chunking and preemption invariance. A block-FP8 model, whose FP8
// GEMMs already choose by step size (only equal step sizes agree, as a graph bucket and its padded
// eager step do), turns it on for its forward (model/model.cc). Per thread: each rank's thread
// runs its own model.
inline thread_local bool bf16_linears_by_step_size = false;

class Bf16LinearsByStepSize {
 public:
  explicit Bf16LinearsByStepSize(bool on) : prev_(bf16_linears_by_step_size) {
    bf16_linears_by_step_size = on;
  }
  ~Bf16LinearsByStepSize() { bf16_linears_by_step_size = prev_; }
  Bf16LinearsByStepSize(const Bf16LinearsByStepSize&) = delete;
  Bf16LinearsByStepSize& operator=(const Bf16LinearsByStepSize&) = delete;

 private:
  bool prev_;
};

// Device scratch of one call: with an FP8 W and no quantised input given, the quantised
// activations and their scales (ops/scratch_sizes.h).
inline ScratchPlan linear_scratch(const Tensor& x, const Tensor& w, const Tensor& xq) {
  if (w.dtype() != DType::kFP8E4M3 || xq.defined()) return {};
  return {{{scratch::fp8_act_bytes(x.dim(0), w.dim(1)), DType::kFP8E4M3, MemTag::kWorkspace}}};
}

// cuBLASLt's block-scaled GEMM reads a weight's 128x128 block scales with each row padded to a
// multiple of 4 floats, and takes only whole 128-wide K blocks: for a block-FP8 W [N, K] with K
// a multiple of 128 whose ceil(K/128) is not a multiple of 4, the weight keeps a padded copy
// (Tensor::padded_block_scale), made once at load.
inline bool fp8_scale_rows_padded(int64_t K) {
  return K % 128 == 0 && (K / 128) % 4 != 0;
}

// Attaches that padded copy to an FP8 weight `w` on a GPU (tag weights, from `alloc`); a meta
// allocator takes its size only.
inline void attach_padded_block_scale(Tensor& w, Allocator& alloc) {
  const Tensor* scale = w.block_scale();
  if (w.dtype() != DType::kFP8E4M3 || !scale || !fp8_scale_rows_padded(w.dim(1))) return;
  Tensor padded = Tensor::empty({scale->dim(0), scratch::round_up(scale->dim(1), 4)}, DType::kF32,
                                MemTag::kWeights, alloc);
  if (padded.raw()) {
#ifdef MLASERVE_CUDA
    cuda::pad_block_scale(*scale, padded);
#else
    raise<Unsupported>("attach_padded_block_scale: this build has no CUDA backend");
#endif
  }
  w.set_padded_block_scale(std::move(padded));
}

// x [T, K] and y [T, N] with unit inner stride, W [N, K] contiguous, one device, y apart from
// x and W. CPU: all f32. GPU: x bf16, y bf16 or f32, W bf16 or block-FP8 with its f32 block
// scales [ceil(N/128), ceil(K/128)] (and their padded copy where fp8_scale_rows_padded), then y
// bf16. xq: x quantised (ops/fp8_input.h), with a block-FP8 W only.
inline void linear_contract(const Tensor& x, const Tensor& w, const Tensor& y, bool = false,
                            const Tensor& xq = {}) {
  const Contract c("linear", y);
  fp8_input_contract(c, "xq", xq, x);
  c.need(!xq.defined() || w.dtype() == DType::kFP8E4M3, "xq", xq, "absent for a {} W",
         dtype_name(w.dtype()));
  c.rows("x", x, 2);
  c.rows("y", y, 2);
  c.need(w.ndim() == 2 && w.is_contiguous() && w.dim(1) == x.dim(1), "W", w,
         "contiguous [N, {}] (x's columns)", x.dim(1));
  c.need(y.dim(0) == x.dim(0) && y.dim(1) == w.dim(0), "y", y, "[{}, {}]", x.dim(0), w.dim(0));
  c.rows_apart("x", x, x.dim(1));
  c.rows_apart("y", y, y.dim(1));
  c.on_device("x", x);
  c.on_device("W", w);
  c.disjoint("y", y, "x", x);
  c.disjoint("y", y, "W", w);
  if (!c.gpu()) {
    c.dtype("x", x, {DType::kF32});
    c.dtype("W", w, {DType::kF32});
    c.dtype("y", y, {DType::kF32});
    return;
  }
  c.dtype("x", x, {DType::kBF16});
  c.dtype("W", w, {DType::kBF16, DType::kFP8E4M3});
  c.dtype("y", y, {DType::kBF16, DType::kF32});
  if (w.dtype() != DType::kFP8E4M3) return;
  c.dtype("y (FP8 W)", y, {DType::kBF16});
  const int64_t NB = (w.dim(0) + 127) / 128, KB = (w.dim(1) + 127) / 128;
  const Tensor* scale = w.block_scale();
  c.need(scale && scale->dtype() == DType::kF32 && scale->ndim() == 2 && scale->dim(0) == NB &&
             scale->dim(1) == KB && scale->is_contiguous() && scale->device() == w.device(),
         "W", w, "with contiguous f32 block scales [{}, {}], has {}", NB, KB,
         scale ? scale->str() : std::string("none"));
  if (!fp8_scale_rows_padded(w.dim(1))) return;
  const Tensor* padded = w.padded_block_scale();
  c.need(padded && padded->dtype() == DType::kF32 && padded->ndim() == 2 && padded->dim(0) == NB &&
             padded->dim(1) == scratch::round_up(KB, 4) && padded->is_contiguous() &&
             padded->device() == w.device(),
         "W", w, "with its block scales padded to [{}, {}] at load, has {}", NB,
         scratch::round_up(KB, 4), padded ? padded->str() : std::string("none"));
}

// accumulate: y += x·Wᵀ instead of y = x·Wᵀ. xq: x already quantised (ops::fp8_input), read
// instead of quantising x again.
inline void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate = false,
                   const Tensor& xq = {}) {
  MLS_DISPATCH_SCRATCH(y, linear_scratch(x, w, xq), linear, x, w, y, accumulate, xq);
}

// The quantised input a pair passes to one of its weights: xq for a block-FP8 weight, none for
// a bf16 one.
inline Tensor pair_input(const Tensor& w, const Tensor& xq) {
  return w.dtype() == DType::kFP8E4M3 ? xq : Tensor();
}

// Two linears of one input: y1 = x·W1ᵀ and y2 = x·W2ᵀ, each as ops::linear computes it, in
// fewer launches where the device can (two block-FP8 weights on a GPU: one quantisation of x,
// and one launch of the decode GEMM for both). Each pair meets linear's contract (the weights'
// dtypes may differ: a weight whose slice is not whole 128 × 128 blocks stays bf16), and y1 and
// y2 do not overlap. xq as linear's, for the block-FP8 weights among the two (at least one).
inline void linear_pair_contract(const Tensor& x, const Tensor& w1, const Tensor& y1,
                                 const Tensor& w2, const Tensor& y2, const Tensor& xq = {}) {
  const Contract c("linear_pair", y1);
  c.need(!xq.defined() || w1.dtype() == DType::kFP8E4M3 || w2.dtype() == DType::kFP8E4M3, "xq", xq,
         "absent: neither W is block-FP8");
  linear_contract(x, w1, y1, false, pair_input(w1, xq));
  linear_contract(x, w2, y2, false, pair_input(w2, xq));
  c.disjoint("y2", y2, "y1", y1);
}

// The scratch of one quantisation of x, for whichever weight is block-FP8 (both share it).
inline void linear_pair(const Tensor& x, const Tensor& w1, Tensor& y1, const Tensor& w2, Tensor& y2,
                        const Tensor& xq = {}) {
  MLS_DISPATCH_SCRATCH(y1, linear_scratch(x, w1.dtype() == DType::kFP8E4M3 ? w1 : w2, xq),
                       linear_pair, x, w1, y1, w2, y2, xq);
}

// Per-head products, one call for all heads b: y[:, b, :] = x[:, b, :] · W[b]ᵀ with
// x [T, B, in] and y [T, B, out] (strided, unit innermost stride) and W [B, out, in] (rows
// contiguous, any batch stride: W may be a head-strided view of a larger matrix).
inline void linear_batched_contract(const Tensor& x, const Tensor& w, const Tensor& y) {
  const Contract c("linear_batched", y);
  c.rows("x", x, 3);
  c.rows("y", y, 3);
  c.rows("W", w, 3);
  c.need(w.dim(0) == x.dim(1) && w.dim(2) == x.dim(2) && (w.dim(1) <= 1 || w.stride(1) >= w.dim(2)),
         "W", w, "[{}, N, {}] with rows apart", x.dim(1), x.dim(2));
  c.need(y.dim(0) == x.dim(0) && y.dim(1) == x.dim(1) && y.dim(2) == w.dim(1), "y", y,
         "[{}, {}, {}]", x.dim(0), x.dim(1), w.dim(1));
  c.rows_apart("x", x, x.dim(2));
  c.rows_apart("y", y, y.dim(2));
  c.on_device("x", x);
  c.on_device("W", w);
  c.disjoint("y", y, "x", x);
  c.disjoint("y", y, "W", w);
  c.activation("x", x, false);
  c.activation("W", w, false);
  c.activation("y", y);
}

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
