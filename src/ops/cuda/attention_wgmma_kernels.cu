// Absorbed-MLA attention on warpgroup MMAs. One CTA per (query token, split of its key list, 64
// heads). All heads of the token share every key (MQA), so the 64 heads are the M dimension of
// every product; keys come in tiles of 64 rows of the latent cache, gathered by cp.async into
// 128-byte-swizzled shared memory, two tiles (a pair) at a time.
//
// Three warpgroups, specialised, in the schedule FlashMLA calls a seesaw (its 2025-04-22 kernel
// notes): each consumer owns one tile of a pair and 256 of the 512 output columns, so one
// warpgroup's softmax runs while the other's MMAs do, and the loads of the next pair run under
// both.
//   producer (warpgroup 2): Q once, then each pair's two tiles into two buffers, each buffer in
//     two halves with their own full/empty mbarriers (L: column blocks 0-3, the values' first 256
//     columns; R: blocks 4-8, the other 256 and the rope block), in the order the consumers
//     need them. It resolves each row's list entry and block-table entry a pair and two pairs
//     ahead (two dependent loads), and skips a pair of which no entry names a key, exactly;
//   consumer 0 (tile 2i, buffer 0): S0 = Q · K0ᵀ (m64n64k16, 36 K steps), the online softmax
//     from the running maximum, O0 += P0 · V0[L] with P0 from its registers; then, once consumer 1
//     has the pair's maximum, P0 rescaled to it into buffer 0's rope block (dead after S0), and
//     O0 += P1 · V1[L] from shared memory;
//   consumer 1 (tile 2i + 1, buffer 1): S1, the maximum over consumer 0's and its own, O1 +=
//     P1 · V1[R] from its registers, P1 into its own block, O1 += P0 · V0[R].
// The maxima pass 0 → 1 → 0 through shared memory at named barriers. Output, splits and the
// cut are those of the mma.sync latent kernel (attention_kernels.cu), so the combine kernel and
// the scratch are shared.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "ops/cuda/attention_keys.cuh"
#include "ops/cuda/attention_wgmma_kernels.h"
#include "ops/cuda/device_facts.h"
#include "ops/cuda/ex2_ptx.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/pipeline_ptx.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kKeys = 64;  // keys per tile
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // consumer 0, consumer 1, the producer
constexpr int kProducerRegs = 72, kConsumerRegs = 216;
static_assert(kWarpgroup * kProducerRegs + 2 * kWarpgroup * kConsumerRegs <=
                  kThreads * launch_regs_per_thread(kThreads),
              "the CTA's registers at launch");
constexpr int kColBlocks = kMlaWgmmaDk / 64;  // 128-byte column blocks of a row
constexpr int kLBlocks = 4;                   // the L half: blocks 0-3; R: blocks 4-8
constexpr int kRopeBlock = kMlaWgmmaDv / 64;  // block 8: read by S only
constexpr int kBlockBytes = 64 * 128;         // one column block of 64 rows
constexpr int kTileBytes = kColBlocks * kBlockBytes;
constexpr float kLog2e = 1.4426950408889634f;
// The running maximum before any key: finite, so a row with no key yet rescales by exp2(0) and
// its first key's rescale exp2(kNoMax - m) is 0, without an infinity minus an infinity.
constexpr float kNoMax = -1e30f;
// The running maximum moves only where a tile's maximum passes it by more than kSlack (log2
// domain), as in FlashAttention-4: the probabilities, taken against a maximum that may be stale,
// stay below 2^kSlack, and O and the sum are rescaled (128 multiplies a thread) only on such a
// jump, not at most tiles. O and the sum share the reference, so their quotient is the same.
constexpr float kSlack = 8.0f;
__device__ __forceinline__ float lazy_max(float m, float tile_max) {
  return tile_max > m + kSlack ? tile_max : m;
}

// Shared memory (1,024-byte aligned: the swizzle atoms): Q, the two buffers, consumer 1's P.
// Consumer 0's P goes to buffer 0's rope block.
constexpr int kQOff = 0;
constexpr int kBufOff = kQOff + kTileBytes;
constexpr int kP1Off = kBufOff + 2 * kTileBytes;
constexpr int kSmemBytes = kP1Off + kBlockBytes + 1024 /* alignment */;
// The output's staging rows (in Q's space at the end): a head's 512 bf16 and 16 bytes, so that
// the fragments' stores (a quad's 16 bytes in each of 8 rows) meet every bank once.
constexpr int kStageRow = 2 * kMlaWgmmaDv + 16;
static_assert(kMlaWgmmaHeads * kStageRow <= kTileBytes, "the staging rows fit Q's space");

