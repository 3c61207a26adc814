#include <cuda_bf16.h>

#include <algorithm>
#include <limits>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/moe_fp8_kernels.h"

namespace mls::ops::cuda::kernels {
namespace {

// ---- Active experts --------------------------------------------------------------------------

__global__ void moe_active_experts_kernel(const int32_t* __restrict__ offsets, int E,
                                          int32_t* __restrict__ active) {
  pdl_begin();
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
// CTA of kWarps warps owns 16·kMT output rows of one active expert and one of `passes` slices
// of that expert's rows: rows 8p .. 8p + 7 of pass p, then 8(p + passes) .., so each pass is
// one 8-row MMA column tile. The passes of a weight tile are adjacent CTAs (blockIdx.x =
// tile · passes + p), so they run side by side and an expert with more than 8 rows streams its
// weights from DRAM about once, the other passes reading them from L2 (ncu: a CTA walking its
// tiles one after another re-read them from DRAM, 1.41× the weights at batch 256); a pass with
// no rows ends at once. Gated, half the warps take the gate matrix and half the up matrix, and
// the CTA stores silu(gate) · up. A matrix's warp w takes K blocks w, w + its warps, ... with
// mma.sync m16n8k32 e4m3 (weights as A, rows as B) for each of its kMT 16-row weight tiles
// against one load of the rows, each block's fp32 partial scaled by sw · sx (DeepSeek's
// promotion per 128 K), its warps summed in warp order through shared memory. No split-K: a
// row's sums never depend on the grid, the pass count or the step.

constexpr int kWarps = 8;
constexpr int kMT = 2;  // 16-row weight tiles per warp, against one load of the rows

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 16 bytes of a K-contiguous row at k (zeros past K or when !ok); K % 16 == 0.
__device__ __forceinline__ uint4 load16(const uint8_t* row, int64_t k, int64_t K, bool ok) {
  if (!ok || k >= K) return make_uint4(0, 0, 0, 0);
  return __ldg(reinterpret_cast<const uint4*>(row + k));
}

template <bool kGated>
__global__ void __launch_bounds__(kWarps * 32, 2)
    moe_fp8_gemm_kernel(const MoeFp8GemmArgs a, int passes) {
  pdl_begin();
  constexpr int kM = kGated ? 2 : 1;  // weight matrices
  constexpr int kWpm = kWarps / kM;   // warps per matrix
  __shared__ float red[kWarps][kMT * 4][32];

  if (static_cast<int>(blockIdx.y) >= a.active[0]) return;
  const int e = a.active[1 + blockIdx.y];
  const int pass = static_cast<int>(blockIdx.x) % passes;
  const int64_t r_begin = a.offsets[e] + 8 * pass, r_end = a.offsets[e + 1];
  if (r_begin >= r_end) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int m = warp / kWpm, kw = warp % kWpm;  // this warp's matrix and K lane
  const int64_t n0 = static_cast<int64_t>(blockIdx.x / passes) * 16 * kMT;
  const int64_t KB = (a.K + 127) / 128;

  const auto* w = reinterpret_cast<const uint8_t*>(m == 0 ? a.w1[e] : a.w2[e]);
  const auto* sw = reinterpret_cast<const float*>(m == 0 ? a.s1[e] : a.s2[e]);
  // Rows g and g + 8 of each of this warp's kMT 16-row weight tiles.
  const uint8_t* wrow[kMT][2];
  const float* sw_row[kMT];
  bool wok[kMT][2];
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
    sw_row[i] = sw + ((n0 + 16 * i) / 128) * a.sw_ld;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = n0 + 16 * i + g + 8 * r;
      wok[i][r] = row < a.N;
      wrow[i][r] = w + (wok[i][r] ? row : 0) * a.K;
    }
  }

