// Attention on the GPU, flash-decoding style: no [H × T × S] tensor exists.
//
// Latent path (Hk == 1, absorbed MLA): one CTA of 8 warps per (query token, split of its key
// list, group of 16 to 64 heads). All heads of the token share every key (MQA), so heads are
// the M dimension of tensor-core products against key tiles of 32 keys loaded once into shared
// memory through a cp.async pipeline:
//   S[heads × 32] = Q[heads × Dk] · K_tileᵀ   (warps split heads × Dk; partials summed in smem)
//   online softmax in fp32 (exp2 domain), P rounded to bf16
//   O[heads × Dv] += P · V_tile               (each warp owns Dv/8 columns for all heads)
// V is read from the key tile itself when v is a narrowed view of k (the latent cache), so
// each key row crosses HBM once. ops::scratch::attention_splits cuts the step from its sizes
// alone, so a query's result never depends on the other queries' contents; with several splits
// each CTA writes an unnormalised partial O and its (max, sum), and a combine kernel
// merges them.
//
// Simple path (Hk == H, or shapes the latent kernel does not cover): one CTA per (token, head),
// scalar fp32 online softmax. It exists for parity with the CPU op, not speed.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/attention_kernels.h"
#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/attention_wgmma_kernels.h"
#include "ops/cuda/device_facts.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kBN = 32;  // keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kLdp = kBN + 8;  // P row stride: an odd number of 16-byte chunks, no bank conflicts
constexpr float kLog2e = 1.4426950408889634f;
// O lives in registers: up to 64 heads × 512 columns over 256 threads. Split boundaries, head
// groups and the scratch of split queries come from ops/scratch_sizes.h.
constexpr int kMaxDv = ops::scratch::kAttentionMaxDv;

// ---------------------------------------------------------------------------------------------
// Latent (MQA) tensor-core kernel.

struct MlaLayout {
  int dkp = 0;  // Dk rounded up to 16: the QK reduction length
  int dvp = 0;  // Dv rounded up to 128: 8 warps × an even number of n8 tiles
  int dka = 0;  // columns of each staged key row (covers dvp too when V is read from K)
  int ldk = 0;  // shared row stride of Q and K (elements; an odd number of 16-byte chunks)
  int ldv = 0;  // shared row stride of a separate V tile
  bool v_in_k = false;
  bool vec = false;  // 16-byte aligned rows: cp.async, else element loads
  int stages = 0;
  int q_off = 0, kv_off = 0, stage_bytes = 0, v_off = 0, sbuf_off = 0, p_off = 0, alpha_off = 0,
      l_off = 0, m_off = 0, valid_off = 0, total = 0;
};

int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

MlaLayout make_layout(const AttentionParams& p, int hm, int stages) {
  MlaLayout L;
  L.dkp = round_up(p.Dk, 16);
  L.dvp = round_up(p.Dv, 128);
  // V = the first Dv columns of the key row when v is a narrowed view of k (the latent cache).
  L.v_in_k = p.v == p.k && p.v_sr == p.k_sr && p.Dv <= p.Dk;
  L.dka = L.v_in_k ? std::max(L.dkp, L.dvp) : L.dkp;
  L.ldk = L.dka + 8;
  L.ldv = L.v_in_k ? L.ldk : L.dvp + 8;
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  L.vec = p.Dk % 8 == 0 && p.q_st % 8 == 0 && p.q_sh % 8 == 0 && p.k_sr % 8 == 0 && aligned(p.q) &&
          aligned(p.k) && (L.v_in_k || (p.Dv % 8 == 0 && p.v_sr % 8 == 0 && aligned(p.v)));
  L.stages = stages;
  const int mg = hm >= 64 ? 2 : 1;  // head groups of 32 (or 16) rows in the QK product
  int off = 0;
  L.q_off = off;
  off += hm * L.ldk * 2;
  L.kv_off = off;
  L.v_off = kBN * L.ldk * 2;
  L.stage_bytes = L.v_off + (L.v_in_k ? 0 : kBN * L.ldv * 2);
  off += stages * L.stage_bytes;
  L.sbuf_off = off;
  off += (kWarps / mg) * hm * kBN * 4;
  L.p_off = off;
  off += hm * kLdp * 2;
  L.alpha_off = off;
  off += hm * 4;
  L.l_off = off;
  off += hm * 4;
  L.m_off = off;
  off += hm * 4;
  L.valid_off = off;
  off += stages * kBN * 4;
  L.total = off;
  return L;
}