// Named barriers (0 is __syncthreads').
constexpr int kBarMax0 = 1;   // consumer 0's maximum written (0 arrives, 1 waits)
constexpr int kBarMax1 = 2;   // the pair's maximum written (1 arrives, 0 waits)
constexpr int kBarP0 = 3;     // P0 written (0 arrives, 1 waits)
constexpr int kBarP1 = 4;     // P1 written (1 arrives, 0 waits)
constexpr int kBarSums = 5;   // both consumers, at the end
constexpr int kBarPairs = 6;  // the producer's warps: a pair's rows resolved

// A buffer's tile: the list's end, or a tile of which every key, or only some, are valid. A
// full tile's scores need no mask (DSA's lists are full but for their last tile and the padding
// of early queries).
enum TileState { kEnd = 0, kPartial = 1, kFull = 2 };

// Barriers and the small arrays, beside the tiles.
struct Sync {
  uint64_t q_full;
  uint64_t full[2][2];   // [buffer][half]: the half has landed
  uint64_t empty[2][2];  // [buffer][half]: its readers are done with it
  float max[64];         // the running maximum of each head, handed 0 → 1 → 0
  TileState state[2];    // per buffer, with its first half
  uint8_t valid[2][kKeys];
  uint8_t keys[2][4];  // the producer's warps: a KeyFlags of their rows of a pair
};
enum Half { kL = 0, kR = 1 };
// A producer warp's rows of a pair: whether any names a key; whether all of tile 2i's, or of
// tile 2i + 1's, do.
enum KeyFlags : uint8_t { kAnyKey = 1, kAllKeys0 = 2, kAllKeys1 = 4 };

// Byte offset of K step kk (16 columns) of a 576-column tile: four steps per column block, 32
// bytes apart inside its rows.
__device__ __forceinline__ uint32_t k_step(int kk) {
  return (kk >> 2) * kBlockBytes + (kk & 3) * 32;
}

// S (+)= Q · Kᵀ over K steps kk0 .. kk1 − 1 (descriptor addresses in 16-byte units).
template <int kK0, int kK1>
__device__ __forceinline__ void s_mmas(float (&s)[32], uint64_t q_desc, uint64_t k_desc,
                                       bool fresh) {
#pragma unroll
  for (int kk = kK0; kk < kK1; ++kk) {
    const uint32_t step = k_step(kk) >> 4;
    wgmma_bf16_m64n64k16(s, q_desc + step, k_desc + step, fresh && kk == kK0 ? 0 : 1);
  }
}

// S of a consumer's tile of the pair: the half the producer copies first (L for tile 2i, R for
// 2i + 1: K steps 0-15 or 16-35) while the other lands, then the other. Returns the tile's
// state, which the producer publishes with the first half (kEnd: no S).
template <Half kFirst>
__device__ __forceinline__ TileState s_tile(float (&s)[32], uint64_t q_desc, uint64_t k_desc,
                                            uint32_t full_first, uint32_t full_second,
                                            const TileState& state, uint32_t phase) {
  constexpr int kSplit = 4 * kLBlocks, kSteps = kMlaWgmmaDk / 16;  // K steps: the L half's, all
  mbar_wait(full_first, phase);
  const TileState st = state;
  if (st == kEnd) return kEnd;
  wgmma_fence();
  if constexpr (kFirst == kL)
    s_mmas<0, kSplit>(s, q_desc, k_desc, true);
  else
    s_mmas<kSplit, kSteps>(s, q_desc, k_desc, true);
  wgmma_commit();
  mbar_wait(full_second, phase);
  if constexpr (kFirst == kL)
    s_mmas<kSplit, kSteps>(s, q_desc, k_desc, false);
  else
    s_mmas<0, kSplit>(s, q_desc, k_desc, false);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  return st;
}

// O (+)= P · V over 64 keys: P from this thread's registers (pa[2j + h]: rows r0 / r1, keys 8j +
// 2·q4 (+1), the S fragment's own layout) or from a K-major block; V the N-major column blocks
// at v (K steps of 16 keys are two 8-row atoms, 2,048 bytes, apart).
__device__ __forceinline__ void pv_rs(float (&o)[128], const uint32_t (&pa)[16], uint64_t v_desc) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t a[4] = {pa[4 * i], pa[4 * i + 1], pa[4 * i + 2], pa[4 * i + 3]};
    wgmma_bf16_m64n256k16_rs<1>(o, a, v_desc + i * (2048 >> 4), 1);
  }
}
__device__ __forceinline__ void pv_ss(float (&o)[128], uint64_t p_desc, uint64_t v_desc) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
    wgmma_bf16_m64n256k16<1>(o, p_desc + i * 2, v_desc + i * (2048 >> 4), 1);
}