  for (int64_t tok0 = r_begin; tok0 < r_end; tok0 += 8 * static_cast<int64_t>(passes)) {
    const int64_t tok = tok0 + g;  // this lane's row (B column g)
    const bool xok = tok < r_end;
    const uint8_t* xrow = a.xq + (xok ? tok : 0) * a.ldq;
    // C fragment columns: rows 2·t4 and 2·t4 + 1 of the tile.
    const int64_t c0 = tok0 + 2 * t4;
    float acc[kMT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][r] = 0.0f;

    for (int64_t kb = kw; kb < KB; kb += kWpm) {
      // Every load of the block is issued before the first MMA, the scales included: a scale
      // read after the weights arrive would add a second memory latency per block.
      uint4 wv[kMT][2][2];  // [tile][row g / g + 8][half of the 128-wide block]
      uint4 xv[2];
      float ws[kMT];
      const float* xs = a.x_scale + kb * a.x_scale_ld;
      const float sx0 = c0 < r_end ? __ldg(xs + c0) : 0.0f;
      const float sx1 = c0 + 1 < r_end ? __ldg(xs + c0 + 1) : 0.0f;
#pragma unroll
      for (int i = 0; i < kMT; ++i) ws[i] = __ldg(sw_row[i] + kb);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k = kb * 128 + h * 64 + t4 * 16;
#pragma unroll
        for (int i = 0; i < kMT; ++i)
#pragma unroll
          for (int r = 0; r < 2; ++r) wv[i][r][h] = load16(wrow[i][r], k, a.K, wok[i][r]);
        xv[h] = load16(xrow, k, a.K, xok);
      }
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s = 0; s < 2; ++s)
            mma_e4m3(part, word(wv[i][0][h], 2 * s), word(wv[i][1][h], 2 * s),
                     word(wv[i][0][h], 2 * s + 1), word(wv[i][1][h], 2 * s + 1), word(xv[h], 2 * s),
                     word(xv[h], 2 * s + 1));
        // C fragment: registers 0, 1 are (weight row g, rows 2·t4, 2·t4 + 1), 2, 3 row g + 8.
        acc[i][0] += part[0] * (sx0 * ws[i]);
        acc[i][1] += part[1] * (sx1 * ws[i]);
        acc[i][2] += part[2] * (sx0 * ws[i]);
        acc[i][3] += part[3] * (sx1 * ws[i]);
      }
    }

#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) red[warp][i * 4 + r][lane] = acc[i][r];
    __syncthreads();
    // Element idx: weight tile i's lane ln, C register r (weight row 16·i + (ln >> 2) +
    // 8·(r >= 2), row 2·(ln & 3) + r % 2 of the tile); matrix mm sums its warps mm·kWpm, ...
    for (int idx = threadIdx.x; idx < kMT * 4 * 32; idx += blockDim.x) {
      const int ir = idx >> 5, i = ir >> 2, r = ir & 3, ln = idx & 31;
      const int64_t row = n0 + 16 * i + (ln >> 2) + (r >= 2 ? 8 : 0);
      const int64_t t = tok0 + 2 * (ln & 3) + (r & 1);
      if (row >= a.N || t >= r_end) continue;
      float v[kM];
#pragma unroll
      for (int mm = 0; mm < kM; ++mm) {
        v[mm] = 0.0f;
#pragma unroll
        for (int ww = 0; ww < kWpm; ++ww) v[mm] += red[mm * kWpm + ww][ir][ln];
      }
      float out = v[0];
      if constexpr (kGated) out = v[0] / (1.0f + __expf(-v[0])) * v[1];
      static_cast<__nv_bfloat16*>(a.y)[t * a.ldy + row] = __float2bfloat16(out);
    }
    __syncthreads();  // red is reused by the next tile
  }
}

// Gate·up (a weight tile of 2 × 32 rows × K): one pass per 8 rows of twice the mean rows per
// active expert (Poisson-like loads rarely exceed that), at most 4; a pass beyond an expert's
// rows costs a CTA that ends at once. Down (32 rows × the intermediate width, a quarter of the
// bytes) is read from DRAM once with one pass (ncu at batch 256: its DRAM bytes equal its
// weights), and extra passes only cost: one. Measured on the H200 at GLM-5's shapes
// (bench/fp8_kernels_benchmark, bench/RESULTS.md "Session 10").
int moe_passes(bool gated, int64_t rows, int max_active) {
  if (!gated) return 1;
  const int64_t twice_mean = 2 * rows / std::max(1, max_active);
  return static_cast<int>(std::clamp<int64_t>((twice_mean + 7) / 8, 1, 4));
}

}  // namespace

cudaError_t launch_moe_active_experts(const int32_t* offsets, int E, int32_t* active,
                                      cudaStream_t stream) {
  if (E <= 0 || E > 1024) return cudaErrorInvalidValue;
  const int threads = (E + 31) / 32 * 32;
  launch(moe_active_experts_kernel, 1, threads, 0, stream, offsets, E, active);
  return cudaGetLastError();
}

cudaError_t launch_moe_fp8_gemm(const MoeFp8GemmArgs& a, cudaStream_t stream) {
  if (a.max_active <= 0 || a.N <= 0) return cudaSuccess;
  const int passes = a.passes > 0 ? a.passes : moe_passes(a.gated, a.rows, a.max_active);
  const int64_t ctas = (a.N + 16 * kMT - 1) / (16 * kMT) * passes;
  if (ctas > std::numeric_limits<int>::max() || a.max_active > 65535 || a.K % 16 != 0)
    return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(a.max_active));
  if (a.gated)
    launch(moe_fp8_gemm_kernel<true>, grid, kWarps * 32, 0, stream, a, passes);
  else
    launch(moe_fp8_gemm_kernel<false>, grid, kWarps * 32, 0, stream, a, passes);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
