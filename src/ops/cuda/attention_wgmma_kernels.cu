// Absorbed-MLA attention on warpgroup MMAs. One CTA of two warpgroups per (query token, split of
// its key list, 64 heads). All heads of the token share every key (MQA), so the 64 heads are the
// M dimension of every product; keys come in tiles of 64 rows of the latent cache, gathered by
// cp.async into 128-byte-swizzled shared memory (two stages: the next tile is in flight while
// this one is computed), Q staged the same way once.
//   S[64 heads × 64 keys] = Q · K_tileᵀ: warpgroup w takes keys 32w .. 32w + 31 (m64n32k16, 36
//     K steps over 576 columns, both operands K-major in shared memory);
//   online softmax in fp32 (exp2 domain): the row maxima of the two halves meet in shared memory,
//     so both warpgroups rescale by the same factor; P rounded to bf16 into a shared tile;
//   O[64 × 512] += P · V_tile: warpgroup w owns columns 256w .. 256w + 255 (m64n256k16, 4 K steps
//     over the 64 keys; V is the key tile itself read N-major, so each key row crosses memory
//     once), 128 accumulators per thread.
// The cut into splits and the split outputs are those of the mma.sync latent kernel
// (attention_kernels.cu), so the combine kernel and the scratch are shared.
#include <cuda_bf16.h>

#include <cmath>

#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/attention_wgmma_kernels.h"
#include "ops/cuda/device_facts.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kKeys = 64;  // keys per tile
constexpr int kThreads = 256;
constexpr int kColBlocks = kMlaWgmmaDk / 64;  // 128-byte column blocks of a row
constexpr int kChunks = kMlaWgmmaDk / 8;      // 16-byte chunks of a row
constexpr int kBlockBytes = 64 * 128;         // one column block of 64 rows
constexpr int kTileBytes = kColBlocks * kBlockBytes;
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: Q, two key stages, P, then per-row statistics of both warpgroups and the
// stages' key validity. The tiles need 1,024-byte alignment (the swizzle atoms).
constexpr int kQOff = 0;
constexpr int kKOff = kQOff + kTileBytes;
constexpr int kPOff = kKOff + 2 * kTileBytes;
constexpr int kMaxOff = kPOff + kBlockBytes;     // float [2][64]: each half's row maxima
constexpr int kSumOff = kMaxOff + 2 * 64 * 4;    // float [2][64]: each half's row sums, at the end
constexpr int kValidOff = kSumOff + 2 * 64 * 4;  // int [2][64]
constexpr int kSmemBytes = kValidOff + 2 * kKeys * 4 + 1024 /* alignment */;