// Copies `n` columns of a bf16 row (zeros past `valid` columns, or everywhere when src is
// null) into shared memory, 8 columns per step; steps are split among `lanes` threads. `any` is
// a readable global address for the zero-filling copies, which read nothing.
__device__ __forceinline__ void stage_row(bf16* dst, const bf16* src, int n, int valid, int lane,
                                          int lanes, bool vec, const bf16* any) {
  for (int c = lane * 8; c < n; c += lanes * 8) {
    if (vec) {
      const bool in = src && c < valid;
      cp_async16(dst + c, in ? src + c : any, in ? 16 : 0);
    } else {
      for (int e = 0; e < 8; ++e)
        dst[c + e] = src && c + e < valid ? src[c + e] : __float2bfloat16(0.0f);
    }
  }
}

template <int HM, int NTV>
__global__ void __launch_bounds__(kThreads, 1)
    mla_attention_kernel(const AttentionParams p, const MlaLayout L, int splits,
                         int64_t keys_per_split, float* part_o, float* part_ml) {
  pdl_begin();
  constexpr int MW = HM >= 32 ? 32 : 16;  // heads per warp in QK
  constexpr int MG = HM / MW;             // warp groups over heads in QK
  constexpr int MBW = MW / 16;            // m16 blocks per QK warp
  constexpr int NDQ = kWarps / MG;        // warps splitting the Dk reduction
  constexpr int REGS = MBW * 16;          // QK accumulators per lane
  constexpr int MB = HM / 16;             // m16 blocks in PV

  extern __shared__ __align__(16) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + L.q_off);
  float* sbuf = reinterpret_cast<float*>(smem + L.sbuf_off);
  bf16* p_s = reinterpret_cast<bf16*>(smem + L.p_off);
  float* alpha_s = reinterpret_cast<float*>(smem + L.alpha_off);
  float* l_s = reinterpret_cast<float*>(smem + L.l_off);
  float* m_s = reinterpret_cast<float*>(smem + L.m_off);
  int* valid_s = reinterpret_cast<int*>(smem + L.valid_off);

  // Reverse token order: in a prefill the latest positions (longest rows) start first.
  const int t = p.T - 1 - static_cast<int>(blockIdx.x);
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * HM;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  const auto [seq, nk, begin, end] = split_range(p, t, split, keys_per_split);
  const int ntiles = end > begin ? static_cast<int>((end - begin + kBN - 1) / kBN) : 0;

  if (splits > 1 && ntiles == 0) {  // nothing here: the combine skips this split
    if (tid < HM && h0 + tid < p.H) mark_split_empty(p, part_ml, split, t, h0 + tid);
    return;
  }

  const bf16* kbase = static_cast<const bf16*>(p.k);
  const bf16* vbase = static_cast<const bf16*>(p.v);

  // Q rows of this head group; heads past H and columns past Dk are zero.
  {
    const int chunks = L.dkp / 8;
    const bf16* qbase = static_cast<const bf16*>(p.q) + t * p.q_st;
    for (int c = tid; c < HM * chunks; c += kThreads) {
      const int r = c / chunks, col = (c % chunks) * 8;
      const bf16* src = h0 + r < p.H ? qbase + (h0 + r) * p.q_sh + col : nullptr;
      stage_row(q_s + r * L.ldk + col, src, 8, p.Dk - col, 0, 1, L.vec, kbase);
    }
  }

  // Tile loader: 8 threads per key row. A thread resolves its row of the next tile as soon as
  // it has issued the current one, so the block-table reads are off the critical path.
  const int ld_n = tid >> 3, ld_sub = tid & 7;
  auto resolve = [&](int tile) -> int64_t {
    const int64_t i = begin + static_cast<int64_t>(tile) * kBN + ld_n;
    return tile < ntiles && i < end ? entry_row(p, t, i, nk, seq) : -1;
  };
  auto load_tile = [&](int stage, int64_t row) {
    if (ld_sub == 0) valid_s[stage * kBN + ld_n] = row >= 0;
    unsigned char* st = smem + L.kv_off + stage * L.stage_bytes;
    bf16* kd = reinterpret_cast<bf16*>(st) + ld_n * L.ldk;
    stage_row(kd, row >= 0 ? kbase + row * p.k_sr : nullptr, L.dka, p.Dk, ld_sub, 8, L.vec, kbase);
    if (!L.v_in_k) {
      bf16* vd = reinterpret_cast<bf16*>(st + L.v_off) + ld_n * L.ldv;
      stage_row(vd, row >= 0 ? vbase + row * p.v_sr : nullptr, L.dvp, p.Dv, ld_sub, 8, L.vec,
                kbase);
    }
  };

  // Pipeline prologue: stages − 1 tiles in flight (Q travels with the first).
  int64_t next_row = resolve(0);
  for (int s = 0; s < L.stages - 1; ++s) {
    if (s < ntiles) {
      load_tile(s, next_row);
      next_row = resolve(s + 1);
    }
    cp_async_commit();
  }

  const float scale_log2 = p.scale * kLog2e;
  const int g = lane >> 2, q4 = lane & 3;

  // Softmax role: warp w < HM/8 owns 8 rows (one m16 block's upper or lower half); each quad of
  // lanes shares a row and keeps its running max and sum in registers.
  const bool smax_warp = warp < HM / 8;
  const int su_mh = warp / (2 * MBW), su_mb = (warp / 2) % MBW, su_half = warp % 2;
  const int smax_row = su_mh * MW + su_mb * 16 + g + su_half * 8;
  float m_run = -INFINITY, l_run = 0.0f;

  // QK role: heads [mh·MW, +MW), k-steps [ks0, ks1).
  const int mh = warp % MG, dq = warp / MG;
  const int ksteps = L.dkp / 16;
  const int ks0 = dq * ksteps / NDQ, ks1 = (dq + 1) * ksteps / NDQ;

  // PV role: columns [c0, c0 + NTV·8) for every head.
  const int c0 = warp * NTV * 8;
  float o[MB][NTV][4];
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int nt = 0; nt < NTV; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mb][nt][c] = 0.0f;

  for (int it = 0; it < ntiles; ++it) {
    const int stage = it % L.stages;
    if (L.stages == 3)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();  // tile `it` visible; every warp is done with tile it−1
    {
      const int nxt = it + L.stages - 1;
      if (nxt < ntiles) {
        load_tile(nxt % L.stages, next_row);
        next_row = resolve(nxt + 1);
      }
      cp_async_commit();
    }
    const bf16* ks = reinterpret_cast<const bf16*>(smem + L.kv_off + stage * L.stage_bytes);
    const bf16* vs =
        L.v_in_k ? ks
                 : reinterpret_cast<const bf16*>(smem + L.kv_off + stage * L.stage_bytes + L.v_off);

    // S partial over this warp's share of Dk.
    {
      float acc[MBW][4][4];
#pragma unroll
      for (int mb = 0; mb < MBW; ++mb)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[mb][nt][c] = 0.0f;
      const bf16* qa =
          q_s + (mh * MW + (lane & 7) + ((lane >> 3) & 1) * 8) * L.ldk + (lane >> 4) * 8;
      const bf16* kb = ks + ((lane & 7) + (lane >> 4) * 8) * L.ldk + ((lane >> 3) & 1) * 8;
      for (int kk = ks0; kk < ks1; ++kk) {
        uint32_t a[MBW][4];
#pragma unroll
        for (int mb = 0; mb < MBW; ++mb) ldmatrix_x4(a[mb], qa + mb * 16 * L.ldk + kk * 16);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, kb + np * 16 * L.ldk + kk * 16);
#pragma unroll
          for (int mb = 0; mb < MBW; ++mb) {
            mma_bf16(acc[mb][2 * np], a[mb], b[0], b[1]);
            mma_bf16(acc[mb][2 * np + 1], a[mb], b[2], b[3]);
          }
        }
      }
      float* sb = sbuf + (dq * MG + mh) * REGS * 32 + lane;