// A consumer's view of the step and its running state. Registers 4j + c of a 64 × N fragment
// hold row r0 (c < 2) or r1 = r0 + 8, column 8j + 2·q4 + c % 2.
struct Consumer {
  int q4, r0, r1, lane;
  float m[2] = {kNoMax, kNoMax};  // the running maximum (log2 domain, lazy_max) of rows r0, r1
  float l[2] = {0.0f, 0.0f};      // the running sum of this consumer's probabilities
  float o[128];

  __device__ __forceinline__ explicit Consumer(int x) {
    const int warp = x >> 5;
    lane = x & 31;
    q4 = lane & 3;
    r0 = warp * 16 + (lane >> 2);
    r1 = r0 + 8;
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  }

  // Masks S by the tile's valid keys (a full tile's are all valid), and the tile's row maxima in
  // the log2 domain. S stays unscaled: softmax scales it in the FFMA that subtracts the maximum.
  // Rounding is monotonic, so the maximum scaled is the maximum of the scaled scores.
  template <TileState kState>
  __device__ __forceinline__ void mask(float (&s)[32], const uint8_t* valid, float scale_log2,
                                       float (&tmax)[2]) const {
    tmax[0] = tmax[1] = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        if constexpr (kState == kPartial)
          if (!valid[8 * j + 2 * q4 + (c & 1)]) s[4 * j + c] = -INFINITY;
        tmax[c >> 1] = fmaxf(tmax[c >> 1], s[4 * j + c]);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
      tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
      tmax[h] *= scale_log2;
    }
  }

  // mask<kFull> or mask<kPartial>, by the tile's state: the full tile's loop has no loads or
  // selects.
  __device__ __forceinline__ void mask(TileState st, float (&s)[32], const uint8_t* valid,
                                       float scale_log2, float (&tmax)[2]) const {
    if (st == kFull)
      mask<kFull>(s, valid, scale_log2, tmax);
    else
      mask<kPartial>(s, valid, scale_log2, tmax);
  }

  // Whether any row of the warp moved its maximum: a row whose maximum stayed has alpha exactly
  // 1, and scaling by it changes no bit.
  static __device__ __forceinline__ bool any_moved(const float (&alpha)[2]) {
    return __any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f);
  }

  // Once the maxima settle, most warps skip the rescale.
  __device__ __forceinline__ void scale_o(const float (&alpha)[2]) {
    if (!any_moved(alpha)) return;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= alpha[0];
      o[4 * j + 1] *= alpha[0];
      o[4 * j + 2] *= alpha[1];
      o[4 * j + 3] *= alpha[1];
    }
  }

  // Moves the running maximum to m_new (lazy_max's): O and the sum rescaled, then S
  // (unscaled) turned into probabilities in place (fp32), exp2(S · scale_log2 − m_new) with one
  // rounding before the exponential, and into pa (bf16, pv_rs's layout); the sum gains
  // the rounded probabilities, the ones the MMAs take. A probability below 2^-126 of its row's
  // maximum is flushed to zero (exp2_ftz): it could not move the sum or O. Without exp2f's
  // handling of such results the kernel issues 8 % fewer instructions and takes 3 % less time
  // (bench/RESULTS.md, session 32).
  __device__ __forceinline__ void softmax(float (&s)[32], const float (&m_new)[2], float scale_log2,
                                          uint32_t (&pa)[16]) {
    float alpha[2], psum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      alpha[h] = exp2_ftz(m[h] - m_new[h]);
      m[h] = m_new[h];
    }
    scale_o(alpha);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        s[4 * j + 2 * h] = exp2_ftz(fmaf(s[4 * j + 2 * h], scale_log2, -m_new[h]));
        s[4 * j + 2 * h + 1] = exp2_ftz(fmaf(s[4 * j + 2 * h + 1], scale_log2, -m_new[h]));
        const __nv_bfloat162 pp = __floats2bfloat162_rn(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]);
        psum[h] += __low2float(pp) + __high2float(pp);
        memcpy(&pa[2 * j + h], &pp, 4);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      psum[h] += __shfl_xor_sync(0xffffffffu, psum[h], 1);
      psum[h] += __shfl_xor_sync(0xffffffffu, psum[h], 2);
      l[h] = l[h] * alpha[h] + psum[h];
    }
  }

  // Writes bf16 P (pa's layout) as a K-major 64 × 64 block at `block` (an A operand).
  __device__ __forceinline__ void store_p(unsigned char* block, const uint32_t (&pa)[16]) const {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(block + swizzle128(h ? r1 : r0, j) + 4 * q4) = pa[2 * j + h];
  }

  // Publishes this thread's rows' maxima (one thread of each quad writes).
  __device__ __forceinline__ void put_max(float* max_s) const {
    if (q4 == 0) {
      max_s[r0] = m[0];
      max_s[r1] = m[1];
    }
  }
};

