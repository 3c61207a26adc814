// DSA indexer on the GPU in two kernels.
//
// Scores: one CTA of 4 warps per (QT consecutive query tokens, chunk of their key rows). Key
// tiles of 128 keys (double-buffered cp.async) are staged once for a run of the CTA's tokens of
// one sequence, whose key positions are the same rows (a CTA straddling sequences takes its runs
// one after another). Per token, the Hi heads are the M dimension of tensor-core products
// S[heads × keys] = Q[heads × Di] · K_tileᵀ (a k-step's key fragments loaded once for all the
// run's tokens), then score[j] = Σ_h (w[h] · scale) · relu(S[h, j]) in fp32 (scale > 0: the
// same function, one multiply fewer a product), one fused multiply-add a head in head order,
// reduced across the lanes that hold one key's heads, written for the token's own valid keys only.
// Decode steps (a token a sequence) take QT = 1, small steps' rows split in chunks across CTAs for
// two CTAs an SM; steps with more rows than sequences (prompts) take QT = 4 (2 past 32 heads),
// staging a QT-th of the key bytes per product. Every score is the same products summed in the same
// order either way: the same floats.
//
// Top-k: one CTA per row. A 4-pass radix select (8 bits per pass, warp-aggregated shared
// histograms) finds the k-th largest score; the chosen keys are every key above it plus the
// lowest-indexed keys equal to it, written in ascending index order through a block scan, so
// the result is deterministic. Rows short enough are cached in shared memory for the passes.
// Steps whose rows all fit in registers (key_bound <= kRegKeys: decode at up to 8k context)
// take topk_reg_kernel instead: 512 threads hold 16 consecutive keys each, three passes of 12,
// 12 and 8 bits (later passes only count the keys still matching the prefix) find the same
// k-th key and count of equal keys kept, and one block scan writes the same list.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "ops/cuda/device_facts.h"
#include "ops/cuda/indexer_keys.cuh"
#include "ops/cuda/indexer_topk_kernels.h"
#include "ops/cuda/indexer_wgmma_kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kScoreWarps = 4;
constexpr int kScoreThreads = kScoreWarps * 32;
constexpr int kTile = kScoreWarps * 32;  // keys per tile: 32 per warp
constexpr int kTopkThreads = 512;
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kCacheFloats = 16 * 1024;  // rows up to this length stay in shared memory (64 KiB)

// Copies 8 bf16 (zeros when src is null) to shared memory: cp.async when rows are 16-byte
// aligned, else element by element (`valid` columns of src, zeros after).
__device__ __forceinline__ void stage8(bf16* dst, const bf16* src, int valid, bool vec,
                                       const void* any) {
  if (vec) {
    cp_async16(dst, src ? src : any, src ? 16 : 0);
  } else {
    for (int e = 0; e < 8; ++e) dst[e] = src && e < valid ? src[e] : __float2bfloat16(0.0f);
  }
}

struct ScoreLayout {
  int dp = 0;  // Di rounded up to 16
  int ld = 0;  // shared row stride (elements): an odd number of 16-byte chunks
  int hp = 0;  // heads rounded up to 16
  bool vec = false;
  int q_bytes = 0, stage_bytes = 0, total = 0;
};

// Query tokens per CTA of the token-group kernel for MB m16 blocks of heads: its accumulators
// are QT·MB·16 floats a lane and its query tiles QT·MB·16 rows of shared memory, so QT·MB <= 8
// keeps both at 128 floats and 35 KB (two CTAs an SM, no spills) for every head count.
constexpr int group_tokens(int mb) {
  return mb <= 2 ? 4 : 2;
}

template <int MB, int QT>
__global__ void __launch_bounds__(kScoreThreads)
    index_score_kernel(const IndexerParams p, const ScoreLayout L, int t0, int nt,
                       int tiles_per_cta, float* scores, int64_t ld) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem);  // [QT][hp] rows
  int64_t* rows_s = reinterpret_cast<int64_t*>(smem + L.q_bytes + 2 * L.stage_bytes);  // [2][kTile]

  // Tokens tb .. tb + cnt − 1; the last tokens (longest rows) go to the first CTAs.
  const int tb = t0 + static_cast<int>(gridDim.x - 1 - blockIdx.x) * QT;
  const int cnt = t0 + nt - tb < QT ? t0 + nt - tb : QT;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t key0 = static_cast<int64_t>(blockIdx.y) * tiles_per_cta * kTile;
  int64_t n[QT];
  int64_t n_any = 0;