#pragma unroll
      for (int mb = 0; mb < MBW; ++mb)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) sb[((mb * 4 + nt) * 4 + c) * 32] = acc[mb][nt][c];
    }
    __syncthreads();

    // Online softmax over the tile's 32 keys.
    if (smax_warp) {
      float s[4][2];
      float tmax = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = (su_mb * 4 + nt) * 4 + su_half * 2 + c;
          float sum = 0.0f;
#pragma unroll
          for (int d = 0; d < NDQ; ++d) sum += sbuf[((d * MG + su_mh) * REGS + r) * 32 + lane];
          const int key = nt * 8 + q4 * 2 + c;
          s[nt][c] = valid_s[stage * kBN + key] ? sum * scale_log2 : -INFINITY;
          tmax = fmaxf(tmax, s[nt][c]);
        }
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
      const float m_new = fmaxf(m_run, tmax);
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m_run - m_ref);
      float psum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const __nv_bfloat162 pp =
            __floats2bfloat162_rn(exp2f(s[nt][0] - m_ref), exp2f(s[nt][1] - m_ref));
        psum += __low2float(pp) + __high2float(pp);
        *reinterpret_cast<__nv_bfloat162*>(p_s + smax_row * kLdp + nt * 8 + q4 * 2) = pp;
      }
      psum += __shfl_xor_sync(0xffffffffu, psum, 1);
      psum += __shfl_xor_sync(0xffffffffu, psum, 2);
      l_run = l_run * alpha + psum;
      m_run = m_new;
      if (q4 == 0) alpha_s[smax_row] = alpha;
    }
    __syncthreads();

    // O = O · alpha + P · V over this warp's columns.