__global__ void __launch_bounds__(kThreads, 1)
    mla_wgmma_kernel(const AttentionParams p, int splits, int64_t keys_per_split, float* part_o,
                     float* part_ml) {
  pdl_begin();
  extern __shared__ unsigned char smem_raw[];
  // Aligned through an integer, so its few scalar shared accesses compile to generic ones: the
  // shared-space form (align_smem_1024) measured 1.7 % slower here (bench/RESULTS.md, session 17).
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  unsigned char* q_s = smem + kQOff;
  unsigned char* p_s = smem + kPOff;
  float* max_s = reinterpret_cast<float*>(smem + kMaxOff);
  float* sum_s = reinterpret_cast<float*>(smem + kSumOff);
  int* valid_s = reinterpret_cast<int*>(smem + kValidOff);

  // Reverse token order: in a prefill the latest positions (longest rows) start first.
  const int t = p.T - 1 - static_cast<int>(blockIdx.x);
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * kMlaWgmmaHeads;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;

  const auto [seq, nk, begin, end] = split_range(p, t, split, keys_per_split);
  const int ntiles = end > begin ? static_cast<int>((end - begin + kKeys - 1) / kKeys) : 0;

  if (splits > 1 && ntiles == 0) {  // nothing here: the combine skips this split
    if (tid < kMlaWgmmaHeads && h0 + tid < p.H) mark_split_empty(p, part_ml, split, t, h0 + tid);
    return;
  }

  const bf16* kbase = static_cast<const bf16*>(p.k);
  // Chunk c of row r of a staged [64 × 576] tile: column block c / 8, swizzled within it.
  auto chunk_at = [](unsigned char* tile, int r, int c) {
    return tile + (c >> 3) * kBlockBytes + swizzle128(r, c & 7);
  };

  // Q rows of the 64 heads; heads past H are zero.
  {
    const bf16* qbase = static_cast<const bf16*>(p.q) + t * p.q_st;
    for (int c = tid; c < kMlaWgmmaHeads * kChunks; c += kThreads) {
      const int r = c / kChunks, col = c % kChunks;
      const bool in = h0 + r < p.H;
      cp_async16(chunk_at(q_s, r, col), in ? qbase + (h0 + r) * p.q_sh + col * 8 : kbase,
                 in ? 16 : 0);
    }
  }

  // Tile loader: 4 threads per key row, each a quarter of its chunks. A row's list entry and
  // block-table entry are dependent loads; they are issued three and two tiles ahead, so each
  // has a tile's compute to land before the row is resolved, a tile ahead of its copy.
  const int ld_n = tid >> 2, ld_sub = tid & 3;
  auto index_of = [&](int tile) {
    const int64_t i = begin + static_cast<int64_t>(tile) * kKeys + ld_n;
    int32_t index = -1;
    if (tile < ntiles && i < end) index = entry_index(p, t, i);
    return index;
  };
  auto load_tile = [&](int stage, int64_t row) {
    if (ld_sub == 0) valid_s[stage * kKeys + ld_n] = row >= 0;
    unsigned char* tile = smem + kKOff + stage * kTileBytes;
    const bf16* src = row >= 0 ? kbase + row * p.k_sr : kbase;
    for (int c = ld_sub; c < kChunks; c += 4)
      cp_async16(chunk_at(tile, ld_n, c), src + c * 8, row >= 0 ? 16 : 0);
  };

  // Whether this thread's row of the tile in flight holds a key: a tile of none adds nothing
  // (its probabilities are 0 and the running maximum stays), so it is skipped, exactly. DSA
  // lists of early queries are mostly such padding.
  const int32_t index0 = index_of(0), index1 = index_of(1), index2 = index_of(2);
  int32_t index = index_of(3);  // at the top of iteration `it`: of tile it + 3
  const PendingRow pending0 = entry_lookup(p, index0, nk, seq);
  const PendingRow pending1 = entry_lookup(p, index1, nk, seq);
  PendingRow pending = entry_lookup(p, index2, nk, seq);  // of tile it + 2
  int64_t next_row = paged_resolve(p, pending0);          // of tile it + 1
  bool in_flight_ok = next_row >= 0;
  if (ntiles > 0) load_tile(0, next_row);
  next_row = paged_resolve(p, pending1);
  cp_async_commit();

  const float scale_log2 = p.scale * kLog2e;
  const int g = lane >> 2, q4 = lane & 3;
  // This thread's accumulator rows (C fragment rows l/4 and l/4 + 8 of its warp).
  const int r0 = (warp & 3) * 16 + g, r1 = r0 + 8;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;

  const uint64_t q_desc = wgmma_desc_sw128(q_s);
  const uint64_t p_desc = wgmma_desc_sw128(p_s);

  for (int it = 0; it < ntiles; ++it) {
    const int stage = it & 1;
    cp_async_wait<0>();
    fence_proxy_async_smem();
    // Tile `it` visible; every thread is done with tile it−1, its P and maxima.
    const bool any_key = __syncthreads_or(in_flight_ok);
    in_flight_ok = next_row >= 0;
    if (it + 1 < ntiles) {
      load_tile(stage ^ 1, next_row);
      next_row = paged_resolve(p, pending);
      pending = entry_lookup(p, index, nk, seq);
      index = index_of(it + 4);
    }
    cp_async_commit();
    if (!any_key) continue;
    unsigned char* ks = smem + kKOff + stage * kTileBytes;

    // S over this warpgroup's 32 keys. K steps of 16 columns advance 32 bytes inside a column
    // block's rows (2 in the descriptors' 16-byte units).
    float s[16];
    {
      const uint64_t k_desc = wgmma_desc_sw128(ks + wg * 32 * 128);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kMlaWgmmaDk / 16; ++kk) {
        const uint64_t step = (kk >> 2) * (kBlockBytes >> 4) + (kk & 3) * 2;
        wgmma_bf16_m64n32k16(s, q_desc + step, k_desc + step, kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
    }

    // Registers 4j + c hold row r0 (c < 2) or r1, key 32·wg + 8j + 2·q4 + c % 2.
    const int* valid = valid_s + stage * kKeys + wg * 32;
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = 8 * j + 2 * q4 + (c & 1);
        s[4 * j + c] = valid[key] ? s[4 * j + c] * scale_log2 : -INFINITY;
        tmax[c >> 1] = fmaxf(tmax[c >> 1], s[4 * j + c]);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
      tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
    }
    if (q4 == 0) {
      max_s[wg * 64 + r0] = tmax[0];
      max_s[wg * 64 + r1] = tmax[1];
    }
    __syncthreads();  // both halves' maxima

    float alpha[2], m_ref[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h ? r1 : r0;
      const float m_new = fmaxf(m_run[h], fmaxf(max_s[r], max_s[64 + r]));
      m_ref[h] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[h] = exp2f(m_run[h] - m_ref[h]);
      m_run[h] = m_new;
    }
    float psum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const __nv_bfloat162 pp = __floats2bfloat162_rn(exp2f(s[4 * j + 2 * h] - m_ref[h]),
                                                        exp2f(s[4 * j + 2 * h + 1] - m_ref[h]));
        psum[h] += __low2float(pp) + __high2float(pp);
        // P row r, keys 32·wg + 8j + 2·q4 (+1): chunk 4·wg + j of the row, bytes 4·q4 in it.
        *reinterpret_cast<__nv_bfloat162*>(p_s + swizzle128(h ? r1 : r0, 4 * wg + j) + 4 * q4) = pp;
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      psum[h] += __shfl_xor_sync(0xffffffffu, psum[h], 1);
      psum[h] += __shfl_xor_sync(0xffffffffu, psum[h], 2);
      l_run[h] = l_run[h] * alpha[h] + psum[h];
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }
    fence_proxy_async_smem();
    __syncthreads();  // the whole P tile

    // O += P · V over this warpgroup's 256 columns: column blocks 4·wg .. 4·wg + 3 of the key
    // tile, N-major; K steps of 16 keys are two 8-row atoms (2,048 bytes) apart.
    {
      const uint64_t v_desc = wgmma_desc_sw128_nmajor(ks + 4 * wg * kBlockBytes, kBlockBytes);
      wgmma_fence_operands(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk)
        wgmma_bf16_m64n256k16<1>(o, p_desc + kk * 2, v_desc + kk * (2048 >> 4), 1);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(o);
    }
  }
  cp_async_wait<0>();

  // Each warpgroup summed its own keys' probabilities; the row sums meet in shared memory.
  if (q4 == 0) {
    sum_s[wg * 64 + r0] = l_run[0];
    sum_s[wg * 64 + r1] = l_run[1];
  }
  __syncthreads();

  const int64_t part = static_cast<int64_t>(split) * p.T + t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = h ? r1 : r0, head = h0 + row;
    if (head >= p.H) continue;
    const float l = sum_s[row] + sum_s[64 + row];
    if (splits == 1) {
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      bf16* dst = static_cast<bf16*>(p.out) + t * p.o_st + head * p.o_sh + wg * 256 + 2 * q4;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<__nv_bfloat162*>(dst + 8 * j) =
            __floats2bfloat162_rn(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
    } else {
      float* dst = part_o + (part * p.H + head) * p.Dv + wg * 256 + 2 * q4;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(dst + 8 * j) =
            make_float2(o[4 * j + 2 * h], o[4 * j + 2 * h + 1]);
      if (wg == 0 && q4 == 0) {
        float* ml = part_ml + (part * p.H + head) * 2;
        ml[0] = m_run[h];
        ml[1] = l;
      }
    }
  }
}

}  // namespace