#pragma unroll
  for (int u = 0; u < QT; ++u) {
    n[u] = u < cnt ? valid_keys(p, tb + u) : 0;
    n_any = n[u] > n_any ? n[u] : n_any;
  }
  if (key0 >= n_any) return;
  const bf16* kbase = static_cast<const bf16*>(p.k);
  const int chunks = L.dp / 8;

  for (int c = tid; c < cnt * L.hp * chunks; c += kScoreThreads) {
    const int r = c / chunks, col = (c % chunks) * 8, u = r / L.hp, h = r % L.hp;
    const bf16* src = h < p.Hi && col < p.Di
                          ? static_cast<const bf16*>(p.q) + (tb + u) * p.q_st + h * p.q_sh + col
                          : nullptr;
    stage8(q_s + r * L.ld + col, src, p.Di - col, L.vec, kbase);
  }

  // This lane's head weights per token: rows g and g + 8 of each m16 block (zero past Hi).
  const int g = lane >> 2;
  float wv[QT][MB][2];
#pragma unroll
  for (int u = 0; u < QT; ++u)
#pragma unroll
    for (int mb = 0; mb < MB; ++mb)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int h = mb * 16 + g + hh * 8;
        const int64_t i = static_cast<int64_t>(tb + u) * p.w_st + h;
        float x = 0.0f;
        if (u < cnt && h < p.Hi) x = head_weight(p, i);
        wv[u][mb][hh] = x;
      }

  // Runs of tokens of one sequence [g0, g1), one after another: a run's keys are the same rows
  // (those of its first token), staged once for all of its tokens.
  for (int g0 = 0, g1 = 0; g0 < cnt; g0 = g1) {
    g1 = run_end(p, tb, g0, cnt);
    int64_t n_run = 0;
#pragma unroll
    for (int u = 0; u < QT; ++u)
      if (u >= g0 && u < g1 && n[u] > n_run) n_run = n[u];
    if (key0 >= n_run) continue;
    const int lead = tb + g0;
    const int64_t left = (n_run - key0 + kTile - 1) / kTile;
    const int ntiles = static_cast<int>(left < tiles_per_cta ? left : tiles_per_cta);

    auto resolve = [&](int tile) {
      const int64_t j = key0 + static_cast<int64_t>(tile) * kTile + tid;
      rows_s[(tile & 1) * kTile + tid] = tile < ntiles && j < n_run ? key_row(p, lead, j) : -1;
    };
    auto issue = [&](int tile) {
      bf16* dst = reinterpret_cast<bf16*>(smem + L.q_bytes + (tile & 1) * L.stage_bytes);
      for (int c = tid; c < kTile * chunks; c += kScoreThreads) {
        const int r = c / chunks, col = (c % chunks) * 8;
        const int64_t row = rows_s[(tile & 1) * kTile + r];
        const bf16* src = row >= 0 && col < p.Di ? kbase + row * p.k_sr + col : nullptr;
        stage8(dst + r * L.ld + col, src, p.Di - col, L.vec, kbase);
      }
    };

    // The barrier also ends the previous run's reads of both key buffers.
    resolve(0);
    resolve(1);
    __syncthreads();
    issue(0);
    cp_async_commit();

    for (int it = 0; it < ntiles; ++it) {
      cp_async_wait<0>();
      __syncthreads();  // tile `it` visible; tile it−1's buffer and addresses are free
      if (it + 1 < ntiles) issue(it + 1);
      cp_async_commit();
      resolve(it + 2);

      // The run's tokens with valid keys among this warp's 32.
      const int64_t tile_key = key0 + static_cast<int64_t>(it) * kTile + warp * 32;
      unsigned live = 0;
#pragma unroll
      for (int u = 0; u < QT; ++u)
        if (u >= g0 && u < g1 && tile_key < n[u]) live |= 1u << u;

      const bf16* ks = reinterpret_cast<const bf16*>(smem + L.q_bytes + (it & 1) * L.stage_bytes);
      float acc[QT][MB][4][4];
#pragma unroll
      for (int u = 0; u < QT; ++u)
#pragma unroll
        for (int mb = 0; mb < MB; ++mb)
#pragma unroll
          for (int nt8 = 0; nt8 < 4; ++nt8)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[u][mb][nt8][c] = 0.0f;
      const bf16* qa = q_s + ((lane & 7) + ((lane >> 3) & 1) * 8) * L.ld + (lane >> 4) * 8;
      const bf16* kb =
          ks + (warp * 32 + (lane & 7) + (lane >> 4) * 8) * L.ld + ((lane >> 3) & 1) * 8;
      for (int kk = 0; kk < L.dp / 16; ++kk) {
        // The key fragments of this k-step serve every token of the run.
        uint32_t b[2][4];
#pragma unroll
        for (int np = 0; np < 2; ++np) ldmatrix_x4(b[np], kb + np * 16 * L.ld + kk * 16);
#pragma unroll
        for (int u = 0; u < QT; ++u) {
          if (!(live & (1u << u))) continue;
          uint32_t a[MB][4];
#pragma unroll
          for (int mb = 0; mb < MB; ++mb)
            ldmatrix_x4(a[mb], qa + (u * L.hp + mb * 16) * L.ld + kk * 16);
#pragma unroll
          for (int np = 0; np < 2; ++np)
#pragma unroll
            for (int mb = 0; mb < MB; ++mb) {
              mma_bf16(acc[u][mb][2 * np], a[mb], b[np][0], b[np][1]);
              mma_bf16(acc[u][mb][2 * np + 1], a[mb], b[np][2], b[np][3]);
            }
        }
      }
#pragma unroll
      for (int u = 0; u < QT; ++u) {
        if (!(live & (1u << u))) continue;
        float* srow = scores + static_cast<int64_t>(tb + u - t0) * ld;
#pragma unroll
        for (int nt8 = 0; nt8 < 4; ++nt8)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float s = 0.0f;
#pragma unroll
            for (int mb = 0; mb < MB; ++mb)
              s = fmaf(wv[u][mb][1], fmaxf(acc[u][mb][nt8][c + 2], 0.0f),
                       fmaf(wv[u][mb][0], fmaxf(acc[u][mb][nt8][c], 0.0f), s));
            // Lanes with one (lane & 3) hold the same key for the other heads.
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            s += __shfl_xor_sync(0xffffffffu, s, 8);
            s += __shfl_xor_sync(0xffffffffu, s, 16);
            const int64_t key = tile_key + nt8 * 8 + (lane & 3) * 2 + c;
            if (lane < 4 && key < n[u]) srow[key] = s;
          }
      }
    }
  }
  cp_async_wait<0>();
}

