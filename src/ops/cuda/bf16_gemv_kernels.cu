// The few-token bf16 GEMMs (bf16_gemv_kernels.h). A CTA of 256 threads owns kRows rows of W; its
// threads take 16-byte chunks of K (8 values) in turn, kUnroll chunks per row loaded before any
// arithmetic (the loads in flight are what streams W), and keep kRows × T fp32 sums. The sums
// are reduced over the warp by shuffles and over the CTA's warps in warp order: a fixed order
// that T does not change, so a token's output is the same alone or in a batch. The batched
// kernel gives each row of W 8 lanes (per-head K is short: 192 or 512) and reduces them by a
// fixed shuffle tree.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "ops/cuda/bf16_gemv_kernels.h"
#include "ops/cuda/launch.cuh"

namespace mls::ops::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 2;
constexpr int kUnroll = 4;

__device__ __forceinline__ void to_f32(const uint4& u, float* f) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 p = __bfloat1622float2(h[j]);
    f[2 * j] = p.x;
    f[2 * j + 1] = p.y;
  }
}

template <int T>
__global__ void __launch_bounds__(kThreads) bf16_gemv_kernel(const Bf16GemvArgs a) {
  pdl_begin();
  __shared__ float red[kWarps][kRows * T];
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int chunks = a.K / 8;
  const auto* w = reinterpret_cast<const uint4*>(a.w);
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(a.x);
  float acc[kRows][T];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;

  for (int base = 0; base < chunks; base += kThreads * kUnroll) {
    uint4 wv[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * kThreads + static_cast<int>(threadIdx.x);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        wv[u][r] =
            c < chunks && n0 + r < a.N ? __ldg(w + (n0 + r) * chunks + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = base + u * kThreads + static_cast<int>(threadIdx.x);
      if (c >= chunks) break;
      float wf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) to_f32(wv[u][r], wf[r]);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float xf[8];
        to_f32(__ldg(reinterpret_cast<const uint4*>(x + t * a.ldx) + c), xf);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r][t] = __fmaf_rn(xf[j], wf[r][j], acc[r][t]);
      }
    }
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float v = acc[r][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
      if (lane == 0) red[warp][r * T + t] = v;
    }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) >= kRows * T) return;
  const int r = static_cast<int>(threadIdx.x) / T, t = static_cast<int>(threadIdx.x) % T;
  if (n0 + r >= a.N) return;
  float v = red[0][threadIdx.x];
#pragma unroll
  for (int k = 1; k < kWarps; ++k) v = __fadd_rn(v, red[k][threadIdx.x]);
  const int64_t at = t * a.ldy + n0 + r;
  if (a.y_f32) {
    float* y = static_cast<float*>(a.y) + at;
    *y = a.accumulate ? __fadd_rn(*y, v) : v;
  } else {
    __nv_bfloat16* y = static_cast<__nv_bfloat16*>(a.y) + at;
    *y = __float2bfloat16_rn(a.accumulate ? __fadd_rn(__bfloat162float(*y), v) : v);
  }
}

constexpr int kRowLanes = 8;                        // lanes sharing a row of W
constexpr int kBatchedRows = kThreads / kRowLanes;  // rows of W a CTA of the batched kernel
constexpr int kBatchedUnroll = 4;                   // chunks per lane loaded before arithmetic

template <int T>
__global__ void __launch_bounds__(kThreads) bf16_gemv_batched_kernel(const Bf16GemvBatchedArgs a) {
  pdl_begin();
  const int b = blockIdx.y;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kBatchedRows + threadIdx.x / kRowLanes;
  const int sub = threadIdx.x % kRowLanes;
  const int chunks = a.K / 8;
  const bool row_ok = n < a.N;
  const auto* w = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.w) +
                                                 b * a.w_sb + (row_ok ? n : 0) * a.w_sn);
  const auto* x = static_cast<const __nv_bfloat16*>(a.x) + b * a.x_sb;
  float acc[T];
#pragma unroll
  for (int t = 0; t < T; ++t) acc[t] = 0.0f;
  for (int base = 0; base < chunks; base += kRowLanes * kBatchedUnroll) {
    uint4 wv[kBatchedUnroll];
#pragma unroll
    for (int u = 0; u < kBatchedUnroll; ++u) {
      const int c = base + u * kRowLanes + sub;
      wv[u] = row_ok && c < chunks ? __ldg(w + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kBatchedUnroll; ++u) {
      const int c = base + u * kRowLanes + sub;
      if (c >= chunks) break;
      float wf[8];
      to_f32(wv[u], wf);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float xf[8];
        to_f32(__ldg(reinterpret_cast<const uint4*>(x + t * a.x_st) + c), xf);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[t] = __fmaf_rn(xf[j], wf[j], acc[t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int o = kRowLanes / 2; o > 0; o >>= 1)
      acc[t] = __fadd_rn(acc[t], __shfl_xor_sync(0xffffffffu, acc[t], o));
  if (sub != 0 || !row_ok) return;
#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int64_t at = t * a.y_st + b * a.y_sb + n;
    if (a.y_f32)
      static_cast<float*>(a.y)[at] = acc[t];
    else
      static_cast<__nv_bfloat16*>(a.y)[at] = __float2bfloat16_rn(acc[t]);
  }
}

template <int T>
cudaError_t launch_batched_t(const Bf16GemvBatchedArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>((a.N + kBatchedRows - 1) / kBatchedRows),
                  static_cast<unsigned int>(a.B));
  launch(bf16_gemv_batched_kernel<T>, grid, kThreads, 0, stream, a);
  return cudaGetLastError();
}

template <int T>
cudaError_t launch_t(const Bf16GemvArgs& a, cudaStream_t stream) {
  const auto ctas = static_cast<unsigned int>((a.N + kRows - 1) / kRows);
  launch(bf16_gemv_kernel<T>, ctas, kThreads, 0, stream, a);
  return cudaGetLastError();
}

// f(std::integral_constant<int, T>) for the call's token count T (1..kBf16GemvMaxTokens): both
// kernels are compiled per token count.
template <class F>
cudaError_t with_tokens(int T, F f) {
  return [&]<int... I>(std::integer_sequence<int, I...>) {
    cudaError_t e = cudaErrorInvalidValue;
    (void)((T == I + 1 ? (e = f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
    return e;
  }
  (std::make_integer_sequence<int, kBf16GemvMaxTokens>{});
}

}  // namespace

cudaError_t launch_bf16_gemv(const Bf16GemvArgs& a, cudaStream_t stream) {
  static_assert(kBf16GemvMaxTokens == 8 && kRows * kBf16GemvMaxTokens <= kThreads);
  return with_tokens(a.T, [&](auto t) { return launch_t<t>(a, stream); });
}

cudaError_t launch_bf16_gemv_batched(const Bf16GemvBatchedArgs& a, cudaStream_t stream) {
  return with_tokens(a.T, [&](auto t) { return launch_batched_t<t>(a, stream); });
}

}  // namespace mls::ops::cuda::kernels
