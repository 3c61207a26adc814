#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <limits>

#include "ops/cuda/device_facts.h"
#include "ops/cuda/fp8_quant_kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/mma_ptx.cuh"

namespace mls::ops::cuda::kernels {
namespace {

__global__ void pad_scale_rows_kernel(const float* __restrict__ src, int64_t rows, int64_t cols,
                                      int64_t ld_dst, float* __restrict__ dst) {
  pdl_begin();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * ld_dst) return;
  const int64_t r = i / ld_dst, c = i % ld_dst;
  dst[i] = c < cols ? src[r * cols + c] : 0.0f;
}

// ---- Block-scaled FP8 GEMM for few tokens -------------------------------------------------
//
// Weight streaming dominates: every W byte is read once per token group. A CTA of kWarps warps
// owns 16 output rows × 8·NT tokens and one K range (split-K across CTAs when the tiles are
// too few to fill the GPU); warp w takes the range's 128-wide K blocks w, w + kWarps, ... and
// computes each with mma.sync m16n8k32 e4m3 (W rows as A, tokens as B), scaling the block's fp32
// partial by sw·sx before adding it to the accumulators (the DeepSeek promotion per 128 K).
// Operands load straight from global memory, 16 contiguous bytes per lane: a dot product does
// not care about K order, so the same lane-to-K permutation on both operands is exact.
// Warps reduce through shared memory; with split-K the last CTA of a tile (arrival counter) sums
// the fp32 partials in split order, so results are deterministic.

constexpr int kWarps = 8;
constexpr int64_t kRingMinWarpBlocks = 8;

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 16 bytes of a K-contiguous row starting at k (zero past K or when !ok).
template <bool kVec>
__device__ __forceinline__ uint4 load16(const uint8_t* row, int64_t k, int64_t K, bool ok) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (!ok || k >= K) return v;
  if constexpr (kVec) {
    v = __ldg(reinterpret_cast<const uint4*>(row + k));
  } else {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (k + i < K) w[i / 4] |= static_cast<uint32_t>(row[k + i]) << (8 * (i % 4));
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  return v;
}

__device__ __forceinline__ void store_out(const Fp8GemmOutput& o, bool accumulate, int64_t tok,
                                          int64_t row, float v) {
  __nv_bfloat16* y = static_cast<__nv_bfloat16*>(o.y) + tok * o.ldy + row;
  if (accumulate) v += __bfloat162float(*y);
  *y = __float2bfloat16(v);
}

// The warps' partial sums of a CTA's tile reduced through red (kWarps · NT · 4 · 32 floats of
// shared memory) and stored, or with split-K left as fp32 partials for the tile's last CTA.
template <int NT>
__device__ __forceinline__ void skinny_finish(const Fp8GemmArgs& a, const Fp8GemmOutput& o,
                                              float* partial, int ksplit, int split, int64_t n0,
                                              int64_t tok0, const float (&acc)[NT][4], float* red) {
  constexpr int kE = NT * 4;
  __shared__ bool last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) red[(warp * kE + j * 4 + r) * 32 + lane] = acc[j][r];
  __syncthreads();

  // Element e of lane ln is C register r = e % 4 of token tile j = e / 4.
  auto coords = [&](int idx, int64_t& row, int64_t& tok) {
    const int e = idx >> 5, ln = idx & 31, r = e & 3, j = e >> 2;
    row = n0 + (ln >> 2) + (r >= 2 ? 8 : 0);
    tok = tok0 + 8 * j + 2 * (ln & 3) + (r & 1);
  };
  const bool direct = ksplit == 1;
  for (int idx = threadIdx.x; idx < kE * 32; idx += blockDim.x) {
    int64_t row, tok;
    coords(idx, row, tok);
    if (row >= o.N || tok >= a.T) continue;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w * kE * 32 + idx];
    if (direct)
      store_out(o, a.accumulate, tok, row, v);
    else
      partial[(split * a.T + tok) * o.N + row] = v;
  }
  if (direct) return;

  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    last = atomicAdd(&a.counters[tile], 1) == ksplit - 1;
    if (last) a.counters[tile] = 0;  // every split has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int idx = threadIdx.x; idx < kE * 32; idx += blockDim.x) {
    int64_t row, tok;
    coords(idx, row, tok);
    if (row >= o.N || tok >= a.T) continue;
    float v = 0.0f;
    for (int s = 0; s < ksplit; ++s) v += __ldcg(partial + (s * a.T + tok) * o.N + row);
    store_out(o, a.accumulate, tok, row, v);
  }
}