// Monotone map of a float to an unsigned key (larger float, larger key; -0 == +0).
__device__ __forceinline__ uint32_t order_key(float f) {
  uint32_t b = __float_as_uint(f);
  if (b == 0x80000000u) b = 0;
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The radix digit among the N bins a thread holds, counts cnt from bin `hi` down, whose running
// count from the top reaches `rem`; `before` (the keys above those bins on entry) becomes the
// keys above that digit.
template <int N>
__device__ __forceinline__ int digit_in_run(const uint32_t (&cnt)[N], int hi, uint32_t rem,
                                            uint32_t& before) {
  for (int i = 0; i < N; ++i) {
    if (before + cnt[i] >= rem) return hi - i;
    before += cnt[i];
  }
  return hi - (N - 1);
}

__global__ void __launch_bounds__(kTopkThreads)
    topk_kernel(const IndexerParams p, int t0, const float* scores, int64_t ld, int cache_cap) {
  pdl_begin();
  extern __shared__ __align__(16) float cache[];
  __shared__ uint32_t hist[256];
  __shared__ uint32_t sh_prefix, sh_rem;
  __shared__ uint32_t warp_tot[2][kTopkWarps];

  const int t = t0 + static_cast<int>(blockIdx.x);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t n = valid_keys(p, t);
  const int topk = p.topk;
  int32_t* out = p.chosen + static_cast<int64_t>(t) * topk;
  if (n <= topk) {  // every valid key, then unused slots
    for (int j = tid; j < topk; j += kTopkThreads) out[j] = j < n ? j : -1;
    return;
  }

  const float* row = scores + static_cast<int64_t>(blockIdx.x) * ld;
  const float* src = row;
  if (n <= cache_cap) {
    for (int64_t j = tid * 4; j < n; j += kTopkThreads * 4) {
      if (j + 4 <= n) {
        *reinterpret_cast<float4*>(cache + j) = *reinterpret_cast<const float4*>(row + j);
      } else {
        for (int64_t e = j; e < n; ++e) cache[e] = row[e];
      }
    }
    src = cache;
  }

  // Radix select of the topk-th largest key, most significant byte first.
  uint32_t prefix = 0, mask = 0, rem = static_cast<uint32_t>(topk);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kTopkThreads) hist[i] = 0;
    __syncthreads();
    for (int64_t base = 0; base < n; base += kTopkThreads) {
      const int64_t j = base + tid;
      uint32_t bin = 256;  // not counted
      if (j < n) {
        const uint32_t u = order_key(src[j]);
        if ((u & mask) == prefix) bin = (u >> shift) & 255u;
      }
      // One atomic per distinct bin of the warp: ReLU zeros make a few bins very hot.
      const uint32_t peers = __match_any_sync(0xffffffffu, bin);
      if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
    }
    __syncthreads();
    if (warp == 0) {
      // Lane L holds bins 255 − 8L down to 248 − 8L; the first lane whose running count from
      // the top reaches `rem` holds the digit.
      const int hi = 255 - lane * 8;
      uint32_t cnt[8], s = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        cnt[i] = hist[hi - i];
        s += cnt[i];
      }
      uint32_t incl = s;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      const uint32_t hit = __ballot_sync(0xffffffffu, incl >= rem);
      if (lane == __ffs(hit) - 1) {
        uint32_t before = incl - s;
        const int digit = digit_in_run(cnt, hi, rem, before);
        sh_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
        sh_rem = rem - before;
      }
    }
    __syncthreads();
    prefix = sh_prefix;
    rem = sh_rem;
    mask |= 255u << shift;
  }

  // Keys above the threshold, then the first `rem` keys equal to it, in ascending index order:
  // a key's slot is (#above before it) + min(#equal before it, rem).
  uint32_t gt_run = 0, eq_run = 0;
  int buf = 0;
  for (int64_t base = 0; base < n; base += kTopkThreads * 4) {
    const int64_t j0 = base + tid * 4;
    uint32_t flags = 0;  // bit e: above, bit e + 4: equal
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (j0 + e < n) {
        const uint32_t u = order_key(src[j0 + e]);
        if (u > prefix) flags |= 1u << e;
        if (u == prefix) flags |= 1u << (e + 4);
      }
    // Packed counts: above in the low 16 bits, equal in the high (a tile holds 2048 keys).
    const uint32_t cnt = __popc(flags & 15u) | (__popc(flags >> 4) << 16);
    uint32_t incl = cnt;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const uint32_t v = __shfl_up_sync(0xffffffffu, incl, off);
      if (lane >= off) incl += v;
    }
    if (lane == 31) warp_tot[buf][warp] = incl;
    __syncthreads();
    uint32_t before = incl - cnt, total = 0;
    for (int w = 0; w < kTopkWarps; ++w) {
      const uint32_t x = warp_tot[buf][w];
      if (w < warp) before += x;
      total += x;
    }
    uint32_t gt = gt_run + (before & 0xffffu), eq = eq_run + (before >> 16);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (flags & (1u << e)) {
        out[gt + (eq < rem ? eq : rem)] = static_cast<int32_t>(j0 + e);
        ++gt;
      } else if (flags & (1u << (e + 4))) {
        if (eq < rem) out[gt + eq] = static_cast<int32_t>(j0 + e);
        ++eq;
      }
    }
    gt_run += total & 0xffffu;
    eq_run += total >> 16;
    buf ^= 1;  // the next tile writes the other buffer; the one after is past a barrier
  }
}

