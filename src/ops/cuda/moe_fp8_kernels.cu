#include <cuda_bf16.h>

#include <limits>

#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/moe_fp8_kernels.h"

namespace mls::ops::cuda::kernels {
namespace {

// ---- Active experts --------------------------------------------------------------------------

__global__ void moe_active_experts_kernel(const int32_t* __restrict__ offsets, int E,
                                          int32_t* __restrict__ active) {
  __shared__ int warp_sums[32];
  const int e = threadIdx.x, lane = e & 31, warp = e >> 5;
  const int has = e < E && offsets[e + 1] > offsets[e];
  const unsigned ballot = __ballot_sync(0xffffffffu, has);
  if (lane == 0) warp_sums[warp] = __popc(ballot);
  __syncthreads();
  int before = __popc(ballot & ((1u << lane) - 1));
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
  if (has) active[1 + before] = e;
  if (e == blockDim.x - 1) {
    int total = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += warp_sums[w];
    active[0] = total;
  }
}

// ---- Grouped GEMM --------------------------------------------------------------------------
//
// The block-FP8 skinny GEMM of fp8_quant_kernels.cu (see there) with the expert as grid.y: a
// CTA of kWarps warps owns 16 output rows of one active expert and walks that expert's rows 8
// at a time; warp w takes K blocks w, w + kWarps, ... with mma.sync m16n8k32 e4m3 (weights as
// A, rows as B), each block's fp32 partial scaled by sw · sx (DeepSeek's promotion per 128 K),
// the warps summed in warp order through shared memory. Gated, the CTA computes gate and up
// rows together and stores silu(gate) · up. No split-K: a row's sums never depend on the grid.

constexpr int kWarps = 8;
constexpr int kU = 2;  // K blocks in flight per warp

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 16 bytes of a K-contiguous row at k (zeros past K or when !ok); K % 16 == 0.
__device__ __forceinline__ uint4 load16(const uint8_t* row, int64_t k, int64_t K, bool ok) {
  if (!ok || k >= K) return make_uint4(0, 0, 0, 0);
  return __ldg(reinterpret_cast<const uint4*>(row + k));
}

template <bool kGated>
__global__ void __launch_bounds__(kWarps * 32) moe_fp8_gemm_kernel(const MoeFp8GemmArgs a) {
  constexpr int kM = kGated ? 2 : 1;  // weight matrices
  __shared__ float red[kWarps][kM * 4][32];

  if (static_cast<int>(blockIdx.y) >= a.active[0]) return;
  const int e = a.active[1 + blockIdx.y];
  const int64_t r_begin = a.offsets[e], r_end = a.offsets[e + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t KB = (a.K + 127) / 128;

  const uint8_t* wrow[kM][2];
  const float* sw_row[kM];
  bool wok[2];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const auto* w = reinterpret_cast<const uint8_t*>(m == 0 ? a.w1[e] : a.w2[e]);
    sw_row[m] = reinterpret_cast<const float*>(m == 0 ? a.s1[e] : a.s2[e]) + (n0 / 128) * a.sw_ld;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = n0 + g + 8 * r;
      wok[r] = row < a.N;
      wrow[m][r] = w + (wok[r] ? row : 0) * a.K;
    }
  }

  for (int64_t tok0 = r_begin; tok0 < r_end; tok0 += 8) {
    const int64_t tok = tok0 + g;
    const bool xok = tok < r_end;
    const uint8_t* xrow = a.xq + (xok ? tok : 0) * a.ldq;
    float acc[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[m][r] = 0.0f;

    for (int64_t kb0 = warp; kb0 < KB; kb0 += kWarps * kU) {
      uint4 wv[kU][kM][2][2];  // [u][matrix][row g / g + 8][half of the 128-wide block]
      uint4 xv[kU][2];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t kb = kb0 + u * kWarps;
        const bool kin = kb < KB;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t k = kb * 128 + h * 64 + t4 * 16;
#pragma unroll
          for (int m = 0; m < kM; ++m)
#pragma unroll
            for (int r = 0; r < 2; ++r) wv[u][m][r][h] = load16(wrow[m][r], k, a.K, kin && wok[r]);
          xv[u][h] = load16(xrow, k, a.K, kin && xok);
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t kb = kb0 + u * kWarps;
        if (kb >= KB) break;
        // C fragment: registers 0, 1 are (row g, tokens 2·t4, 2·t4 + 1), 2, 3 row g + 8.
        const int64_t c0 = tok0 + 2 * t4;
        const float* xs = a.x_scale + kb * a.x_scale_ld;
        const float sx0 = c0 < r_end ? __ldg(xs + c0) : 0.0f;
        const float sx1 = c0 + 1 < r_end ? __ldg(xs + c0 + 1) : 0.0f;
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int s = 0; s < 2; ++s)
              mma_e4m3(part, word(wv[u][m][0][h], 2 * s), word(wv[u][m][1][h], 2 * s),
                       word(wv[u][m][0][h], 2 * s + 1), word(wv[u][m][1][h], 2 * s + 1),
                       word(xv[u][h], 2 * s), word(xv[u][h], 2 * s + 1));
          const float ws = __ldg(sw_row[m] + kb);
          acc[m][0] += part[0] * (sx0 * ws);
          acc[m][1] += part[1] * (sx1 * ws);
          acc[m][2] += part[2] * (sx0 * ws);
          acc[m][3] += part[3] * (sx1 * ws);
        }
      }
    }

#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][m * 4 + r][lane] = acc[m][r];
    __syncthreads();
    // Element idx: lane ln's C register r (row (ln >> 2) + 8·(r >= 2), token 2·(ln & 3) + r % 2).
    for (int idx = threadIdx.x; idx < 4 * 32; idx += blockDim.x) {
      const int r = idx >> 5, ln = idx & 31;
      const int64_t row = n0 + (ln >> 2) + (r >= 2 ? 8 : 0);
      const int64_t t = tok0 + 2 * (ln & 3) + (r & 1);
      if (row >= a.N || t >= r_end) continue;
      float v[kM];
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        v[m] = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v[m] += red[w][m * 4 + r][ln];
      }
      float out = v[0];
      if constexpr (kGated) out = v[0] / (1.0f + __expf(-v[0])) * v[1];
      static_cast<__nv_bfloat16*>(a.y)[t * a.ldy + row] = __float2bfloat16(out);
    }
    __syncthreads();  // red is reused by the next 8 rows
  }
}

}  // namespace

cudaError_t launch_moe_active_experts(const int32_t* offsets, int E, int32_t* active,
                                      cudaStream_t stream) {
  if (E <= 0 || E > 1024) return cudaErrorInvalidValue;
  const int threads = (E + 31) / 32 * 32;
  moe_active_experts_kernel<<<1, threads, 0, stream>>>(offsets, E, active);
  return cudaGetLastError();
}

cudaError_t launch_moe_fp8_gemm(const MoeFp8GemmArgs& a, cudaStream_t stream) {
  if (a.max_active <= 0 || a.N <= 0) return cudaSuccess;
  const int64_t row_tiles = (a.N + 15) / 16;
  if (row_tiles > std::numeric_limits<int>::max() || a.max_active > 65535 || a.K % 16 != 0)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(a.max_active));
  if (a.gated)
    moe_fp8_gemm_kernel<true><<<grid, kWarps * 32, 0, stream>>>(a);
  else
    moe_fp8_gemm_kernel<false><<<grid, kWarps * 32, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
