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
// CTA of kWarps warps owns 16·kMT output rows of one active expert and walks that expert's rows
// 8·NT at a time: the NT 8-row MMA column tiles of a pass share each weight load, so an expert
// with up to 8·NT rows streams its weights once, and tiles past the expert's rows are skipped
// (no loads, no MMAs). Gated, half the warps take the gate matrix and half the up matrix (a warp
// holds one matrix's fragments: registers for more tiles), and the CTA stores silu(gate) · up.
// A matrix's warp w takes K blocks w, w + its warps, ... with mma.sync m16n8k32 e4m3 (weights as
// A, rows as B) for each of its kMT 16-row weight tiles against one load of the rows (the rows'
// bytes, from L2, would otherwise rival the weights' when every row of a tile is present), each
// block's fp32 partial scaled by sw · sx (DeepSeek's promotion per 128 K), its warps summed in
// warp order through shared memory. No split-K, and a row's sums are the same for every NT: they
// never depend on the grid or the step.

constexpr int kWarps = 8;
constexpr int kMT = 2;  // 16-row weight tiles per warp, against one load of the rows
constexpr int kU = 1;   // K blocks in flight per warp (kMT · 16 weight rows each)

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 16 bytes of a K-contiguous row at k (zeros past K or when !ok); K % 16 == 0.
__device__ __forceinline__ uint4 load16(const uint8_t* row, int64_t k, int64_t K, bool ok) {
  if (!ok || k >= K) return make_uint4(0, 0, 0, 0);
  return __ldg(reinterpret_cast<const uint4*>(row + k));
}