// 512 threads of 16 keys, so that four CTAs fit an SM: the prefill's four launches took 9.4 % less
// than with 1,024 of 8 (H100, ncu), the steps' times unchanged (bench/RESULTS.md, session 39).
constexpr int kRegThreads = 512;
constexpr int kRegWarps = kRegThreads / 32;
static_assert(kRegWarps <= 32);  // reg_block_scan: one warp scans the warps' sums
constexpr int kRegPerThread = 16;
constexpr int kRegKeys = kRegThreads * kRegPerThread;
constexpr int kRegBins = 4096;  // 12-bit digits

// Inclusive prefix sum of v over the CTA's threads in order; the total in *total.
__device__ __forceinline__ uint32_t reg_block_scan(uint32_t v, uint32_t* warp_sums,
                                                   uint32_t* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t incl = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t u = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += u;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {  // kRegWarps <= 32 warps' sums, scanned by one warp
    uint32_t w = lane < kRegWarps ? warp_sums[lane] : 0u;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const uint32_t u = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += u;
    }
    if (lane < kRegWarps) warp_sums[lane] = w;
  }
  __syncthreads();
  const uint32_t r = incl + (warp > 0 ? warp_sums[warp - 1] : 0);
  *total = warp_sums[kRegWarps - 1];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kRegThreads)
    topk_reg_kernel(const IndexerParams p, int t0, const float* scores, int64_t ld) {
  pdl_begin();
  __shared__ __align__(16) uint32_t hist[kRegBins];
  __shared__ uint32_t warp_sums[kRegWarps];
  __shared__ uint32_t sh_prefix, sh_rem;
  static_assert(kRegKeys < 65536);  // packed 16-bit counts in the final scan

  const int t = t0 + static_cast<int>(blockIdx.x);
  const int tid = threadIdx.x;
  const int n = static_cast<int>(valid_keys(p, t));
  const int topk = p.topk;
  int32_t* out = p.chosen + static_cast<int64_t>(t) * topk;
  if (n <= topk) {  // every valid key, then unused slots
    for (int j = tid; j < topk; j += kRegThreads) out[j] = j < n ? j : -1;
    return;
  }

  // Keys j0 .. j0 + kRegPerThread - 1 of this thread (ld is a multiple of 4 floats: 16-byte
  // loads).
  const float* row = scores + static_cast<int64_t>(blockIdx.x) * ld;
  const int j0 = tid * kRegPerThread;
  uint32_t u[kRegPerThread];
  if (j0 + kRegPerThread <= n) {
#pragma unroll
    for (int e = 0; e < kRegPerThread; e += 4) {
      const float4 v = *reinterpret_cast<const float4*>(row + j0 + e);
      u[e] = order_key(v.x);
      u[e + 1] = order_key(v.y);
      u[e + 2] = order_key(v.z);
      u[e + 3] = order_key(v.w);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kRegPerThread; ++e) u[e] = j0 + e < n ? order_key(row[j0 + e]) : 0u;
  }
  const int valid = n - j0 < 0 ? 0 : n - j0;  // this thread's keys e < valid count

  // Radix select of the topk-th largest key over digits of 12, 12 and 8 bits.
  uint32_t prefix = 0, mask = 0, rem = static_cast<uint32_t>(topk);
#pragma unroll 1
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 20 : pass == 1 ? 8 : 0;
    const int bins = pass == 2 ? 256 : kRegBins;
    for (int i = tid; i < kRegBins; i += kRegThreads) hist[i] = 0;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < kRegPerThread; ++e)
      if (e < valid && (u[e] & mask) == prefix) atomicAdd(&hist[(u[e] >> shift) & (bins - 1)], 1u);
    __syncthreads();
    // Thread i owns `per` bins from the top (bins - 1 - per i down); the first thread whose
    // running count from the top reaches rem holds the digit. Its bins in 16-byte loads (4 bins
    // a lane, 4 bytes apart, were 4-way bank conflicts); bins is a multiple of per, so a
    // thread's bins lie all below it or all past it.
    constexpr int per = kRegBins / kRegThreads;
    static_assert(per % 4 == 0 && 256 % per == 0);
    const int hi = bins - 1 - tid * per;
    uint32_t cnt[per];  // bins hi, hi - 1, ..
    uint32_t sum = 0;