// The grid's row tiles are output 0's, then output 1's; each output has its own K split (grid.z
// is the larger) and its own region of the partials.
struct SkinnySplit {
  int tiles0;
  int ksplit[2];
};

// Four CTAs an SM for 8-token tiles (64 registers, no spill; the same arithmetic, instruction for
// instruction): twice the loads in flight of two. Alone, as the model launches them (session
// 19): q_b and wq_b's kind of pair 24.1 -> 18.7 µs, the shared experts' gate/up pair 12.7 -> 10.9,
// shared down 7.4 -> 6.0, the dense gate/up pair 48.6 -> 41.3; a lone 2048-row weight of K 6144
// loses (7.6 -> 9.5 µs), and none runs alone in the model.
template <int NT, bool kVecW>
__global__ void __launch_bounds__(kWarps * 32, NT == 1 ? 4 : 2)
    fp8_gemm_skinny_kernel(const Fp8GemmArgs a, const SkinnySplit sp) {
  pdl_begin();
  constexpr int kE = NT * 4;  // accumulator registers per lane
  constexpr int kU = 2;       // K blocks in flight per warp
  __shared__ float red[kWarps * kE * 32];

  const int out = static_cast<int>(blockIdx.y) < sp.tiles0 ? 0 : 1;
  const int ksplit = out == 0 ? sp.ksplit[0] : sp.ksplit[1];
  const int split = blockIdx.z;
  if (split >= ksplit) return;
  const Fp8GemmOutput o = out == 0 ? a.out[0] : a.out[1];
  float* const partial =
      a.partial + (out == 0 ? 0 : static_cast<int64_t>(sp.ksplit[0]) * a.T * a.out[0].N);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * 8 * NT;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.y) - (out == 0 ? 0 : sp.tiles0)) * 16;
  const int64_t KB = (a.K + 127) / 128;
  const int64_t kb_begin = KB * split / ksplit, kb_end = KB * (split + 1) / ksplit;
  const float* sw_row = o.w_scale + (n0 / 128) * KB;  // 16 rows share one scale row

  // This lane's A rows g and g + 8 of the 16-row tile, and B column (token) g of each 8-token
  // tile j.
  const uint8_t* wrow[2];
  bool wok[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = n0 + g + 8 * r;
    wok[r] = row < o.N;
    wrow[r] = o.w + (wok[r] ? row : 0) * a.K;
  }
  const uint8_t* xrow[NT];
  bool xok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int64_t tok = tok0 + 8 * j + g;
    xok[j] = tok < a.T;
    xrow[j] = a.xq + (xok[j] ? tok : 0) * a.ldq;
  }

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.0f;

  for (int64_t kb0 = kb_begin + warp; kb0 < kb_end; kb0 += kWarps * kU) {
    // Every load of the kU blocks is issued before the first MMA, the scales included: a scale
    // read after the weights arrive would add a second memory latency per block.
    uint4 wv[kU][2][2];  // [u][row g / g + 8][half of the 128-wide block]
    uint4 xv[kU][NT][2];
    float ws[kU], sx[kU][NT][2];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t kb = kb0 + u * kWarps;
      const bool kin = kb < kb_end;
      ws[u] = kin ? __ldg(sw_row + kb) : 0.0f;
      const float* xs = a.x_scale + kb * a.x_scale_ld;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // C fragment columns: tokens 2·t4 and 2·t4 + 1 of tile j.
        const int64_t c0 = tok0 + 8 * j + 2 * t4;
        sx[u][j][0] = kin && c0 < a.T ? __ldg(xs + c0) : 0.0f;
        sx[u][j][1] = kin && c0 + 1 < a.T ? __ldg(xs + c0 + 1) : 0.0f;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t k = kb * 128 + h * 64 + t4 * 16;
#pragma unroll
        for (int r = 0; r < 2; ++r) wv[u][r][h] = load16<kVecW>(wrow[r], k, a.K, kin && wok[r]);
#pragma unroll
        for (int j = 0; j < NT; ++j) xv[u][j][h] = load16<true>(xrow[j], k, a.K, kin && xok[j]);
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t kb = kb0 + u * kWarps;
      if (kb >= kb_end) break;
      float part[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) part[j][r] = 0.0f;
          // A fragment: rows g / g + 8 with 4 bytes each of K slots t4·4.. and 16 + t4·4..; B the
          // same K slots of token g. Words 2s and 2s + 1 of a 16-byte load fill those two slots.
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int j = 0; j < NT; ++j)
            mma_e4m3(part[j], word(wv[u][0][h], 2 * s), word(wv[u][1][h], 2 * s),
                     word(wv[u][0][h], 2 * s + 1), word(wv[u][1][h], 2 * s + 1),
                     word(xv[u][j][h], 2 * s), word(xv[u][j][h], 2 * s + 1));
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        // C fragment: registers 0, 1 are (row g, tokens 2·t4, 2·t4 + 1), 2, 3 row g + 8.
        const float s0 = sx[u][j][0] * ws[u];
        const float s1 = sx[u][j][1] * ws[u];
        acc[j][0] += part[j][0] * s0;
        acc[j][1] += part[j][1] * s1;
        acc[j][2] += part[j][2] * s0;
        acc[j][3] += part[j][3] * s1;
      }
    }
  }

  skinny_finish<NT>(a, o, partial, ksplit, split, n0, tok0, acc, red);
}

