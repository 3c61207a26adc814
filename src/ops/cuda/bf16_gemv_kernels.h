// A bf16 GEMM for few tokens (decode): y[t, n] = Σ_k x[t, k] · W[n, k] for T <= 8 tokens,
// streaming W with 16-byte loads across many CTAs (two rows of W each, K split over the CTA's
// threads), fp32 accumulation, y f32 or bf16. cuBLASLt's batch-invariant bf16 algorithm
// (cublaslt_gemm.cc: no split-K) puts a small weight on a handful of CTAs: the MoE router
// (256 × 6144) streamed at 0.25 TB/s on the H200, 12.5 µs a layer. Each token's output is
// reduced in one fixed order whatever T is: a row's bits do not depend on the other rows. No
// fmt-based project headers: this is included by nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

inline constexpr int kBf16GemvMaxTokens = 8;
// The largest weight the kernel takes. cuBLASLt streams large weights at the byte floor (the
// 154,880 × 6144 lm_head, 1.9 GB, at 4.1 TB/s) and loses only where its few CTAs cannot fill
// the GPU; 32 MiB is 16 × the router and under 2 % of the lm_head.
inline constexpr int64_t kBf16GemvMaxWeightBytes = int64_t{32} << 20;

struct Bf16GemvArgs {
  const void* x;  // bf16 [T, K], rows ldx elements apart
  int64_t ldx;
  const void* w;  // bf16 [N, K], contiguous
  void* y;        // [T, N], rows ldy elements apart: f32 when y_f32, else bf16
  int64_t ldy;
  bool y_f32;
  bool accumulate;  // y += x · Wᵀ
  int64_t N;
  int K;
  int T;
};

// Whether the kernel takes this call: 1..kBf16GemvMaxTokens tokens, K a positive multiple of 8,
// a weight of at most kBf16GemvMaxWeightBytes, x and W 16-byte aligned with x's rows too.
inline bool bf16_gemv_applies(const Bf16GemvArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.T >= 1 && a.T <= kBf16GemvMaxTokens && a.K > 0 && a.K % 8 == 0 && a.N > 0 &&
         a.N * a.K * 2 <= kBf16GemvMaxWeightBytes && aligned(a.x) && aligned(a.w) &&
         (a.T == 1 || a.ldx % 8 == 0);
}

cudaError_t launch_bf16_gemv(const Bf16GemvArgs& a, cudaStream_t stream);

// Per-head products of few tokens (ops::linear_batched in decode: MLA's absorbed key and value
// projections, 64 heads of [512 × 192] and [256 × 512]): y[t, b, n] = Σ_k x[t, b, k] · W[b, n, k]
// for b < B. cuBLASLt's batched bf16 algorithm streams these 13–17 MB at 1.6–2.2 TB/s. A CTA
// takes 32 rows of one head: 8 lanes a row, each lane 16-byte chunks of K in turn, then a fixed
// shuffle tree; a token's output does not depend on T. Strides in elements.
struct Bf16GemvBatchedArgs {
  const void* x;  // bf16 [T, B, K]: x[t, b] at t · x_st + b · x_sb
  int64_t x_st, x_sb;
  const void* w;  // bf16 [B, N, K]: row n of head b at b · w_sb + n · w_sn
  int64_t w_sb, w_sn;
  void* y;  // [T, B, N]: y[t, b] at t · y_st + b · y_sb; f32 when y_f32, else bf16
  int64_t y_st, y_sb;
  bool y_f32;
  int B, N, K, T;
};

// 1..kBf16GemvMaxTokens tokens, K a positive multiple of 8, the weights at most
// kBf16GemvMaxWeightBytes, x's and W's rows 16-byte aligned.
inline bool bf16_gemv_batched_applies(const Bf16GemvBatchedArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return a.T >= 1 && a.T <= kBf16GemvMaxTokens && a.K > 0 && a.K % 8 == 0 && a.N > 0 && a.B > 0 &&
         int64_t{a.B} * a.N * a.K * 2 <= kBf16GemvMaxWeightBytes && aligned(a.x) && aligned(a.w) &&
         a.x_sb % 8 == 0 && (a.T == 1 || a.x_st % 8 == 0) && a.w_sb % 8 == 0 && a.w_sn % 8 == 0;
}

cudaError_t launch_bf16_gemv_batched(const Bf16GemvBatchedArgs& a, cudaStream_t stream);

// The token counts ops::linear_batched routes to it. Timed alone on the H200 (bench/RESULTS.md,
// session 12) against cuBLASLt at GLM-5's shapes it wins at 1 token (5.0 / 6.6 µs against 5.9 /
// 6.9 µs), breaks even at 2 and loses from 4 (at 8: 9.9 / 13.9 against 5.8 / 6.9 µs).
inline constexpr int kBf16GemvBatchedRouteTokens = 1;

}  // namespace mls::ops::cuda::kernels