#pragma unroll
    for (int q = 0; q < per / 4; ++q) {
      uint4 four = make_uint4(0u, 0u, 0u, 0u);
      if (hi >= 0) four = *reinterpret_cast<const uint4*>(hist + hi - 3 - 4 * q);
      cnt[4 * q] = four.w;
      cnt[4 * q + 1] = four.z;
      cnt[4 * q + 2] = four.y;
      cnt[4 * q + 3] = four.x;
      sum += four.x + four.y + four.z + four.w;
    }
    uint32_t total;
    const uint32_t incl = reg_block_scan(sum, warp_sums, &total);
    const uint32_t before0 = incl - sum;
    if (before0 < rem && incl >= rem) {
      uint32_t before = before0;
      const int digit = digit_in_run(cnt, hi, rem, before);
      sh_prefix = prefix | (static_cast<uint32_t>(digit) << shift);
      sh_rem = rem - before;
    }
    __syncthreads();
    prefix = sh_prefix;
    rem = sh_rem;
    mask |= static_cast<uint32_t>(bins - 1) << shift;
  }

  // Keys above the threshold, then the first `rem` keys equal to it, in ascending index order:
  // a key's slot is (#above before it) + min(#equal before it, rem).
  uint32_t gt_cnt = 0, eq_cnt = 0;