// What consumer W addresses: Q; its tile's buffer W (K for S); its output half of V in both
// buffers (W 0: L, W 1: R); its own P's block and the other's; its tile's full barriers; and
// the empty barriers of its half of both buffers.
template <int W>
struct Role {
  uint64_t q_desc, k_desc, v0, v1, other_p_desc;
  unsigned char* own_p;
  uint32_t full_l, full_r, empty0, empty1;
  __device__ __forceinline__ Role(unsigned char* smem, Sync& sy) {
    unsigned char* b0 = smem + kBufOff;
    unsigned char* b1 = b0 + kTileBytes;
    unsigned char* p0 = b0 + kRopeBlock * kBlockBytes;
    unsigned char* p1 = smem + kP1Off;
    q_desc = wgmma_desc_sw128(smem + kQOff);
    k_desc = wgmma_desc_sw128(W == 0 ? b0 : b1);
    v0 = wgmma_desc_sw128_nmajor(b0 + W * kLBlocks * kBlockBytes, kBlockBytes);
    v1 = wgmma_desc_sw128_nmajor(b1 + W * kLBlocks * kBlockBytes, kBlockBytes);
    own_p = W == 0 ? p0 : p1;
    other_p_desc = wgmma_desc_sw128(W == 0 ? p1 : p0);
    full_l = smem_addr(&sy.full[W][kL]);
    full_r = smem_addr(&sy.full[W][kR]);
    empty0 = smem_addr(&sy.empty[0][W == 0 ? kL : kR]);
    empty1 = smem_addr(&sy.empty[1][W == 0 ? kL : kR]);
  }
};

// Warpgroup 0: tiles 2i in buffer 0.
__device__ __forceinline__ void consume0(Consumer& c, unsigned char* smem, Sync& sy,
                                         float scale_log2) {
  const Role<0> r(smem, sy);
  mbar_wait(smem_addr(&sy.q_full), 0);

  float s[32];
  uint32_t pa[16];
  for (uint32_t phase = 0;; phase ^= 1) {
    const TileState st = s_tile<kL>(s, r.q_desc, r.k_desc, r.full_l, r.full_r, sy.state[0], phase);
    if (st == kEnd) break;

    float tmax[2];
    c.mask(st, s, sy.valid[0], scale_log2, tmax);
    const float m_new[2] = {lazy_max(c.m[0], tmax[0]), lazy_max(c.m[1], tmax[1])};
    c.softmax(s, m_new, scale_log2, pa);
    c.put_max(sy.max);
    named_barrier_arrive(kBarMax0, 2 * kWarpgroup);

    wgmma_fence_operands(c.o);
    wgmma_fence_operands(pa);
    wgmma_fence();
    pv_rs(c.o, pa, r.v0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operands(c.o);
    wgmma_fence_operands(pa);
    if (c.lane == 0) mbar_arrive(r.empty0);  // buffer 0's L half: S0 and P0 · V0[L] are done

    // The pair's maximum (consumer 1's): P0 rescaled to it from fp32, rounded once, for consumer
    // 1. Every warp of this warpgroup waited for its S MMAs before the barrier, so none reads the
    // rope block any more.
    named_barrier_sync(kBarMax1, 2 * kWarpgroup);
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_pair = sy.max[h ? c.r1 : c.r0];
      alpha[h] = exp2_ftz(c.m[h] - m_pair);
      c.m[h] = m_pair;
    }
    // Where no row of the warp moved (lazy_max keeps most), pa holds these bits already.
    if (Consumer::any_moved(alpha)) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const __nv_bfloat162 pp =
              __floats2bfloat162_rn(s[4 * j + 2 * h] * alpha[h], s[4 * j + 2 * h + 1] * alpha[h]);
          memcpy(&pa[2 * j + h], &pp, 4);
        }
    }
    c.store_p(r.own_p, pa);
    fence_proxy_async_smem();
    named_barrier_arrive(kBarP0, 2 * kWarpgroup);

    named_barrier_sync(kBarP1, 2 * kWarpgroup);
    c.scale_o(alpha);