template <bool kGated, int NT>
__global__ void __launch_bounds__(kWarps * 32, 2) moe_fp8_gemm_kernel(const MoeFp8GemmArgs a) {
  pdl_begin();
  constexpr int kM = kGated ? 2 : 1;  // weight matrices
  constexpr int kWpm = kWarps / kM;   // warps per matrix
  __shared__ float red[kWarps][kMT * NT * 4][32];

  if (static_cast<int>(blockIdx.y) >= a.active[0]) return;
  const int e = a.active[1 + blockIdx.y];
  const int64_t r_begin = a.offsets[e], r_end = a.offsets[e + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int m = warp / kWpm, kw = warp % kWpm;  // this warp's matrix and K lane
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16 * kMT;
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

  for (int64_t tok0 = r_begin; tok0 < r_end; tok0 += 8 * NT) {
    const int64_t left = (r_end - tok0 + 7) / 8;
    const int nt = left < NT ? static_cast<int>(left) : NT;  // CTA-uniform
    // Row g of each 8-row tile j.
    const uint8_t* xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int64_t tok = tok0 + 8 * j + g;
      xok[j] = tok < r_end;
      xrow[j] = a.xq + (xok[j] ? tok : 0) * a.ldq;
    }
    float acc[kMT][NT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

    for (int64_t kb0 = kw; kb0 < KB; kb0 += kWpm * kU) {
      // Every load of the kU blocks is issued before the first MMA, the scales included: a
      // scale read after the weights arrive would add a second memory latency per block.
      uint4 wv[kU][kMT][2][2];  // [u][tile][row g / g + 8][half of the 128-wide block]
      uint4 xv[kU][NT][2];
      float ws[kU][kMT], sx[kU][NT][2];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t kb = kb0 + u * kWpm;
        const bool kin = kb < KB;
#pragma unroll
        for (int i = 0; i < kMT; ++i) ws[u][i] = kin ? __ldg(sw_row[i] + kb) : 0.0f;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          // C fragment columns: tokens 2·t4 and 2·t4 + 1 of tile j.
          const int64_t c0 = tok0 + 8 * j + 2 * t4;
          const float* xs = a.x_scale + kb * a.x_scale_ld;
          sx[u][j][0] = kin && j < nt && c0 < r_end ? __ldg(xs + c0) : 0.0f;
          sx[u][j][1] = kin && j < nt && c0 + 1 < r_end ? __ldg(xs + c0 + 1) : 0.0f;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t k = kb * 128 + h * 64 + t4 * 16;
#pragma unroll
          for (int i = 0; i < kMT; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              wv[u][i][r][h] = load16(wrow[i][r], k, a.K, kin && wok[i][r]);
#pragma unroll
          for (int j = 0; j < NT; ++j)
            xv[u][j][h] = load16(xrow[j], k, a.K, kin && j < nt && xok[j]);
        }
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t kb = kb0 + u * kWpm;
        if (kb >= KB) break;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if (j >= nt) break;
#pragma unroll
          for (int i = 0; i < kMT; ++i) {
            float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
              for (int s = 0; s < 2; ++s)
                mma_e4m3(part, word(wv[u][i][0][h], 2 * s), word(wv[u][i][1][h], 2 * s),
                         word(wv[u][i][0][h], 2 * s + 1), word(wv[u][i][1][h], 2 * s + 1),
                         word(xv[u][j][h], 2 * s), word(xv[u][j][h], 2 * s + 1));
            // C fragment: registers 0, 1 are (row g, tokens 2·t4, 2·t4 + 1), 2, 3 row g + 8.
            acc[i][j][0] += part[0] * (sx[u][j][0] * ws[u][i]);
            acc[i][j][1] += part[1] * (sx[u][j][1] * ws[u][i]);
            acc[i][j][2] += part[2] * (sx[u][j][0] * ws[u][i]);
            acc[i][j][3] += part[3] * (sx[u][j][1] * ws[u][i]);
          }
        }
      }
    }

#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) red[warp][(i * NT + j) * 4 + r][lane] = acc[i][j][r];
    __syncthreads();
    // Element idx: weight tile i's and row tile j's lane ln, C register r (row 16·i + (ln >> 2)
    // + 8·(r >= 2), token 8·j + 2·(ln & 3) + r % 2); matrix mm sums its warps mm·kWpm, ...
    for (int idx = threadIdx.x; idx < kMT * nt * 4 * 32; idx += blockDim.x) {
      const int e4 = idx >> 5, r = e4 & 3, ij = e4 >> 2, i = ij / nt, j = ij % nt, ln = idx & 31;
      const int64_t row = n0 + 16 * i + (ln >> 2) + (r >= 2 ? 8 : 0);
      const int64_t t = tok0 + 8 * j + 2 * (ln & 3) + (r & 1);
      if (row >= a.N || t >= r_end) continue;
      float v[kM];
#pragma unroll
      for (int mm = 0; mm < kM; ++mm) {
        v[mm] = 0.0f;
#pragma unroll
        for (int ww = 0; ww < kWpm; ++ww) v[mm] += red[mm * kWpm + ww][(i * NT + j) * 4 + r][ln];
      }
      float out = v[0];
      if constexpr (kGated) out = v[0] / (1.0f + __expf(-v[0])) * v[1];
      static_cast<__nv_bfloat16*>(a.y)[t * a.ldy + row] = __float2bfloat16(out);
    }
    __syncthreads();  // red is reused by the next pass
  }
}

// Measured on the H200 at GLM-5's shapes (bench/fp8_kernels_benchmark, bench/RESULTS.md): one
// row tile per pass up to a mean of 8 rows per active expert (the experts past 8 rows stream
// their weights twice, which costs less than every pass carrying a second tile), two above.
int moe_tiles_per_pass(int64_t rows, int max_active) {
  return rows <= 8 * static_cast<int64_t>(std::max(1, max_active)) ? 1 : 2;
}

template <bool kGated>
void launch_tiles(const MoeFp8GemmArgs& a, int tiles, dim3 grid, cudaStream_t stream) {
  if (tiles >= 2)
    launch(moe_fp8_gemm_kernel<kGated, 2>, grid, kWarps * 32, 0, stream, a);
  else
    launch(moe_fp8_gemm_kernel<kGated, 1>, grid, kWarps * 32, 0, stream, a);
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
  const int64_t row_tiles = (a.N + 16 * kMT - 1) / (16 * kMT);
  if (row_tiles > std::numeric_limits<int>::max() || a.max_active > 65535 || a.K % 16 != 0)
    return cudaErrorInvalidValue;
  const int tiles =
      a.tiles_per_pass > 0 ? a.tiles_per_pass : moe_tiles_per_pass(a.rows, a.max_active);
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(a.max_active));
  if (a.gated)
    launch_tiles<true>(a, tiles, grid, stream);
  else
    launch_tiles<false>(a, tiles, grid, stream);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