#pragma unroll
  for (int e = 0; e < kRegPerThread; ++e)
    if (e < valid) {
      gt_cnt += u[e] > prefix;
      eq_cnt += u[e] == prefix;
    }
  const uint32_t packed = gt_cnt | (eq_cnt << 16);
  uint32_t total;
  const uint32_t before = reg_block_scan(packed, warp_sums, &total) - packed;
  uint32_t gt = before & 0xffffu, eq = before >> 16;
#pragma unroll
  for (int e = 0; e < kRegPerThread; ++e) {
    if (e >= valid) continue;
    if (u[e] > prefix) {
      out[gt + (eq < rem ? eq : rem)] = j0 + e;
      ++gt;
    } else if (u[e] == prefix) {
      if (eq < rem) out[gt + eq] = j0 + e;
      ++eq;
    }
  }
}

ScoreLayout make_score_layout(const IndexerParams& p, int qt) {
  ScoreLayout L;
  L.dp = (p.Di + 15) / 16 * 16;
  L.ld = L.dp + 8;
  L.hp = head_blocks(p.Hi) * 16;
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  L.vec = p.Di % 8 == 0 && p.q_st % 8 == 0 && p.q_sh % 8 == 0 && p.k_sr % 8 == 0 && aligned(p.q) &&
          aligned(p.k);
  L.q_bytes = qt * L.hp * L.ld * 2;
  L.stage_bytes = kTile * L.ld * 2;
  L.total = L.q_bytes + 2 * L.stage_bytes + 2 * kTile * static_cast<int>(sizeof(int64_t));
  return L;
}

// The SM count of `dev`, with `kernel` allowed all of the device's shared memory.
cudaError_t prepare(int dev, const void* kernel, int* sms) {
  DeviceFacts f;
  cudaError_t e = device_facts(dev, &f);
  if (e == cudaSuccess) e = allow_optin_smem(dev, kernel);
  *sms = f.sms;
  return e;
}

