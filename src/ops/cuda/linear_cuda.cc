#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/bf16_gemv_kernels.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_act_kernels.h"
#include "ops/cuda/fp8_quant_kernels.h"
#include "ops/linear.h"

namespace mls::ops::cuda {
namespace {

cudaDataType_t out_type(DType t) {
  return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
}

// A row stride cuBLASLt accepts (>= the row length); a single row's stride is never used.
int64_t lead(const Tensor& t, int64_t rows, int64_t row_len) {
  return rows == 1 ? std::max(t.stride(0), row_len) : t.stride(0);
}

// The operands share y's device (the contract); cuBLASLt runs on the calling thread's.
void check_devices(const char* op, const Tensor& y) {
  const Device here = Device::cuda(mls::cuda::device());
  if (y.device() != here)
    raise<ShapeError>("{}: y on {}: must be on this thread's {}", op, y.device().str(), here.str());
}

// y = 0 for an empty reduction (k = 0), which cuBLASLt does not take.
void zero_rows(Tensor& y, int64_t rows, int64_t cols) {
  const size_t es = dtype_size(y.dtype());
  mls::cuda::check(cudaMemset2DAsync(y.raw(), static_cast<size_t>(lead(y, rows, cols)) * es, 0,
                                     cols * es, static_cast<size_t>(rows), mls::cuda::stream()),
                   "linear: zero output");
}

// One or two block-FP8 weights of the same input (n = 1 or 2): the input is quantised once (or
// read quantised from xq) and each output computed as a linear of its own weight alone computes
// it (bitwise; if cuBLASLt had an algorithm for one weight's shape and not the other's, both take
// our kernel).
void linear_fp8(const Tensor& x, const Tensor* const* w, Tensor* const* y, int n, bool accumulate,
                const Tensor& xq) {
  const int64_t T = x.dim(0), K = w[0]->dim(1);
  const int64_t KB = (K + 127) / 128;
  const cudaStream_t stream = mls::cuda::stream();

  // The quantised activations and their scales: xq, or the scratch of ops::linear_scratch.
  Tensor qbuf;
  if (!xq.defined())
    qbuf = Tensor::empty({scratch::fp8_act_bytes(T, K)}, DType::kFP8E4M3, MemTag::kWorkspace,
                         mls::cuda::allocator());
  const auto [q, ldq, xs] = kernels::fp8_act_buffer((xq.defined() ? xq : qbuf).raw(), T, K);

  // cuBLASLt's block-scaled GEMM (weights BLK128x128, activations VEC128) needs whole 128-wide
  // K blocks and a token count divisible by 4 (it has no algorithm otherwise): it takes the
  // largest such leading part of a prefill, our kernel the rest (at most 3 tokens) and decodes.
  // cuBLASLt wants each row of 128x128 block scales padded to a multiple of 4 floats: a K whose
  // block count is not a multiple of 4 reads the copy padded at load
  // (ops::attach_padded_block_scale; the contract requires it).
  // Which FP8 linears run cuBLASLt's block-scaled GEMM (its leading multiple of 4 tokens; ours
  // takes the rest) rather than only our weight-streaming kernel: scratch::fp8_cublaslt_tokens,
  // measured on the H200 at GLM-5 shapes (ours is faster up to 8 tokens, they are even up to 16
  // with cuBLASLt ahead on large weights, and above that cuBLASLt wins clearly; a token count
  // that is not a multiple of 4 costs the cuBLASLt route a second weight pass for the tail,
  // which only pays past 32 tokens).
  const int64_t lt_rows = scratch::fp8_cublaslt_lead(T, K);
  LtLinear p[2];
  bool lt = lt_rows > 0;
  for (int i = 0; i < n; ++i) {
    const Tensor* lt_scale =
        fp8_scale_rows_padded(K) ? w[i]->padded_block_scale() : w[i]->block_scale();
    p[i] = {.m = lt_rows,
            .n = w[i]->dim(0),
            .k = K,
            .x = q,
            .ldx = ldq,
            .w = w[i]->raw(),
            .ldw = K,
            .y = y[i]->raw(),
            .ldy = y[i]->stride(0),
            .ab_type = CUDA_R_8F_E4M3,
            .y_type = CUDA_R_16BF,
            .accumulate = accumulate,
            .block_scaled = true,
            .x_scale = xs,
            .w_scale = lt_scale->data<float>()};
    lt = lt && lt_linear_supported(p[i]);
  }
  const int64_t t_lead = lt ? lt_rows : 0;  // the tokens cuBLASLt takes
  // xq's scales are laid out for lt_rows leading tokens (ops/fp8_input.h); ours for t_lead.
  const int64_t q_lead = xq.defined() ? lt_rows : t_lead;
  if (!xq.defined())
    mls::cuda::check(
        kernels::launch_quantize_fp8_act(x.raw(), lead(x, T, K), T, K, ldq, q_lead, q, xs, stream),
        "linear: FP8 activation quantisation");
  if (t_lead > 0)
    for (int i = 0; i < n; ++i) lt_linear(p[i]);

  // Our kernel on tokens [t0, t1), whose scales lie token-major per K block from `scales`.
  const GemmScratch scratch = gemm_scratch();
  const auto skinny = [&](int64_t t0, int64_t t1, const float* scales) {
    kernels::Fp8GemmArgs a{.out = {},
                           .xq = q + t0 * ldq,
                           .ldq = ldq,
                           .x_scale = scales,
                           .x_scale_ld = t1 - t0,
                           .K = K,
                           .T = t1 - t0,
                           .accumulate = accumulate,
                           .partial = scratch.partial,
                           .partial_bytes = scratch.partial_bytes,
                           .counters = scratch.counters,
                           .num_counters = scratch.num_counters,
                           .num_sms = scratch.num_sms};
    for (int i = 0; i < n; ++i) {
      const int64_t N = w[i]->dim(0), ldy = lead(*y[i], T, N);
      a.out[i] = {
          .w = w[i]->data<uint8_t>(),
          .w_scale = w[i]->block_scale()->data<float>(),
          .y = static_cast<char*>(y[i]->raw()) + t0 * ldy * static_cast<int64_t>(sizeof(uint16_t)),
          .ldy = ldy,
          .N = N};
    }
    mls::cuda::check(kernels::launch_fp8_gemm_skinny(a, stream), "linear: FP8 GEMM");
  };
  if (t_lead == T) return;
  if (q_lead == t_lead) return skinny(t_lead, T, xs + KB * t_lead);
  // xq laid out for cuBLASLt's tokens, which it had no algorithm for: ours takes both parts.
  skinny(0, q_lead, xs);
  skinny(q_lead, T, xs + KB * q_lead);
}

}  // namespace

void take_linear_workspace() {
  lt_prepare();
}

void pad_block_scale(const Tensor& scale, Tensor& padded) {
  if (scale.dtype() != DType::kF32 || padded.dtype() != DType::kF32 || scale.ndim() != 2 ||
      padded.ndim() != 2 || !scale.is_contiguous() || !padded.is_contiguous() ||
      padded.dim(0) != scale.dim(0) || padded.dim(1) < scale.dim(1))
    raise<ShapeError>("pad_block_scale: {} into {}", scale.str(), padded.str());
  mls::cuda::check(
      kernels::launch_pad_scale_rows(scale.data<float>(), scale.dim(0), scale.dim(1), padded.dim(1),
                                     padded.data<float>(), mls::cuda::stream()),
      "pad FP8 weight scales");
}

void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate, const Tensor& xq) {
  const bool fp8 = w.dtype() == DType::kFP8E4M3;
  check_devices("linear", y);
  const int64_t T = x.dim(0), N = w.dim(0), K = w.dim(1);
  if (T == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) zero_rows(y, T, N);
    return;
  }
  if (fp8) {
    const Tensor* ws[] = {&w};
    Tensor* ys[] = {&y};
    return linear_fp8(x, ws, ys, 1, accumulate, xq);
  }
  // Few tokens on a small weight, where the model allows it (ops::bf16_linears_by_step_size): the
  // streaming kernel (bf16_gemv_kernels.h says where it wins).
  const kernels::Bf16GemvArgs g{.x = x.raw(),
                                .ldx = x.stride(0),
                                .w = w.raw(),
                                .y = y.raw(),
                                .ldy = y.stride(0),
                                .y_f32 = y.dtype() == DType::kF32,
                                .accumulate = accumulate,
                                .N = N,
                                .K = static_cast<int>(K),
                                .T = static_cast<int>(T)};
  if (bf16_linears_by_step_size && T <= kernels::kBf16GemvMaxTokens && K <= INT32_MAX &&
      kernels::bf16_gemv_applies(g))
    return mls::cuda::check(kernels::launch_bf16_gemv(g, mls::cuda::stream()), "linear: bf16 GEMV");
  lt_linear({.m = T,
             .n = N,
             .k = K,
             .x = x.raw(),
             .ldx = lead(x, T, K),
             .w = w.raw(),
             .ldw = K,
             .y = y.raw(),
             .ldy = lead(y, T, N),
             .ab_type = CUDA_R_16BF,
             .y_type = out_type(y.dtype()),
             .accumulate = accumulate,
             .invariant = !bf16_linears_by_step_size});
}