#pragma unroll
    for (int h = 0; h < 2; ++h) c.l[h] *= alpha[h];
    wgmma_fence_operands(c.o);
    wgmma_fence();
    pv_ss(c.o, r.other_p_desc, r.v1);
    wgmma_commit();
    // Waited for here, not under the next pair's S: ptxas serialises every MMA of the kernel
    // when a wait leaves this one pending across the loop (C7514), and consumer 1 keeps the
    // tensor cores busy meanwhile. Buffer 1's L half is then free.
    wgmma_wait<0>();
    wgmma_fence_operands(c.o);
    if (c.lane == 0) mbar_arrive(r.empty1);
  }
}

// Warpgroup 1: tiles 2i + 1 in buffer 1.
__device__ __forceinline__ void consume1(Consumer& c, unsigned char* smem, Sync& sy,
                                         float scale_log2) {
  const Role<1> r(smem, sy);
  mbar_wait(smem_addr(&sy.q_full), 0);

  float s[32];
  uint32_t pa[16];
  for (uint32_t phase = 0;; phase ^= 1) {
    const TileState st = s_tile<kR>(s, r.q_desc, r.k_desc, r.full_r, r.full_l, sy.state[1], phase);
    if (st == kEnd) break;

    float tmax[2];
    c.mask(st, s, sy.valid[1], scale_log2, tmax);
    named_barrier_sync(kBarMax0, 2 * kWarpgroup);
    const float m_new[2] = {lazy_max(sy.max[c.r0], tmax[0]), lazy_max(sy.max[c.r1], tmax[1])};
    __syncwarp();  // every lane has read its rows' maxima before a lane overwrites them
    c.softmax(s, m_new, scale_log2, pa);
    c.put_max(sy.max);
    named_barrier_arrive(kBarMax1, 2 * kWarpgroup);

    wgmma_fence_operands(c.o);
    wgmma_fence_operands(pa);
    wgmma_fence();
    pv_rs(c.o, pa, r.v1);
    wgmma_commit();
    c.store_p(r.own_p, pa);

    named_barrier_sync(kBarP0, 2 * kWarpgroup);
    pv_ss(c.o, r.other_p_desc, r.v0);
    wgmma_commit();
    fence_proxy_async_smem();
    named_barrier_arrive(kBarP1, 2 * kWarpgroup);

    wgmma_wait<1>();
    wgmma_fence_operands(pa);
    if (c.lane == 0) mbar_arrive(r.empty1);  // buffer 1's R half: S1 and P1 · V1[R] are done
    wgmma_wait<0>();
    wgmma_fence_operands(c.o);
    if (c.lane == 0) mbar_arrive(r.empty0);  // buffer 0's R half and P0: P0 · V0[R] is done
  }
}

// Column blocks kB0 .. kB1 − 1 of row kK of a producer thread's four (rows g + 16k: 2,048 bytes
// apart) from src (bytes 0: zeros), every shared offset an immediate.
template <int kB0, int kB1, int kK>
__device__ __forceinline__ void copy_row(uint32_t dst, const bf16* src, int bytes,
                                         uint64_t policy) {
  [&]<int... B>(std::integer_sequence<int, B...>) {
    (cp_async16_at_l2<(kB0 + B) * kBlockBytes + kK * 2048>(dst, src + (kB0 + B) * 64, bytes,
                                                           policy),
     ...);
  }
  (std::make_integer_sequence<int, kB1 - kB0>{});
}
template <int kB0, int kB1>
__device__ __forceinline__ void copy_rows(uint32_t dst, const bf16* const (&src)[4],
                                          const int (&bytes)[4], uint64_t policy) {
  copy_row<kB0, kB1, 0>(dst, src[0], bytes[0], policy);
  copy_row<kB0, kB1, 1>(dst, src[1], bytes[1], policy);
  copy_row<kB0, kB1, 2>(dst, src[2], bytes[2], policy);
  copy_row<kB0, kB1, 3>(dst, src[3], bytes[3], policy);
}