template <int MB, int QT>
cudaError_t launch_scores(const IndexerParams& p, int dev, int t0, int nt, float* scores,
                          int64_t ld, cudaStream_t stream) {
  auto kernel = index_score_kernel<MB, QT>;
  int sms = 0;
  const cudaError_t e = prepare(dev, reinterpret_cast<const void*>(kernel), &sms);
  if (e != cudaSuccess) return e;
  const ScoreLayout L = make_score_layout(p, QT);
  // Enough CTAs per group of rows to give a small step two CTAs per SM; a long step keeps whole
  // rows.
  const int64_t groups = (nt + QT - 1) / QT;
  const int64_t tiles = std::max<int64_t>(1, (p.key_bound + kTile - 1) / kTile);
  const int64_t want = std::clamp<int64_t>((2LL * sms + groups - 1) / groups, 1, tiles);
  const int64_t per_cta = (tiles + want - 1) / want;
  const int64_t chunks = (tiles + per_cta - 1) / per_cta;
  launch(kernel, dim3(static_cast<unsigned>(groups), static_cast<unsigned>(chunks)), kScoreThreads,
         L.total, stream, p, L, t0, nt, static_cast<int>(per_cta), scores, ld);
  return cudaGetLastError();
}

template <int MB>
cudaError_t launch_scores(const IndexerParams& p, int dev, int t0, int nt, float* scores,
                          int64_t ld, bool token_groups, cudaStream_t stream) {
  return token_groups ? launch_scores<MB, group_tokens(MB)>(p, dev, t0, nt, scores, ld, stream)
                      : launch_scores<MB, 1>(p, dev, t0, nt, scores, ld, stream);
}

}  // namespace

int64_t indexer_scores_ld(const IndexerParams& p) {
  return ops::scratch::indexer_scores_ld(p.key_bound);
}

cudaError_t launch_indexer_scores(const IndexerParams& p, int t0, int nt, float* scores, int64_t ld,
                                  bool token_groups, cudaStream_t stream) {
  if (nt <= 0 || p.key_bound <= 0) return cudaSuccess;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  DeviceFacts f;
  if (e == cudaSuccess) e = device_facts(dev, &f);
  if (e != cudaSuccess) return e;
  const int mb = head_blocks(p.Hi);
  // Keys too wide for a group's query tiles beside the key tiles take the one-token kernel.
  if (token_groups && indexer_wgmma_applies(p, dev))
    return launch_indexer_scores_wgmma(p, t0, nt, scores, ld, stream);
  token_groups = token_groups && make_score_layout(p, group_tokens(mb)).total <= f.smem_optin;
  return mb == 1   ? launch_scores<1>(p, dev, t0, nt, scores, ld, token_groups, stream)
         : mb == 2 ? launch_scores<2>(p, dev, t0, nt, scores, ld, token_groups, stream)
         : mb == 3 ? launch_scores<3>(p, dev, t0, nt, scores, ld, token_groups, stream)
                   : launch_scores<4>(p, dev, t0, nt, scores, ld, token_groups, stream);
}

cudaError_t launch_indexer_topk(const IndexerParams& p, int t0, int nt, float* scores,
                                cudaStream_t stream) {
  if (nt <= 0) return cudaSuccess;
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const int64_t ld = indexer_scores_ld(p);
  // Token groups pay wherever a CTA's rows share a sequence: the same products for a QT-th of
  // the staged key bytes. Block-table rows bound the step's sequences, so a step with more rows
  // (or unpaged keys: one sequence) holds prompt rows; a decode step (a row a sequence, which
  // groups would take one after another in fewer CTAs) keeps the one-token kernel and the row
  // chunks tuned for it. No row-count threshold besides: small steps split rows in chunks either
  // way.
  const bool token_groups = nt > 1 && (!p.block_tables || p.T > p.num_seqs);
  e = launch_indexer_scores(p, t0, nt, scores, ld, token_groups, stream);
  if (e != cudaSuccess) return e;
  if (p.key_bound <= kRegKeys) {
    launch(topk_reg_kernel, nt, kRegThreads, 0, stream, p, t0, scores, ld);
    return cudaGetLastError();
  }
  const int cache_cap = static_cast<int>(std::min<int64_t>(ld, kCacheFloats));
  e = prepare(dev, reinterpret_cast<const void*>(topk_kernel), &sms);
  if (e != cudaSuccess) return e;
  launch(topk_kernel, nt, kTopkThreads, cache_cap * sizeof(float), stream, p, t0, scores, ld,
         cache_cap);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