#pragma unroll
    for (int mb = 0; mb < MB; ++mb) {
      const float a_lo = alpha_s[mb * 16 + g], a_hi = alpha_s[mb * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < NTV; ++nt) {
        o[mb][nt][0] *= a_lo;
        o[mb][nt][1] *= a_lo;
        o[mb][nt][2] *= a_hi;
        o[mb][nt][3] *= a_hi;
      }
    }
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      uint32_t pa[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; ++mb)
        ldmatrix_x4(pa[mb], p_s + (mb * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLdp + kk * 16 +
                                (lane >> 4) * 8);
      const bf16* vb =
          vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * L.ldv + c0 + (lane >> 4) * 8;
#pragma unroll
      for (int np = 0; np < NTV / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vb + np * 16);
#pragma unroll
        for (int mb = 0; mb < MB; ++mb) {
          mma_bf16(o[mb][2 * np], pa[mb], b[0], b[1]);
          mma_bf16(o[mb][2 * np + 1], pa[mb], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  if (smax_warp && q4 == 0) {
    l_s[smax_row] = l_run;
    m_s[smax_row] = m_run;
  }
  __syncthreads();

  const int64_t part = static_cast<int64_t>(split) * p.T + t;
#pragma unroll
  for (int mb = 0; mb < MB; ++mb)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = mb * 16 + g + half * 8, h = h0 + row;
      if (h >= p.H) continue;
      const float l = l_s[row];
      if (splits == 1) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16* dst = static_cast<bf16*>(p.out) + t * p.o_st + h * p.o_sh;
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt) {
          const int col = c0 + nt * 8 + q4 * 2;
          if (col < p.Dv) dst[col] = __float2bfloat16(o[mb][nt][half * 2] * inv);
          if (col + 1 < p.Dv) dst[col + 1] = __float2bfloat16(o[mb][nt][half * 2 + 1] * inv);
        }
      } else {
        float* dst = part_o + (part * p.H + h) * p.Dv;
#pragma unroll
        for (int nt = 0; nt < NTV; ++nt) {
          const int col = c0 + nt * 8 + q4 * 2;
          if (col < p.Dv) dst[col] = o[mb][nt][half * 2];
          if (col + 1 < p.Dv) dst[col + 1] = o[mb][nt][half * 2 + 1];
        }
      }
    }
  if (splits > 1 && tid < HM && h0 + tid < p.H) {
    float* ml = part_ml + (part * p.H + h0 + tid) * 2;
    ml[0] = m_s[tid];
    ml[1] = l_s[tid];
  }
}