// The same tiles, split and per-block arithmetic (so bit-identical results) with the K blocks
// streamed through a ring of kS stages of shared memory per warp (cp.async): kS - 1 blocks stay in
// flight while the warp computes one, where the register version waits for each pair it loads.
// A stage holds the tile's 16 weight rows and 8·NT token rows of one 128-wide K block, each row's
// 16-byte chunks XOR-swizzled by row parity so that a fragment read is free of bank conflicts, and
// the block's scales (sx of the 8·NT tokens, then sw). Its dependents are triggered after the
// main loop (launch.cuh).
template <int NT, int kS>
struct SkinnyRing {
  static constexpr int kW = 16 * 128;
  static constexpr int kX = 8 * NT * 128;
  static constexpr int kStage = kW + kX + 128;
  static constexpr int kBytes = kWarps * kS * kStage;
};

__device__ __forceinline__ int ring_chunk(int row, int chunk) {
  return row * 128 + ((chunk ^ ((row & 1) << 2)) << 4);
}

template <int NT, int kS>
__global__ void __launch_bounds__(kWarps * 32)
    fp8_gemm_skinny_ring_kernel(const Fp8GemmArgs a, const SkinnySplit sp) {
  pdl_wait();
  using L = SkinnyRing<NT, kS>;
  extern __shared__ __align__(128) uint8_t ring_smem[];

  const int out = static_cast<int>(blockIdx.y) < sp.tiles0 ? 0 : 1;
  const int ksplit = out == 0 ? sp.ksplit[0] : sp.ksplit[1];
  const int split = blockIdx.z;
  if (split >= ksplit) return;
  const Fp8GemmOutput o = out == 0 ? a.out[0] : a.out[1];
  float* const partial =
      a.partial + (out == 0 ? 0 : static_cast<int64_t>(sp.ksplit[0]) * a.T * a.out[0].N);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int64_t tok0 = static_cast<int64_t>(blockIdx.x) * 8 * NT;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.y) - (out == 0 ? 0 : sp.tiles0)) * 16;
  const int64_t KB = (a.K + 127) / 128;
  const int64_t kb_begin = KB * split / ksplit, kb_end = KB * (split + 1) / ksplit;
  const float* sw_row = o.w_scale + (n0 / 128) * KB;
  uint8_t* const ring = ring_smem + warp * kS * L::kStage;
  const int64_t first = kb_begin + warp;
  const int nk = first < kb_end ? static_cast<int>((kb_end - first + kWarps - 1) / kWarps) : 0;

  // Block i of this warp into stage i % kS (nothing read past the warp's blocks, the group
  // committed all the same so that the wait counts stay uniform).
  auto issue = [&](int i) {
    uint8_t* st = ring + (i % kS) * L::kStage;
    const int64_t kb = first + static_cast<int64_t>(i) * kWarps;
    const bool kin = i < nk;
#pragma unroll
    for (int c = lane; c < 16 * 8; c += 32) {
      const int row = c >> 3, ch = c & 7;
      const int64_t n = n0 + row, k = kb * 128 + ch * 16;
      const bool ok = kin && n < o.N && k < a.K;
      cp_async16(st + ring_chunk(row, ch), ok ? o.w + n * a.K + k : o.w, ok ? 16 : 0);
    }
#pragma unroll
    for (int c = lane; c < 8 * NT * 8; c += 32) {
      const int tk = c >> 3, ch = c & 7;
      const int64_t tok = tok0 + tk, k = kb * 128 + ch * 16;
      const bool ok = kin && tok < a.T && k < a.K;
      cp_async16(st + L::kW + ring_chunk(tk, ch), ok ? a.xq + tok * a.ldq + k : a.xq, ok ? 16 : 0);
    }
    float* sc = reinterpret_cast<float*>(st + L::kW + L::kX);
    if (lane < 8 * NT) {
      const int64_t tok = tok0 + lane;
      const bool ok = kin && tok < a.T;
      cp_async4(sc + lane, ok ? a.x_scale + kb * a.x_scale_ld + tok : a.x_scale, ok ? 4 : 0);
    } else if (lane == 8 * NT) {
      cp_async4(sc + lane, kin ? sw_row + kb : sw_row, kin ? 4 : 0);
    }
    cp_async_commit();
  };

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.0f;