// The producer warpgroup (thread x of 128). Thread x copies 16-byte chunk x % 8 of every column
// block of rows g + 16k (g = x / 8, k < 4) of both tiles of a pair, and resolves one of those
// eight rows: row g + 16 (x % 4) of tile x / 4 % 2 (its group's lanes then exchange them).
struct Producer {
  const AttentionParams& p;
  int t, ntiles;
  int64_t seq, nk, begin, end;
  int x, g, sub;
  uint64_t policy;  // the L2 policy of the gathered rows: evict last

  __device__ __forceinline__ int32_t index_of(int pair) const {
    const int tile = 2 * pair + (sub >> 2);
    const int64_t i = begin + static_cast<int64_t>(tile) * kKeys + g + 16 * (sub & 3);
    return tile < ntiles && i < end ? entry_index(p, t, i) : -1;
  }

  // This thread's chunk of cache row `row` (rows fit 31 bits: mla_wgmma_applies), or of row 0
  // for a masked one, which is copied as zeros: one wide multiply-add, formed once for both
  // halves of the row's tile.
  __device__ __forceinline__ const bf16* source(int32_t row) const {
    const uint32_t r = row >= 0 ? static_cast<uint32_t>(row) : 0u;
    const uint32_t row_bytes = static_cast<uint32_t>(p.k_sr) * sizeof(bf16);
    const char* base = static_cast<const char*>(p.k) + sub * 16;
    return reinterpret_cast<const bf16*>(base + static_cast<uint64_t>(r) * row_bytes);
  }

  // Copies column blocks kB0 .. kB1 − 1 of this thread's rows `rows` (sources `src`) of the cache
  // into a buffer (dst: the buffer's shared address plus this thread's offset in every block).
  template <int kB0, int kB1>
  __device__ __forceinline__ void copy(uint32_t dst, const bf16* const (&src)[4],
                                       const int32_t (&rows)[4]) const {
    int bytes[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) bytes[k] = rows[k] >= 0 ? 16 : 0;
    copy_rows<kB0, kB1>(dst, src, bytes, policy);
  }
};