// Merges the splits of one (token, head): out = Σ 2^(m_s − M) O_s / Σ 2^(m_s − M) l_s. It is a
// chain of memory latencies (a decode token's 64 heads × 32 splits × 512 floats are 4 MB: one
// CTA a head took 12 µs on the H200), so a CTA takes one chunk of 32 column units (float4 where
// Dv allows) of a head, its warps split the splits (as many warps as kCombinePer loads each
// cover, at most kCombineMaxWarps), and each warp's first kCombinePer loads are in flight before
// warp 0 has the splits' weights. Splits are summed in a fixed order (each warp its own in turn,
// then the warps in order): the result depends on the split count only.
constexpr int kCombineMaxWarps = 8;
constexpr int kCombinePer = 4;

int combine_warps(int splits) {
  return std::clamp((splits + kCombinePer - 1) / kCombinePer, 1, kCombineMaxWarps);
}

// Columns per unit: a float4 where Dv allows.
__host__ __device__ constexpr int combine_width(int Dv) {
  return Dv % 4 == 0 ? 4 : 1;
}

__device__ __forceinline__ float4 load_cols(const float* src, int width) {
  if (width == 4) return *reinterpret_cast<const float4*>(src);
  return make_float4(*src, 0.0f, 0.0f, 0.0f);
}

__device__ __forceinline__ void add_scaled(float4& acc, float w, const float4& x) {
  acc.x += w * x.x;
  acc.y += w * x.y;
  acc.z += w * x.z;
  acc.w += w * x.w;
}

__global__ void __launch_bounds__(kCombineMaxWarps * 32)
    combine_kernel(const AttentionParams p, int splits, const float* part_o, const float* part_ml) {
  pdl_begin();
  extern __shared__ float weight[];  // [splits]
  __shared__ float4 red[kCombineMaxWarps][32];
  __shared__ float total;
  const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int warps = static_cast<int>(blockDim.x) >> 5;
  const int width = combine_width(p.Dv);
  const int unit = static_cast<int>(blockIdx.z) * 32 + lane;
  const bool in = unit * width < p.Dv;
  const int64_t stride = static_cast<int64_t>(p.T) * p.H;
  const int64_t base = static_cast<int64_t>(t) * p.H + h;
  const float* src = part_o + base * p.Dv + unit * width;
  const int64_t step = stride * p.Dv;  // between splits
  float4 x[kCombinePer];
#pragma unroll
  for (int i = 0; i < kCombinePer; ++i) {
    const int s = warp + i * warps;
    x[i] = in && s < splits ? load_cols(src + s * step, width) : make_float4(0, 0, 0, 0);
  }
  if (warp == 0) {
    float m = -INFINITY;
    for (int s = lane; s < splits; s += 32) {
      const float* ml = part_ml + (s * stride + base) * 2;
      if (ml[1] > 0.0f) m = fmaxf(m, ml[0]);
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float l = 0.0f;
    for (int s = lane; s < splits; s += 32) {
      const float* ml = part_ml + (s * stride + base) * 2;
      weight[s] = ml[1] > 0.0f ? exp2f(ml[0] - m) : 0.0f;
      l += weight[s] * ml[1];
    }
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) total = l;
  }
  __syncthreads();
  // An empty split (weight 0) may hold anything, NaN included: it is skipped, not multiplied.
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < kCombinePer; ++i) {
    const int s = warp + i * warps;
    if (s < splits && weight[s] != 0.0f) add_scaled(acc, weight[s], x[i]);
  }
  for (int s = warp + kCombinePer * warps; in && s < splits; s += warps)
    if (weight[s] != 0.0f) add_scaled(acc, weight[s], load_cols(src + s * step, width));
  red[warp][lane] = acc;
  __syncthreads();
  if (warp != 0 || !in) return;
  float4 sum = red[0][lane];