#pragma unroll
  for (int i = 0; i < kS - 1; ++i) issue(i);
  for (int i = 0; i < nk; ++i) {
    cp_async_wait<kS - 2>();
    __syncwarp();
    // The stage block i - 1 was read from: every lane is past those reads.
    issue(i + kS - 1);
    const uint8_t* st = ring + (i % kS) * L::kStage;
    const float* sc = reinterpret_cast<const float*>(st + L::kW + L::kX);
    uint4 wv[2][2], xv[NT][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        wv[r][h] = *reinterpret_cast<const uint4*>(st + ring_chunk(g + 8 * r, h * 4 + t4));
#pragma unroll
      for (int j = 0; j < NT; ++j)
        xv[j][h] = *reinterpret_cast<const uint4*>(st + L::kW + ring_chunk(8 * j + g, h * 4 + t4));
    }
    float part[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) part[j][r] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int j = 0; j < NT; ++j)
          mma_e4m3(part[j], word(wv[0][h], 2 * s), word(wv[1][h], 2 * s), word(wv[0][h], 2 * s + 1),
                   word(wv[1][h], 2 * s + 1), word(xv[j][h], 2 * s), word(xv[j][h], 2 * s + 1));
    const float ws = sc[8 * NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const float s0 = sc[8 * j + 2 * t4] * ws;
      const float s1 = sc[8 * j + 2 * t4 + 1] * ws;
      acc[j][0] += part[j][0] * s0;
      acc[j][1] += part[j][1] * s1;
      acc[j][2] += part[j][2] * s0;
      acc[j][3] += part[j][3] * s1;
    }
  }
  pdl_trigger();  // launch.cuh: triggered at the start, this kernel slowed the decode step
  cp_async_wait<0>();
  __syncthreads();
  // The ring is done with: its first bytes hold the warps' reduction.
  skinny_finish<NT>(a, o, partial, ksplit, split, n0, tok0, acc,
                    reinterpret_cast<float*>(ring_smem));
}

// Split K while the CTAs stay within one wave of two per SM, keeping >= kWarps K blocks per CTA
// (the split of an output depends on its own sizes only: it is the same alone or beside
// another). Rounded up, the split took more than a wave: the indexer's wq_b (256 row tiles) took
// two splits (8.3 µs alone, now 4.5 µs, and its pair with q_b launched q_b's tiles twice, the
// second half idle), the shared experts' gate and up (128 each) three (9.6 µs, now 7.6 µs):
// fp8_kernels_benchmark, session 19.
int64_t skinny_ksplit(const Fp8GemmArgs& a, int64_t groups, int64_t N) {
  const int64_t tiles = groups * ((N + 15) / 16);
  const int64_t KB = (a.K + 127) / 128;
  const int64_t target = 2LL * a.num_sms;
  int64_t ksplit = 1;
  if (tiles < target && tiles <= a.num_counters)
    ksplit = std::min<int64_t>({target / tiles, std::max<int64_t>(1, KB / kWarps), 16});
  while (ksplit > 1 && static_cast<size_t>(ksplit * a.T * N) * sizeof(float) > a.partial_bytes)
    --ksplit;
  return ksplit;
}