__device__ __forceinline__ void produce(const Producer& pr, unsigned char* smem, Sync& sy, int h0) {
  const AttentionParams& p = pr.p;
  const int x = pr.x, lane = x & 31;
  // This thread's offset in every column block: chunk `sub` of row g (rows g + 16k follow).
  const uint32_t in_block = pr.g * 128 + ((pr.sub ^ (pr.g & 7)) << 4);
  const uint32_t q_dst = smem_addr(smem + kQOff) + in_block;
  const uint32_t dst0 = smem_addr(smem + kBufOff) + in_block, dst1 = dst0 + kTileBytes;
  const auto full = [&](int b, int h) { return &sy.full[b][h]; };
  const auto empty = [&](int b, int h) { return smem_addr(&sy.empty[b][h]); };
  const auto arrive_full = [&](int b, int h) {
    cp_async_mbar_arrive(full(b, h));
    mbar_arrive(smem_addr(full(b, h)));
  };

  // Q rows of the 64 heads; heads past H are zero.
  {
    int64_t rows[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int head = h0 + pr.g + 16 * k;
      rows[k] = head < p.H ? pr.t * p.q_st + head * p.q_sh : -1;
    }
    const bf16* qbase = static_cast<const bf16*>(p.q);
    const bf16* src[4];
    int bytes[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      src[k] = rows[k] >= 0 ? qbase + rows[k] + pr.sub * 8 : qbase;
      bytes[k] = rows[k] >= 0 ? 16 : 0;
    }
    copy_rows<0, kColBlocks>(q_dst, src, bytes, l2_evict_first_policy());  // read once
    cp_async_mbar_arrive(&sy.q_full);
  }

  // Each pair's rows, two dependent loads resolved over the two pairs before it.
  const int npairs = (pr.ntiles + 1) / 2;
  int32_t index = pr.index_of(2);                                       // of pair i + 2
  PendingRow pending = entry_lookup(p, pr.index_of(1), pr.nk, pr.seq);  // of pair i + 1
  // Of pair i (31 bits: mla_wgmma_applies).
  int32_t row =
      static_cast<int32_t>(paged_resolve(p, entry_lookup(p, pr.index_of(0), pr.nk, pr.seq)));
  uint32_t phase = 0;
  for (int i = 0; i < npairs; ++i) {
    // Whether any of the pair's 128 entries names a key: a pair of none adds nothing (its
    // probabilities are 0 and the running maximum stays), so it is skipped, exactly. DSA lists
    // of early queries end in such padding. And whether each tile's 64 entries all do.
    const bool valid = row >= 0;
    const int flags = (__any_sync(0xffffffffu, valid) ? kAnyKey : 0) |
                      (__all_sync(0xffffffffu, valid || pr.sub >= 4) ? kAllKeys0 : 0) |
                      (__all_sync(0xffffffffu, valid || pr.sub < 4) ? kAllKeys1 : 0);
    if (lane == 0) sy.keys[i & 1][x >> 5] = static_cast<uint8_t>(flags);
    named_barrier_sync(kBarPairs, kWarpgroup);
    const uint8_t* keys = sy.keys[i & 1];
    const int any_key = keys[0] | keys[1] | keys[2] | keys[3];
    const int all_keys = keys[0] & keys[1] & keys[2] & keys[3];
    if (any_key & kAnyKey) {
      int32_t ra[4], rb[4];  // this thread's rows of the pair's two tiles, and their sources
      const bf16 *sa[4], *sb[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        ra[k] = __shfl_sync(0xffffffffu, row, (lane & ~7) | k);
        rb[k] = __shfl_sync(0xffffffffu, row, (lane & ~7) | (4 + k));
        sa[k] = pr.source(ra[k]);
        sb[k] = pr.source(rb[k]);
      }
      const int my_key = pr.g + 16 * (pr.sub & 3);
      // Each buffer's flags go with the half its consumer waits for first.
      mbar_wait(empty(0, kL), phase ^ 1);
      if (pr.sub < 4) sy.valid[0][my_key] = valid;
      if (x == 0) sy.state[0] = all_keys & kAllKeys0 ? kFull : kPartial;
      pr.copy<0, kLBlocks>(dst0, sa, ra);
      arrive_full(0, kL);
      mbar_wait(empty(1, kR), phase ^ 1);
      if (pr.sub >= 4) sy.valid[1][my_key] = valid;
      if (x == 0) sy.state[1] = all_keys & kAllKeys1 ? kFull : kPartial;
      pr.copy<kLBlocks, kColBlocks>(dst1, sb, rb);
      arrive_full(1, kR);
      mbar_wait(empty(0, kR), phase ^ 1);
      pr.copy<kLBlocks, kColBlocks>(dst0, sa, ra);
      arrive_full(0, kR);
      mbar_wait(empty(1, kL), phase ^ 1);
      pr.copy<0, kLBlocks>(dst1, sb, rb);
      arrive_full(1, kL);
      phase ^= 1;
    }
    row = static_cast<int32_t>(paged_resolve(p, pending));
    pending = entry_lookup(p, index, pr.nk, pr.seq);
    index = pr.index_of(i + 3);
  }
  // The end, where each consumer waits first.
  mbar_wait(empty(0, kL), phase ^ 1);
  if (x == 0) sy.state[0] = kEnd;
  arrive_full(0, kL);
  mbar_wait(empty(1, kR), phase ^ 1);
  if (x == 0) sy.state[1] = kEnd;
  arrive_full(1, kR);
  cp_async_wait<0>();
}