#pragma unroll
  for (int w = 1; w < warps; ++w) add_scaled(sum, 1.0f, red[w][lane]);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  bf16* dst = static_cast<bf16*>(p.out) + t * p.o_st + h * p.o_sh + unit * width;
  const float v[4] = {sum.x, sum.y, sum.z, sum.w};
  for (int e = 0; e < width; ++e) dst[e] = __float2bfloat16(v[e] * inv);
}

// ---------------------------------------------------------------------------------------------
// Simple path: one CTA of 4 warps per (token, head); each warp runs an online softmax over every
// fourth group of 32 list entries (one key per lane), then the warps merge.
constexpr int kSimpleWarps = 4;

__global__ void simple_attention_kernel(const AttentionParams p) {
  pdl_begin();
  extern __shared__ float sm[];
  float* qf = sm;                           // [Dk]
  float* acc = sm + p.Dk;                   // [warps][Dv]
  float* stat = acc + kSimpleWarps * p.Dv;  // [warps][2]
  const int t = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hk = p.Hk == 1 ? 0 : h;
  const bf16* q = static_cast<const bf16*>(p.q) + t * p.q_st + h * p.q_sh;
  for (int d = threadIdx.x; d < p.Dk; d += blockDim.x) qf[d] = __bfloat162float(q[d]);
  float* o = acc + warp * p.Dv;
  for (int d = lane; d < p.Dv; d += 32) o[d] = 0.0f;
  __syncthreads();

  const int64_t seq = seq_of(p, t);
  const int64_t nk = visible_keys(p, t);
  const int64_t n_list = list_length(p, t, nk, seq);
  const bf16* kb = static_cast<const bf16*>(p.k) + hk * p.k_sh;
  const bf16* vb = static_cast<const bf16*>(p.v) + hk * p.v_sh;
  const float scale_log2 = p.scale * kLog2e;
  float m = -INFINITY, l = 0.0f;
  for (int64_t base = warp * 32; base < n_list; base += kSimpleWarps * 32) {
    const int64_t i = base + lane;
    const int64_t row = i < n_list ? entry_row(p, t, i, nk, seq) : -1;
    float s = -INFINITY;
    if (row >= 0) {
      const bf16* kr = kb + row * p.k_sr;
      float dot = 0.0f;
      for (int d = 0; d < p.Dk; ++d) dot += qf[d] * __bfloat162float(kr[d]);
      s = dot * scale_log2;
    }
    float cmax = s;
    for (int x = 16; x > 0; x >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, x));
    const float m_new = fmaxf(m, cmax);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m - m_ref);
    const float pe = exp2f(s - m_ref);
    float psum = pe;
    for (int x = 16; x > 0; x >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, x);
    l = l * alpha + psum;
    m = m_new;
    for (int d = lane; d < p.Dv; d += 32) o[d] *= alpha;
    for (int j = 0; j < 32; ++j) {
      const float pj = __shfl_sync(0xffffffffu, pe, j);
      const int64_t rj = __shfl_sync(0xffffffffu, row, j);
      if (rj < 0) continue;
      const bf16* vr = vb + rj * p.v_sr;
      for (int d = lane; d < p.Dv; d += 32) o[d] += pj * __bfloat162float(vr[d]);
    }
  }
  if (lane == 0) {
    stat[warp * 2] = m;
    stat[warp * 2 + 1] = l;
  }
  __syncthreads();
  float mm = -INFINITY;
  for (int w = 0; w < kSimpleWarps; ++w)
    if (stat[w * 2 + 1] > 0.0f) mm = fmaxf(mm, stat[w * 2]);
  float wt[kSimpleWarps];
  float total = 0.0f;
  for (int w = 0; w < kSimpleWarps; ++w) {
    wt[w] = stat[w * 2 + 1] > 0.0f ? exp2f(stat[w * 2] - mm) : 0.0f;
    total += wt[w] * stat[w * 2 + 1];
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  bf16* dst = static_cast<bf16*>(p.out) + t * p.o_st + h * p.o_sh;
  for (int d = threadIdx.x; d < p.Dv; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kSimpleWarps; ++w) v += wt[w] * acc[w * p.Dv + d];
    dst[d] = __float2bfloat16(v * inv);
  }
}