// Four stages of 8-token tiles, three of 16 (about 100 KB a CTA): two CTAs per SM.
template <int NT, int kS = NT == 1 ? 4 : 3>
cudaError_t launch_ring(dim3 grid, const Fp8GemmArgs& a, const SkinnySplit& sp,
                        cudaStream_t stream) {
  constexpr int bytes = SkinnyRing<NT, kS>::kBytes;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess)
    e = allow_optin_smem(dev, reinterpret_cast<const void*>(fp8_gemm_skinny_ring_kernel<NT, kS>));
  if (e != cudaSuccess) return e;
  launch(fp8_gemm_skinny_ring_kernel<NT, kS>, grid, kWarps * 32, bytes, stream, a, sp);
  return cudaGetLastError();
}

template <int NT>
cudaError_t launch_skinny(const Fp8GemmArgs& a, cudaStream_t stream) {
  const int64_t groups = (a.T + 8 * NT - 1) / (8 * NT);
  const int64_t tiles0 = (a.out[0].N + 15) / 16, tiles1 = (a.out[1].N + 15) / 16;
  if (groups > std::numeric_limits<int>::max() || tiles0 > 65535 || tiles1 > 65535)
    return cudaErrorInvalidValue;
  const int64_t k0 = skinny_ksplit(a, groups, a.out[0].N);
  const int64_t k1 = tiles1 > 0 ? skinny_ksplit(a, groups, a.out[1].N) : 1;
  // Both outputs' row tiles, partials and tile counters must fit side by side; else one launch
  // each.
  const bool split = k0 > 1 || k1 > 1;
  if (tiles1 > 0 &&
      (tiles0 + tiles1 > 65535 || (split && groups * (tiles0 + tiles1) > a.num_counters) ||
       static_cast<size_t>((k0 * a.out[0].N + k1 * a.out[1].N) * a.T) * sizeof(float) >
           a.partial_bytes)) {
    Fp8GemmArgs one = a;
    one.out[1] = {};
    if (const cudaError_t e = launch_skinny<NT>(one, stream); e != cudaSuccess) return e;
    one.out[0] = a.out[1];
    return launch_skinny<NT>(one, stream);
  }
  const SkinnySplit sp{static_cast<int>(tiles0), {static_cast<int>(k0), static_cast<int>(k1)}};
  const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(tiles0 + tiles1),
                  static_cast<unsigned>(std::max(k0, k1)));
  const bool vec = a.K % 16 == 0 && reinterpret_cast<uintptr_t>(a.out[0].w) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.out[1].w) % 16 == 0;
  // The ring where every warp streams at least kRingMinWarpBlocks K blocks. Measured alone
  // (fp8_kernels_benchmark, session 15): o_proj's 16 a warp 37.3 -> 29.7 µs, the dense down's 12
  // 28.9 -> 23.3 µs; the dense gate/up's 6 tie; q_b's 2 lose a third (14.5 -> 19.0 µs).
  const auto warp_blocks = [&](int64_t ksplit) { return (a.K + 127) / 128 / ksplit / kWarps; };
  const bool ring_pays = warp_blocks(k0) >= kRingMinWarpBlocks &&
                         (tiles1 == 0 || warp_blocks(k1) >= kRingMinWarpBlocks);
  const bool ring =
      vec && a.ldq % 16 == 0 && reinterpret_cast<uintptr_t>(a.xq) % 16 == 0 &&
      (a.kernel == SkinnyKernel::kAuto ? ring_pays : a.kernel == SkinnyKernel::kSharedRing);
  if (ring) return launch_ring<NT>(grid, a, sp, stream);
  if (vec)
    launch(fp8_gemm_skinny_kernel<NT, true>, grid, kWarps * 32, 0, stream, a, sp);
  else
    launch(fp8_gemm_skinny_kernel<NT, false>, grid, kWarps * 32, 0, stream, a, sp);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_pad_scale_rows(const float* src, int64_t rows, int64_t cols, int64_t ld_dst,
                                  float* dst, cudaStream_t stream) {
  const int64_t n = rows * ld_dst;
  if (n == 0) return cudaSuccess;
  launch(pad_scale_rows_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, src, rows,
         cols, ld_dst, dst);
  return cudaGetLastError();
}

cudaError_t launch_fp8_gemm_skinny(const Fp8GemmArgs& a, cudaStream_t stream) {
  if (a.T <= 0 || a.out[0].N <= 0) return cudaSuccess;
  // One 8-token MMA column tile for decode batches up to 8, else groups of 16 tokens (the
  // groups of one row tile run side by side, so the weights come from L2 after the first).
  if (a.T <= 8) return launch_skinny<1>(a, stream);
  return launch_skinny<2>(a, stream);
}

}  // namespace mls::ops::cuda::kernels