__global__ void __launch_bounds__(kThreads, 1)
    mla_wgmma_kernel(const AttentionParams p, int splits, int64_t keys_per_split, float* part_o,
                     float* part_ml) {
  pdl_begin();
  extern __shared__ unsigned char smem_raw[];
  __shared__ Sync sy;
  unsigned char* smem = align_smem_1024(smem_raw);

  // Reverse token order: in a prefill the latest positions (longest rows) start first.
  const int t = p.T - 1 - static_cast<int>(blockIdx.x);
  const int split = blockIdx.y;
  const int h0 = blockIdx.z * kMlaWgmmaHeads;
  const int tid = threadIdx.x;
  const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform, as ptxas can see

  const auto [seq, nk, begin, end] = split_range(p, t, split, keys_per_split);
  const int ntiles = end > begin ? static_cast<int>((end - begin + kKeys - 1) / kKeys) : 0;

  if (splits > 1 && ntiles == 0) {  // nothing here: the combine skips this split
    if (tid < kMlaWgmmaHeads && h0 + tid < p.H) mark_split_empty(p, part_ml, split, t, h0 + tid);
    return;
  }
  if (tid == 0) {
    mbar_init(&sy.q_full, kWarpgroup);
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 2; ++h) {
        // Each producer thread: its copies' arrival and its own (which publishes the flags).
        mbar_init(&sy.full[b][h], 2 * kWarpgroup);
        mbar_init(&sy.empty[b][h], kWarpgroup / 32);
      }
  }
  __syncthreads();

  if (wg == 2) {
    warpgroup_reg_dealloc<kProducerRegs>();
    const int x = tid - 2 * kWarpgroup;
    const Producer pr{p, t, ntiles, seq, nk, begin, end, x, x >> 3, x & 7, l2_evict_last_policy()};
    produce(pr, smem, sy, h0);
    return;
  }
  warpgroup_reg_alloc<kConsumerRegs>();
  const float scale_log2 = p.scale * kLog2e;
  Consumer c(tid & 127);
  if (wg == 0)
    consume0(c, smem, sy, scale_log2);
  else
    consume1(c, smem, sy, scale_log2);

  // Each consumer summed its own tiles' probabilities; the sums meet in P1's block (dead now).
  named_barrier_sync(kBarSums, 2 * kWarpgroup);
  float* sum_s = reinterpret_cast<float*>(smem + kP1Off);
  if (c.q4 == 0) {
    sum_s[wg * 64 + c.r0] = c.l[0];
    sum_s[wg * 64 + c.r1] = c.l[1];
  }
  named_barrier_sync(kBarSums, 2 * kWarpgroup);

  if (splits == 1) {
    // The bf16 rows staged in Q's space (every S MMA has been waited for), then copied out by
    // bulk copies, a row each: the CTA leaves once they have read shared memory, not after its
    // threads' stores have drained, and the global writes leave the SM as 64 copies instead of
    // 16,384 4-byte stores.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h ? c.r1 : c.r0;
      const float l = sum_s[row] + sum_s[64 + row];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      unsigned char* dst = smem + kQOff + row * kStageRow + 2 * (wg * 256 + 2 * c.q4);
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<__nv_bfloat162*>(dst + 16 * j) =
            __floats2bfloat162_rn(c.o[4 * j + 2 * h] * inv, c.o[4 * j + 2 * h + 1] * inv);
    }
    fence_proxy_async_smem();
    named_barrier_sync(kBarSums, 2 * kWarpgroup);
    if (tid < kMlaWgmmaHeads && h0 + tid < p.H) {
      bulk_store(static_cast<bf16*>(p.out) + t * p.o_st + (h0 + tid) * p.o_sh,
                 smem_addr(smem + kQOff + tid * kStageRow), 2 * kMlaWgmmaDv);
      bulk_commit();
      bulk_wait_read();
    }
    return;
  }
  const int64_t part = static_cast<int64_t>(split) * p.T + t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = h ? c.r1 : c.r0, head = h0 + row;
    if (head >= p.H) continue;
    float* dst = part_o + (part * p.H + head) * p.Dv + wg * 256 + 2 * c.q4;
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *reinterpret_cast<float2*>(dst + 8 * j) =
          make_float2(c.o[4 * j + 2 * h], c.o[4 * j + 2 * h + 1]);
    if (wg == 0 && c.q4 == 0) {
      float* ml = part_ml + (part * p.H + head) * 2;
      ml[0] = c.m[h];  // the combine reads it only where l > 0
      ml[1] = sum_s[row] + sum_s[64 + row];
    }
  }
}

// The dynamic shared memory and the static (Sync).
constexpr int kSmemTotal = kSmemBytes + static_cast<int>(sizeof(Sync));

}  // namespace

bool mla_wgmma_applies(const AttentionParams& p, int head_group, int device) {
  DeviceFacts f;
  if (device_facts(device, &f) != cudaSuccess || f.smem_optin < kSmemTotal) return false;
  auto aligned = [](const void* ptr, int bytes) {
    return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
  };
  return head_group == kMlaWgmmaHeads && p.Hk == 1 && p.Dk == kMlaWgmmaDk && p.Dv == kMlaWgmmaDv &&
         p.v == p.k && p.v_sr == p.k_sr && p.num_rows <= INT32_MAX &&
         p.k_sr * static_cast<int64_t>(sizeof(bf16)) <= UINT32_MAX && aligned(p.q, 16) &&
         aligned(p.k, 16) && aligned(p.out, 16) && p.q_st % 8 == 0 && p.q_sh % 8 == 0 &&
         p.k_sr % 8 == 0 && p.o_st % 8 == 0 && p.o_sh % 8 == 0;
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