// ---------------------------------------------------------------------------------------------
// Planning and launch.

using MlaKernel = void (*)(const AttentionParams, const MlaLayout, int, int64_t, float*, float*);

template <int HM>
MlaKernel pick_ntv(int ntv) {
  switch (ntv) {
    case 2:
      return mla_attention_kernel<HM, 2>;
    case 4:
      return mla_attention_kernel<HM, 4>;
    case 6:
      return mla_attention_kernel<HM, 6>;
    default:
      return mla_attention_kernel<HM, 8>;
  }
}

struct Plan {
  int dev = 0;
  bool latent = false;
  bool wgmma = false;  // the latent path on warpgroup MMAs (attention_wgmma_kernels.h)
  MlaKernel kernel = nullptr;
  MlaLayout layout;
  int hm = 0, groups = 0, splits = 1;
  int64_t keys_per_split = 0;
  int group_T = 0;  // queries per launch
  size_t scratch_floats = 0;
};

// Lets `kernel` use all of the device's shared memory and returns how many
// CTAs of `threads` threads and `smem` bytes fit on one SM.
cudaError_t prepare_kernel(int dev, const void* kernel, int threads, int smem, int* per_sm) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int>, int> known;
  std::lock_guard lock(mu);
  auto it = known.find({dev, kernel, smem});
  if (it == known.end()) {
    cudaError_t e = allow_optin_smem(dev, kernel);
    int n = 0;
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem);
    if (e != cudaSuccess) return e;
    it = known.emplace(std::tuple{dev, kernel, smem}, n).first;
  }
  *per_sm = it->second;
  return cudaSuccess;
}

cudaError_t make_plan(const AttentionParams& p, Plan* plan) {
  *plan = Plan{};
  int dev = 0;
  DeviceFacts f;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = device_facts(dev, &f);
  if (e != cudaSuccess) return e;
  plan->dev = dev;
  if (p.Hk != 1 || p.Dv > kMaxDv || p.T == 0) return cudaSuccess;

  // The cut of the step into CTAs (key splits, head groups) and the scratch of split queries,
  // from the function the host allocated that scratch with (ops::scratch::attention_splits).
  const bool sparse = p.allowed != nullptr;
  const ops::scratch::AttentionSplits s = ops::scratch::attention_splits(
      p.T, p.H, p.Hk, p.Dv, sparse ? p.allowed_k : p.key_bound, sparse, p.batch_invariant);
  const int hm = static_cast<int>(s.head_group);
  plan->hm = hm;
  plan->groups = (p.H + hm - 1) / hm;
  // Shorter lists than the grid covers leave trailing splits empty; the combine skips them
  // exactly.
  plan->splits = static_cast<int>(s.splits);
  plan->keys_per_split = s.keys_per_split;
  plan->group_T = static_cast<int>(s.group_T);
  plan->scratch_floats = static_cast<size_t>(s.floats);
  if (mla_wgmma_applies(p, hm, dev)) {
    plan->latent = plan->wgmma = true;
    return cudaSuccess;
  }
  MlaLayout L = make_layout(p, hm, 3);
  if (L.total > f.smem_optin) L = make_layout(p, hm, 2);
  if (L.total > f.smem_optin) return cudaSuccess;  // too wide for shared memory: simple path
  const int ntv = L.dvp / 64;
  MlaKernel k = hm == 16 ? pick_ntv<16>(ntv) : hm == 32 ? pick_ntv<32>(ntv) : pick_ntv<64>(ntv);
  int per_sm = 0;
  e = prepare_kernel(dev, reinterpret_cast<const void*>(k), kThreads, L.total, &per_sm);
  if (e != cudaSuccess) return e;

  plan->latent = true;
  plan->kernel = k;
  plan->layout = L;
  return cudaSuccess;
}

}  // namespace