bool mla_wgmma_applies(const AttentionParams& p, int head_group, int device) {
  DeviceFacts f;
  if (device_facts(device, &f) != cudaSuccess || f.smem_optin < kSmemBytes) return false;
  auto aligned = [](const void* ptr, int bytes) {
    return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
  };
  return head_group == kMlaWgmmaHeads && p.Hk == 1 && p.Dk == kMlaWgmmaDk && p.Dv == kMlaWgmmaDv &&
         p.v == p.k && p.v_sr == p.k_sr && aligned(p.q, 16) && aligned(p.k, 16) &&
         aligned(p.out, 4) && p.q_st % 8 == 0 && p.q_sh % 8 == 0 && p.k_sr % 8 == 0 &&
         p.o_st % 2 == 0 && p.o_sh % 2 == 0;
}

cudaError_t launch_mla_wgmma(const AttentionParams& p, int splits, int64_t keys_per_split,
                             int groups, float* part_o, float* part_ml, cudaStream_t stream) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = allow_optin_smem(dev, reinterpret_cast<const void*>(mla_wgmma_kernel));
  if (e != cudaSuccess) return e;
  launch(mla_wgmma_kernel, dim3(p.T, splits, groups), kThreads, kSmemBytes, stream, p, splits,
         keys_per_split, part_o, part_ml);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