void linear_pair(const Tensor& x, const Tensor& w1, Tensor& y1, const Tensor& w2, Tensor& y2,
                 const Tensor& xq) {
  check_devices("linear_pair", y1);
  if (w1.dtype() != DType::kFP8E4M3 || w2.dtype() != DType::kFP8E4M3 || x.dim(0) == 0 ||
      x.dim(1) == 0 || w1.dim(0) == 0 || w2.dim(0) == 0) {
    linear(x, w1, y1, false, pair_input(w1, xq));
    return linear(x, w2, y2, false, pair_input(w2, xq));
  }
  const Tensor* ws[] = {&w1, &w2};
  Tensor* ys[] = {&y1, &y2};
  linear_fp8(x, ws, ys, 2, false, xq);
}

void linear_batched(const Tensor& x, const Tensor& w, Tensor& y) {
  check_devices("linear_batched", y);
  const int64_t T = x.dim(0), B = w.dim(0), N = w.dim(1), K = w.dim(2);
  if (T == 0 || B == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t b = 0; b < B; ++b) {
      Tensor yb = y.select(1, b);
      zero_rows(yb, T, N);
    }
    return;
  }
  // One token, where the model allows it (ops::bf16_linears_by_step_size): the streaming kernel
  // (bf16_gemv_kernels.h says where it wins).
  const kernels::Bf16GemvBatchedArgs g{.x = x.raw(),
                                       .x_st = x.stride(0),
                                       .x_sb = x.stride(1),
                                       .w = w.raw(),
                                       .w_sb = w.stride(0),
                                       .w_sn = w.stride(1),
                                       .y = y.raw(),
                                       .y_st = y.stride(0),
                                       .y_sb = y.stride(1),
                                       .y_f32 = y.dtype() == DType::kF32,
                                       .B = static_cast<int>(B),
                                       .N = static_cast<int>(N),
                                       .K = static_cast<int>(K),
                                       .T = static_cast<int>(T)};
  if (bf16_linears_by_step_size && T <= kernels::kBf16GemvBatchedRouteTokens && B <= 65535 &&
      N <= INT32_MAX && K <= INT32_MAX && kernels::bf16_gemv_batched_applies(g))
    return mls::cuda::check(kernels::launch_bf16_gemv_batched(g, mls::cuda::stream()),
                            "linear_batched: bf16 GEMV");
  lt_linear({.m = T,
             .n = N,
             .k = K,
             .batch = B,
             .x = x.raw(),
             .ldx = lead(x, T, K),
             .batch_stride_x = x.stride(1),
             .w = w.raw(),
             .ldw = N == 1 ? std::max(w.stride(1), K) : w.stride(1),
             .batch_stride_w = w.stride(0),
             .y = y.raw(),
             .ldy = lead(y, T, N),
             .batch_stride_y = y.stride(1),
             .ab_type = CUDA_R_16BF,
             .y_type = out_type(y.dtype()),
             .invariant = !bf16_linears_by_step_size});
}

}  // namespace mls::ops::cuda