cudaError_t launch_attention(const AttentionParams& p, float* scratch, cudaStream_t stream) {
  if (p.T == 0 || p.H == 0) return cudaSuccess;
  Plan plan;
  cudaError_t e = make_plan(p, &plan);
  if (e != cudaSuccess) return e;
  if (!plan.latent) {
    const size_t smem = (static_cast<size_t>(p.Dk) + kSimpleWarps * (p.Dv + 2)) * sizeof(float);
    int per_sm = 0;
    e = prepare_kernel(plan.dev, reinterpret_cast<const void*>(simple_attention_kernel),
                       kSimpleWarps * 32, static_cast<int>(smem), &per_sm);
    if (e != cudaSuccess) return e;
    launch(simple_attention_kernel, dim3(p.T, p.H), kSimpleWarps * 32, smem, stream, p);
    return cudaGetLastError();
  }
  const int width = combine_width(p.Dv);
  const unsigned chunks = static_cast<unsigned>((p.Dv / width + 31) / 32);
  const size_t csmem = static_cast<size_t>(plan.splits) * sizeof(float);
  if (plan.splits > 1) {
    int per_sm = 0;
    e = prepare_kernel(plan.dev, reinterpret_cast<const void*>(combine_kernel),
                       combine_warps(plan.splits) * 32, static_cast<int>(csmem), &per_sm);
    if (e != cudaSuccess) return e;
  }
  for (int t0 = 0; t0 < p.T; t0 += plan.group_T) {
    // This group's queries as a step of their own: the same pointers, offset by t0 rows.
    AttentionParams g = p;
    g.T = std::min(plan.group_T, p.T - t0);
    g.q = static_cast<const bf16*>(p.q) + t0 * p.q_st;
    g.out = static_cast<bf16*>(p.out) + t0 * p.o_st;
    g.q_pos = p.q_pos + t0;
    if (p.token_seq) g.token_seq = p.token_seq + t0;
    if (p.allowed) g.allowed = p.allowed + t0 * p.allowed_k;
    float* part_o = scratch;
    float* part_ml =
        scratch ? scratch + static_cast<size_t>(plan.splits) * g.T * p.H * p.Dv : nullptr;
    if (plan.wgmma) {
      e = launch_mla_wgmma(g, plan.splits, plan.keys_per_split, plan.groups, part_o, part_ml,
                           stream);
    } else {
      launch(plan.kernel, dim3(g.T, plan.splits, plan.groups), kThreads, plan.layout.total, stream,
             g, plan.layout, plan.splits, plan.keys_per_split, part_o, part_ml);
      e = cudaGetLastError();
    }
    if (e != cudaSuccess) return e;
    if (plan.splits == 1) continue;
    launch(combine_kernel, dim3(g.T, p.H, chunks), combine_warps(plan.splits) * 32, csmem, stream,
           g, plan.splits, part_o, part_ml);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace mls::ops::cuda::kernels
