#include <cuda_bf16.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "ops/cuda/device_facts.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/moe_fp8_kernels.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/pipeline_ptx.cuh"
#include "ops/cuda/tma_ptx.cuh"
#include "ops/cuda/wgmma_ptx.cuh"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

// ---- Grouped block-FP8 experts on the tensor cores (steps of many rows: prefill) -------------
//
// Each expert's rows (contiguous after ops::moe_align) are cut into 64-row tiles; an output tile is
// 64 rows × 256 weight rows (gated: for 128 SwiGLU outputs, each half 64 gate rows and the same 64
// up rows), K in blocks of 128, the checkpoint's scale block. 64 rows rather than 128: an expert's
// rows are padded to a tile less (GLM-5's 8,192-token prefill, 256 experts: 12 % padding rows
// instead of 24 %), for 25 % more bytes a K block per MMA (8 + 32 KB for 64 × 256 against 16 + 16
// KB for 128 × 128); gate·up took 8.5 % less time, down 1 % more (bench/RESULTS.md, session 31).
// A tile may take two of an expert's 64-row units under one weight tile (Shape, row_units): the
// same padding, 48 KB a K block for twice the MMAs. Tiles are numbered expert by expert, within an
// expert weight tile by weight tile with its row tiles adjacent, so the CTAs running side by side
// share a weight tile (read from DRAM once, L2 serving the rest) and an expert's rows (in L2). A
// persistent grid of one CTA per SM walks the tiles: gate·up's at a fixed stride from its block
// index, down's in turn from a counter zeroed before each launch (counted_tiles), so that the CTAs
// running a weight tile's row tiles start them within moments of each other. Every CTA scans the
// device-side offsets once into shared memory, so nothing waits on the host.
//
// A CTA is three warpgroups, specialised. The producer copies K blocks into a Shape::kStages-deep
// ring of 128-byte-swizzled shared tiles: one thread issues the tiles with TMA, a warp copies the
// block's activation and weight scales with cp.async; each slot's `full` barrier completes when all
// of them have landed. Each expert's weights have their own tensor maps, written by a small kernel
// before each launch from one template (the experts differ only in their addresses), so the
// device-side expert table is all the host needs. Two consumer warpgroups, each owning 128 of the
// tile's weight rows (all its rows), run the block's four wgmma m64n128k32 in sub-steps of kSub
// into a fresh fp32 fragment and, while the tensor cores run the next sub-step, add the previous
// one to their accumulator scaled by the row's activation scale times the block's weight scale
// (DeepSeek's promotion); a slot's `empty` barrier completes once both have promoted its last
// sub-step. The producer runs ahead across tiles while the consumers store a finished tile.
// Registers move to the consumers (three fp32 fragments each): the producer keeps kProducerRegs.
// Rows do not depend on each other, but fp32 sums inside a sub-step come in the tensor core's
// order: this kernel is not bitwise equal to the skinny one.

constexpr int kBM = kMoeFp8TcRowTile, kBN = 256, kBK = 128;
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // the producer, then two consumers
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(kWarpgroup * kProducerRegs + 2 * kWarpgroup * kConsumerRegs <=
                  kThreads * launch_regs_per_thread(kThreads),
              "the CTA's registers at launch");
// Arrivals that free a slot: every consumer warp, once its MMAs and promotions are past it.
constexpr int kConsumerWarps = 2 * kWarpgroup / 32;
// Arrivals that fill one: the TMA thread's (with the tiles' bytes) and the scale warp's lanes.
constexpr int kFillArrivals = 1 + 32;
// A K block of each operand (e4m3): a row unit's activation rows, and the tile's weight rows
// (each consumer warpgroup's 128: one 1,024-byte-aligned half).
constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK, kBHalfBytes = kBBytes / 2;

// Row units a tile takes (kUnits): one, or two consecutive units of an expert under the same
// weight tile, each consumer warpgroup running both units' MMAs into one fragment in turn and
// promoting them into an accumulator per unit (an expert's odd last unit is a tile of one). Two
// move 48 KB a K block for twice the MMAs of one unit's 40 KB, and issue a block's waits and
// scale reads once for both; each MMA is then waited for before its promotion, where one unit
// overlaps the next sub-step's MMAs with the previous one's promotion.
template <int kUnits>
struct Shape {
  static constexpr int kRows = kUnits * kBM;  // a tile's activation rows
  // Per slot: the units' A tiles and the B tile, then kRows activation scales and the block's (up
  // to) two weight scales.
  static constexpr int kSlotABytes = kUnits * kABytes;
  static constexpr int kScaleFloats = kRows + 4;
  // As deep a ring as the opt-in shared memory takes beside the static variables (the offsets'
  // scan, the barriers): 5 slots of one unit, 4 of two.
  static constexpr int kStages = kUnits == 1 ? 5 : 4;
  static constexpr int kSmemBytes =
      kStages * (kSlotABytes + kBBytes + kScaleFloats * 4) + 1024 /* alignment */;
};
// The row units each projection's tiles take: down two, gate·up one (in two units it was slower in
// every form measured; the figures in docs/design.md).
__host__ __device__ constexpr int row_units(bool gated) {
  return gated ? 1 : 2;
}

// A tile's outputs: gated, 128 SwiGLU outputs of its 256 weight rows; else one per weight row.
__host__ __device__ constexpr int tile_outputs(bool gated) {
  return gated ? kBN / 2 : kBN;
}

__device__ __forceinline__ float silu_mul(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

// Tile `tile` of the numbering above: its expert, first row, end of the expert's rows and first
// weight row; false past the last tile. cum[e] = row tiles of the experts before e (of kUnits
// row units each). In 32 bits (a 64-bit division is a call, and the producer has few registers).
struct Tile {
  int e, r0, r_end, n0;
};
template <int kUnits>
__device__ __forceinline__ bool find_tile(const int* cum, int E, int n_tiles,
                                          const int32_t* offsets, int tile, int n_step, Tile& t) {
  const int q = tile / n_tiles;  // cum[e] · n_tiles <= tile < cum[e + 1] · n_tiles
  if (q >= cum[E]) return false;
  int lo = 0, hi = E;  // the largest e with cum[e] <= q
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cum[mid] <= q)
      lo = mid;
    else
      hi = mid;
  }
  const int m_tiles = cum[lo + 1] - cum[lo];
  const int local = tile - cum[lo] * n_tiles;
  t.e = lo;
  t.r0 = offsets[lo] + (local % m_tiles) * Shape<kUnits>::kRows;
  t.r_end = offsets[lo + 1];
  t.n0 = (local / m_tiles) * n_step;
  return true;
}

// A position in a ring of kDepth slots: the slot and the parity of the pass over the ring.
template <int kDepth>
struct RingPos {
  int slot = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++slot == kDepth) {
      slot = 0;
      phase ^= 1;
    }
  }
};

// Which projection takes its tiles from the counter: down, whose tiles are short (K = the
// intermediate size) and whose CTAs drifted apart at a fixed stride (its weights read from DRAM
// about twice: 7.5 GB a launch on the H100, 3.4 GB counted, 21 % faster; bench/RESULTS.md,
// session 30). Gate·up's tiles are three times longer and its weights were read about once; it
// took 7-12 % longer counted, without any spill, reading less from DRAM but working L2 harder
// (session 31), so it keeps the stride.
__host__ __device__ constexpr bool counted_tiles(bool gated) {
  return !gated;
}
// The CTA's tiles as its TMA thread takes them from the counter: a ring of tile numbers, each
// published on its `full` barrier and freed on its `empty` one once the scale warp and every
// consumer warp have read it. A number past the last tile ends every role's loop. Static shared
// variables, so that their addresses are constants and take no registers in the consumers.
constexpr int kTileSlots = 4;
constexpr int kTileReaders = 1 + kConsumerWarps;
__shared__ int tile_number[kTileSlots];
__shared__ uint64_t tile_full[kTileSlots], tile_empty[kTileSlots];
using TilePos = RingPos<kTileSlots>;
// The TMA thread's next tile.
__device__ __forceinline__ int take_tile(int* counter, TilePos& p) {
  mbar_wait(smem_addr(tile_empty + p.slot), p.phase ^ 1);
  const int tile = atomicAdd(counter, 1);
  tile_number[p.slot] = tile;
  mbar_arrive(smem_addr(tile_full + p.slot));
  p.advance();
  return tile;
}
// The same tile for a reader warp: every lane calls it.
__device__ __forceinline__ int read_tile(TilePos& p) {
  mbar_wait(smem_addr(tile_full + p.slot), p.phase);
  const int tile = tile_number[p.slot];
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(smem_addr(tile_empty + p.slot));
  p.advance();
  return tile;
}

// The row units tile t holds: kUnits, but one for an expert's odd last unit.
template <int kUnits>
__device__ __forceinline__ int tile_units(const Tile& t) {
  return kUnits == 1 || t.r0 + kBM >= t.r_end ? 1 : 2;
}

// Runs body(t) on each tile a role takes, in the numbering above: at a fixed stride from the
// block index, or for counted tiles the ones the TMA thread takes from the counter (`take`), which
// the other roles read.
template <bool kGated, int kUnits, typename Body>
__device__ __forceinline__ void for_each_tile(const MoeFp8GemmArgs& a, const int* cum, int n_tiles,
                                              int n_step, int* counter, bool take, Body&& body) {
  TilePos p;
  Tile t;
  for (int tile = blockIdx.x;; tile += gridDim.x) {
    if constexpr (counted_tiles(kGated)) tile = take ? take_tile(counter, p) : read_tile(p);
    if (!find_tile<kUnits>(cum, a.experts, n_tiles, a.offsets, tile, n_step, t)) return;
    body(t);
  }
}

struct Ring {
  uint8_t* a;       // [kStages][kRows][128 bytes]
  uint8_t* b;       // [kStages][2 warpgroups][kBN / 2 rows][128 bytes]
  float* scales;    // [kStages][kScaleFloats]
  uint64_t* full;   // [kStages]
  uint64_t* empty;  // [kStages]
};

// The producer warpgroup's two busy warps. Warp 0's first lane issues a K block's tiles with TMA
// onto the slot's `full` barrier, counted in bytes: each of the tile's row units' 64 rows of
// activations (a second unit only where the expert has one) and its 256 weight rows (gated: per
// half 64 gate rows, then the same 64 up rows), zeros past N and K. Activation rows past the
// expert's are the next expert's (zeros past the last row): they reach only accumulator rows the
// epilogue does not store, their scales zero. Warp 1 copies the block's scales with cp.async (lane
// l: tile rows l + 32 i; lanes 0 and 1 the block's weight scales), each lane arriving once its own
// have landed.
template <bool kGated, int kUnits>
__device__ __forceinline__ void produce(const MoeFp8GemmArgs& a, const TmaMap& a_map,
                                        const TmaMap* maps, int* counter, const Ring& ring,
                                        const int* cum, int n_tiles, int n_step, int KB,
                                        bool tiles) {
  using S = Shape<kUnits>;
  const int lane = threadIdx.x & 31;
  const uint32_t empty0 = smem_addr(ring.empty), full0 = smem_addr(ring.full);
  const uint32_t a0 = smem_addr(ring.a), b0 = smem_addr(ring.b);
  RingPos<S::kStages> pos;
  for_each_tile<kGated, kUnits>(a, cum, n_tiles, n_step, counter, tiles, [&](const Tile& t) {
    if (tiles) {
      const TmaMap* w = maps + (kGated ? 2 : 1) * t.e;
      tma_map_acquire(w);
      if constexpr (kGated) tma_map_acquire(w + 1);
      const int units = tile_units<kUnits>(t);
      for (int kb = 0; kb < KB; ++kb) {
        mbar_wait(empty0 + 8 * pos.slot, pos.phase ^ 1);
        const uint32_t full = full0 + 8 * pos.slot, k = kb * kBK;
        mbar_arrive_expect_tx(full, units * kABytes + kBBytes);
        const uint32_t a_slot = a0 + pos.slot * S::kSlotABytes;
        tma_load_2d(a_slot, &a_map, full, k, t.r0);
        if (units == 2) tma_load_2d(a_slot + kABytes, &a_map, full, k, t.r0 + kBM);
        const uint32_t b = b0 + pos.slot * kBBytes;
        if constexpr (kGated) {  // each half: its 64 outputs' gate rows, then their up rows
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            tma_load_2d(b + h * kBHalfBytes, w, full, k, t.n0 + h * kBN / 4);
            tma_load_2d(b + h * kBHalfBytes + kBHalfBytes / 2, w + 1, full, k, t.n0 + h * kBN / 4);
          }
        } else {
          tma_load_2d(b, w, full, k, t.n0);
        }
        pos.advance();
      }
    } else {
      const float* xs = a.x_scale + t.r0 + lane;
      // Lanes 0 and 1: gated, the gate and the up block of the tile's 128 outputs; else the
      // blocks of the warpgroups' 128 weight rows each (the second past N: zero).
      const bool w_ok = lane < 2;
      const int n_blk = t.n0 / 128 + (kGated ? 0 : lane);
      const float* ws =
          reinterpret_cast<const float*>(kGated && lane == 1 ? a.s2[t.e] : a.s1[t.e]) +
          n_blk * a.sw_ld;
      const int w_bytes = n_blk * 128 < a.N ? 4 : 0;
      for (int kb = 0; kb < KB; ++kb) {
        mbar_wait(empty0 + 8 * pos.slot, pos.phase ^ 1);
        float* sc = ring.scales + pos.slot * S::kScaleFloats;
#pragma unroll
        for (int i = 0; i < S::kRows / 32; ++i)
          cp_async4(sc + lane + 32 * i, xs + kb * a.x_scale_ld + 32 * i,
                    t.r0 + lane + 32 * i < t.r_end ? 4 : 0);
        if (w_ok) cp_async4(sc + S::kRows + lane, ws + kb, w_bytes);
        cp_async_mbar_arrive(&ring.full[pos.slot]);
        pos.advance();
      }
    }
  });
}

// A warpgroup's outputs of a finished plain tile (down), bf16, in 16-byte stores. A thread's
// accumulator holds two columns of each 8-column chunk of its two rows, a quad of lanes a chunk's
// 8; each group of four chunks is transposed within the quad (three shuffles), so that each lane
// stores a whole chunk and a warp's store fills its 32-byte sectors. With 4-byte stores,
// half-filled sectors, down took 17 % longer (2.47 against 2.11 ms a launch on an H100).
// Gate·up keeps its 4-byte stores (store_swiglu): given these, it read its weights from DRAM
// 2.5 times and took 65 % longer, as with any epilogue tried that changed its timing
// (bench/RESULTS.md, session 31).
template <int kWgc>
__device__ __forceinline__ void store_plain(const MoeFp8GemmArgs& a, const Tile& t,
                                            const float (&acc)[64], int64_t row0, int n_step) {
  const int q = threadIdx.x & 3;
  // This lane's chunks start at column n_lane + 32 g.
  const int64_t n_lane = t.n0 + kWgc * (n_step / 2) + 8 * q;
  const int64_t n_left = a.N - n_lane;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = row0 + 8 * h;
    __nv_bfloat16* const yr = static_cast<__nv_bfloat16*>(a.y) + r * a.ldy + n_lane;
    const bool row_ok = r < t.r_end;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      uint32_t w[4];  // chunk 4g + c: this lane's two columns
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = 4 * g + c;
        const __nv_bfloat162 b = __floats2bfloat162_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        w[c] = *reinterpret_cast<const uint32_t*>(&b);
      }
      // Round s: lane q sends its word of chunk 4g + (q ^ s) to lane q ^ s, and takes from it
      // that lane's columns of its own chunk 4g + q.
      uint32_t out[4] = {0, 0, 0, 0};  // each set in one round below
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int c = q ^ s;
        const uint32_t send = c == 0 ? w[0] : c == 1 ? w[1] : c == 2 ? w[2] : w[3];
        const uint32_t got = s == 0 ? send : __shfl_xor_sync(0xffffffffu, send, s);
        if (c == 0) out[0] = got;
        if (c == 1) out[1] = got;
        if (c == 2) out[2] = got;
        if (c == 3) out[3] = got;
      }
      if (row_ok && 32 * g < n_left)  // a chunk is whole or past N (N % 8 == 0)
        *reinterpret_cast<uint4*>(yr + 32 * g) = make_uint4(out[0], out[1], out[2], out[3]);
    }
  }
}

// A warpgroup's SwiGLU outputs of a finished gated tile, bf16, a thread's two columns of a chunk
// at a time.
template <int kWgc>
__device__ __forceinline__ void store_swiglu(const MoeFp8GemmArgs& a, const Tile& t,
                                             const float (&acc)[64], int64_t row0, int n_step) {
  auto* y = static_cast<__nv_bfloat16*>(a.y);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int64_t n = t.n0 + kWgc * (n_step / 2) + 8 * j + 2 * (lane & 3);
    if (n >= a.N) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row0 + 8 * h;
      if (r >= t.r_end) continue;
      const float v0 = silu_mul(acc[4 * j + 2 * h], acc[4 * (j + 8) + 2 * h]),
                  v1 = silu_mul(acc[4 * j + 2 * h + 1], acc[4 * (j + 8) + 2 * h + 1]);
      *reinterpret_cast<__nv_bfloat162*>(y + r * a.ldy + n) = __floats2bfloat162_rn(v0, v1);
    }
  }
}

// acc += part scaled by its element's row and weight block: f[0] and f[1] for the thread's
// fragment row l/4 (gated: the gate and the up block; plain: f[1] unused), f[2] and f[3] for row
// l/4 + 8.
template <bool kGated>
__device__ __forceinline__ void promote_into(float (&acc)[64], const float (&part)[64],
                                             const float (&f)[4]) {
  if constexpr (kGated) {  // grouped by scale: 16 FFMAs in a row read each (~1 % faster)
#pragma unroll
    for (int fi = 0; fi < 4; ++fi)
#pragma unroll
      for (int j = 8 * (fi & 1); j < 8 * (fi & 1) + 8; ++j) {
        const int e = 4 * j + 2 * (fi >> 1);
        acc[e] += part[e] * f[fi];
        acc[e + 1] += part[e + 1] * f[fi];
      }
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      acc[4 * j + 0] += part[4 * j + 0] * f[0];
      acc[4 * j + 1] += part[4 * j + 1] * f[0];
      acc[4 * j + 2] += part[4 * j + 2] * f[2];
      acc[4 * j + 3] += part[4 * j + 3] * f[2];
    }
  }
}

// promote_into's f for a K block: the thread's two row scales (fragment rows `row` and row + 8
// of the tile) times the block's weight scales times `gain`, from the slot's scales `sc` (kRows
// activation scales, then the weight scales).
template <bool kGated, int kWgc, int kRows>
__device__ __forceinline__ void promotion_factors(const float* sc, int row, float gain,
                                                  float (&f)[4]) {
  const float sw1 = sc[kRows + (kGated ? 0 : kWgc)] * gain,
              sw2 = kGated ? sc[kRows + 1] * gain : sw1;
  const float sx0 = sc[row], sx1 = sc[row + 8];
  f[0] = sx0 * sw1;
  f[1] = sx0 * sw2;
  f[2] = sx1 * sw1;
  f[3] = sx1 * sw2;
}

// A warpgroup's outputs of a finished tile's row unit, from its accumulator.
template <bool kGated, int kWgc>
__device__ __forceinline__ void store_unit(const MoeFp8GemmArgs& a, const Tile& t,
                                           const float (&acc)[64], int64_t row0, int n_step) {
  if constexpr (kGated)
    store_swiglu<kWgc>(a, t, acc, row0, n_step);
  else
    store_plain<kWgc>(a, t, acc, row0, n_step);
}

// This thread's accumulator rows within a row unit (C fragment rows l/4 and l/4 + 8 of its warp).
__device__ __forceinline__ int fragment_row() {
  return ((threadIdx.x >> 5) & 3) * 16 + ((threadIdx.x & 31) >> 2);
}

// A consumer warpgroup's MMA descriptors: of the ring's A tiles and of its (kWgc's) half of the B
// tiles, `step` 16-byte units past the first slot's. The high word (swizzle mode, stride) is the
// same for every slot; only the start address in the low word moves, by 32-bit additions that
// cannot carry out of its field.
template <int kWgc>
struct RingDescs {
  uint32_t hi, a_lo, b_lo;
  __device__ __forceinline__ explicit RingDescs(const Ring& ring) {
    const uint64_t a = wgmma_desc_sw128(ring.a), b = wgmma_desc_sw128(ring.b + kWgc * kBHalfBytes);
    hi = static_cast<uint32_t>(a >> 32);
    a_lo = static_cast<uint32_t>(a);
    b_lo = static_cast<uint32_t>(b);
  }
  __device__ __forceinline__ uint64_t a(uint32_t step) const {
    return uint64_t{hi} << 32 | (a_lo + step);
  }
  __device__ __forceinline__ uint64_t b(uint32_t step) const {
    return uint64_t{hi} << 32 | (b_lo + step);
  }
};

// A consumer warpgroup (kWgc 0 or 1: the tile's rows times its weight rows 128 kWgc ..): kSub MMAs
// (32 K each) accumulated in the tensor cores before each promotion to the fp32 accumulator. Every
// address the MMAs and barriers take derives from compile-time and CTA-uniform values only (the
// warpgroup is a template argument, the barriers' shared addresses are converted once), so ptxas
// keeps them in uniform registers. Those still take issue slots, and nothing a sub-partition issues
// overlaps its MMAs: per K block gate·up issues 47 uniform instructions beside its 128 promotion
// FFMAs (bench/RESULTS.md, session 32).
template <bool kGated, int kSub, int kWgc>
__device__ __forceinline__ void consume(const MoeFp8GemmArgs& a, float gain, const Ring& ring,
                                        const int* cum, int n_tiles, int n_step, int KB) {
  const int lane = threadIdx.x & 31;
  const int frag_row = fragment_row();
  const RingDescs<kWgc> desc(ring);
  const uint32_t full0 = smem_addr(ring.full), empty0 = smem_addr(ring.empty);
  using S = Shape<1>;
  RingPos<S::kStages> pos;
  for_each_tile<kGated, 1>(a, cum, n_tiles, n_step, nullptr, false, [&](const Tile& t) {
    float acc[64], p0[64], p1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    // Per K block, the products of this thread's two row scales and the block's two weight
    // scales: the current block's (fc) and the previous one's (fp), whose last sub-step is
    // promoted during the current block's first.
    float fc[4], fp[4];
    int slot = 0, prev_slot = 0;
    constexpr int kPer = kBK / 32 / kSub;  // sub-steps per K block
    const int steps = KB * kPer;
    const auto promote = [&](const float(&part)[64], const float(&f)[4]) {
      promote_into<kGated>(acc, part, f);
    };
    const auto release = [&](int s) {
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
    };
    // Sub-step i (sub-step `sub` of its block) into `cur`; a block's first waits for the block's
    // slot and reads its scales.
    const auto issue = [&]<bool kBlockStart>(int sub, float(&cur)[64]) {
      if constexpr (kBlockStart) {
        mbar_wait(full0 + 8 * pos.slot, pos.phase);
        prev_slot = slot;
        slot = pos.slot;
        pos.advance();
#pragma unroll
        for (int k = 0; k < 4; ++k) fp[k] = fc[k];
        promotion_factors<kGated, kWgc, S::kRows>(ring.scales + slot * S::kScaleFloats, frag_row,
                                                  gain, fc);
      }
      // The slot's tiles: kABytes and kBBytes further per slot, +32 bytes of K per MMA (2 in
      // the descriptors' 16-byte units).
      const uint32_t k_step = 2 * kSub * sub;
      const uint32_t a_step = slot * (kABytes >> 4) + k_step,
                     b_step = slot * (kBBytes >> 4) + k_step;
      wgmma_fence_operands(cur);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kSub; ++k)
        wgmma_e4m3_m64n128k32(cur, desc.a(a_step + 2 * k), desc.b(b_step + 2 * k), k);
      wgmma_commit();
    };
    // Sub-step i into `cur`, then sub-step i - 1 promoted from `prev` once its MMAs are done; a
    // block's first sub-step frees the previous block's slot after that promotion.
    const auto step = [&]<bool kBlockStart>(int sub, float(&cur)[64], float(&prev)[64]) {
      issue.template operator()<kBlockStart>(sub, cur);
      wgmma_wait<1>();
      wgmma_fence_operands(prev);
      if constexpr (kBlockStart) {
        promote(prev, fp);
        release(prev_slot);
      } else {
        promote(prev, fc);
      }
    };
    // Sub-step i = 1 + O (mod kU): its fragment by its parity, its place in the block known.
    constexpr int kU = kPer > 2 ? kPer : 2;  // sub-steps per loop iteration: whole blocks, even
    const auto step_at = [&]<int O>() {
      constexpr int sub = (1 + O) % kPer;
      if constexpr ((1 + O) % 2 == 1)
        step.template operator()<sub == 0>(sub, p1, p0);
      else
        step.template operator()<sub == 0>(sub, p0, p1);
    };
    issue.template operator()<true>(0, p0);
    const auto loop_body = [&]<int... O>(std::integer_sequence<int, O...>) {
      (step_at.template operator()<O>(), ...);
    };
    int i = 1;
    for (; i + kU <= steps; i += kU) loop_body(std::make_integer_sequence<int, kU>{});
    // The rest, fewer than kU sub-steps, then the last promotion. Every path ends in its own
    // wait and promotion: which fragment is in flight stays known at compile time.
    const auto finish = [&]<int O>() {  // sub-steps before i + O issued; the last's parity is O's
      wgmma_wait<0>();
      if constexpr (O % 2 == 1) {
        wgmma_fence_operands(p1);
        promote(p1, fc);
      } else {
        wgmma_fence_operands(p0);
        promote(p0, fc);
      }
    };
    const auto tail_step = [&]<int O>() {   // true once finished
      if (O == kU - 1 || i + O == steps) {  // the loop left fewer than kU
        finish.template operator()<O>();
        return true;
      }
      step_at.template operator()<O>();
      return false;
    };
    const auto tail = [&]<int... O>(std::integer_sequence<int, O...>) {
      (tail_step.template operator()<O>() || ...);
    };
    tail(std::make_integer_sequence<int, kU>{});
    release(slot);

    store_unit<kGated, kWgc>(a, t, acc, t.r0 + frag_row, n_step);
  });
}

// A consumer warpgroup of two-unit tiles (Shape<2>; kWgc as above). Per sub-step of kSub MMAs:
// unit 0's MMAs into the fragment, waited for and promoted into acc0, then unit 1's into the same
// fragment and acc1 (a tile of one unit skips them). A slot is freed once the MMAs of its last
// sub-step are complete, before their promotion.
template <bool kGated, int kSub, int kWgc>
__device__ __forceinline__ void consume_pair(const MoeFp8GemmArgs& a, float gain, const Ring& ring,
                                             const int* cum, int n_tiles, int n_step, int KB) {
  using S = Shape<2>;
  const int lane = threadIdx.x & 31;
  const int frag_row = fragment_row();
  const RingDescs<kWgc> desc(ring);
  const uint32_t full0 = smem_addr(ring.full), empty0 = smem_addr(ring.empty);
  constexpr int kPer = kBK / 32 / kSub;  // sub-steps per K block
  RingPos<S::kStages> pos;
  for_each_tile<kGated, 2>(a, cum, n_tiles, n_step, nullptr, false, [&](const Tile& t) {
    const bool two = tile_units<2>(t) == 2;

    float acc0[64], acc1[64], part[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc0[i] = acc1[i] = 0.0f;
    for (int kb = 0; kb < KB; ++kb) {
      mbar_wait(full0 + 8 * pos.slot, pos.phase);
      const int slot = pos.slot;
      pos.advance();
      const float* sc = ring.scales + slot * S::kScaleFloats;
      float f0[4], f1[4];
      promotion_factors<kGated, kWgc, S::kRows>(sc, frag_row, gain, f0);
      promotion_factors<kGated, kWgc, S::kRows>(sc, kBM + frag_row, gain, f1);
      // The slot's tiles, in the descriptors' 16-byte units; +32 bytes of K per MMA.
      const uint32_t a_step = slot * (S::kSlotABytes >> 4), b_step = slot * (kBBytes >> 4);
      const auto mmas = [&](int unit, int sub) {
        const uint32_t k_step = 2 * kSub * sub, a_unit = a_step + unit * (kABytes >> 4);
        wgmma_fence_operands(part);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < kSub; ++k)
          wgmma_e4m3_m64n128k32(part, desc.a(a_unit + k_step + 2 * k),
                                desc.b(b_step + k_step + 2 * k), k);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operands(part);
      };
      const auto release = [&] {
        if (lane == 0) mbar_arrive(empty0 + 8 * slot);
      };
#pragma unroll
      for (int sub = 0; sub < kPer; ++sub) {
        mmas(0, sub);
        if (sub == kPer - 1 && !two) release();
        promote_into<kGated>(acc0, part, f0);
        if (two) {
          mmas(1, sub);
          if (sub == kPer - 1) release();
          promote_into<kGated>(acc1, part, f1);
        }
      }
    }
    store_unit<kGated, kWgc>(a, t, acc0, t.r0 + frag_row, n_step);
    if (two) store_unit<kGated, kWgc>(a, t, acc1, t.r0 + kBM + frag_row, n_step);
  });
}

// Map i of `count` (expert i / per, its gate or only matrix for i % per == 0, else its up
// matrix) = the template pointed at that matrix, a warp per map; and the tile counter zeroed.
constexpr int kMapWarps = 4;
__global__ void __launch_bounds__(kMapWarps * 32)
    moe_fp8_tc_maps_kernel(const uint64_t* w1, const uint64_t* w2, int count, int per,
                           const __grid_constant__ TmaMap tmpl, TmaMap* maps, int* counter) {
  pdl_begin();
  if (blockIdx.x == 0 && threadIdx.x == 0) *counter = 0;
  __shared__ __align__(128) TmaMap staged[kMapWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int i = blockIdx.x * kMapWarps + warp;
  if (i >= count) return;
  static_assert(sizeof(TmaMap) == 32 * 4 && sizeof(TmaMap) == scratch::kTmaMapBytes);
  reinterpret_cast<uint32_t*>(&staged[warp])[lane] = reinterpret_cast<const uint32_t*>(&tmpl)[lane];
  __syncwarp();
  if (lane == 0)
    tma_map_retarget(&staged[warp],
                     reinterpret_cast<const void*>(i % per == 0 ? w1[i / per] : w2[i / per]));
  __syncwarp();
  tma_map_publish(&maps[i], &staged[warp]);
}

template <bool kGated, int kSub>
__global__ void __launch_bounds__(kThreads, 1)
    moe_fp8_tc_kernel(const MoeFp8GemmArgs a, const __grid_constant__ TmaMap a_map,
                      const TmaMap* maps, int* counter, float gain) {
  constexpr int kUnits = row_units(kGated);
  using S = Shape<kUnits>;
  pdl_begin();
  extern __shared__ uint8_t smem_raw[];
  __shared__ int cum[kMoeMaxExperts + 1];
  __shared__ uint64_t full[S::kStages], empty[S::kStages];
  uint8_t* smem = align_smem_1024(smem_raw);
  const Ring ring{smem, smem + S::kStages * S::kSlotABytes,
                  reinterpret_cast<float*>(smem + S::kStages * (S::kSlotABytes + kBBytes)), full,
                  empty};

  const int E = a.experts;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform, as ptxas can see
  if (warp == 0) {
    // Row tiles per expert, prefix-summed: each lane a run of experts, then a warp scan.
    const int per = (E + 31) / 32, e_lo = min(E, lane * per), e_hi = min(E, e_lo + per);
    const auto row_tiles = [&](int e) {
      return (a.offsets[e + 1] - a.offsets[e] + S::kRows - 1) / S::kRows;
    };
    int sum = 0;
    for (int e = e_lo; e < e_hi; ++e) sum += row_tiles(e);
    int incl = sum;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    int run = incl - sum;
    for (int e = e_lo; e < e_hi; ++e) {
      cum[e] = run;
      run += row_tiles(e);
    }
    if (lane == 31) cum[E] = incl;
  } else if (tid == 32) {
    for (int s = 0; s < S::kStages; ++s) {
      mbar_init(&full[s], kFillArrivals);
      mbar_init(&empty[s], kConsumerWarps);
    }
    if constexpr (counted_tiles(kGated))
      for (int s = 0; s < kTileSlots; ++s) {
        mbar_init(&tile_full[s], 1);
        mbar_init(&tile_empty[s], kTileReaders);
      }
    fence_proxy_async_smem();  // the barriers initialised for the TMA unit's transactions too
  }
  __syncthreads();

  // Computed in each role: nothing but the arguments lives across the register reallocation.
  constexpr int n_step = tile_outputs(kGated);
  const auto n_tiles = [&] { return static_cast<int>((a.N + n_step - 1) / n_step); };
  const auto KB = [&] { return static_cast<int>((a.K + kBK - 1) / kBK); };
  if (wg == 0) {
    warpgroup_reg_dealloc<kProducerRegs>();
    if ((warp == 0 && lane == 0) || warp == 1)
      produce<kGated, kUnits>(a, a_map, maps, counter, ring, cum, n_tiles(), n_step, KB(),
                              warp == 0);
  } else {
    warpgroup_reg_alloc<kConsumerRegs>();
    if constexpr (kUnits == 2) {
      if (wg == 1)
        consume_pair<kGated, kSub, 0>(a, gain, ring, cum, n_tiles(), n_step, KB());
      else
        consume_pair<kGated, kSub, 1>(a, gain, ring, cum, n_tiles(), n_step, KB());
    } else if (wg == 1) {
      consume<kGated, kSub, 0>(a, gain, ring, cum, n_tiles(), n_step, KB());
    } else {
      consume<kGated, kSub, 1>(a, gain, ring, cum, n_tiles(), n_step, KB());
    }
  }
}

}  // namespace

cudaError_t launch_moe_fp8_gemm_tc(const MoeFp8GemmArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.N <= 0) return cudaSuccess;
  if (a.experts <= 0 || a.experts > kMoeMaxExperts || a.K % 16 != 0 || a.ldq % 16 != 0 ||
      a.N % 8 != 0 || a.ldy % 8 != 0 || reinterpret_cast<uintptr_t>(a.y) % 16 != 0 ||
      a.tc_workspace == nullptr ||
      reinterpret_cast<uintptr_t>(a.tc_workspace) % scratch::kTmaMapBytes != 0)
    return cudaErrorInvalidValue;
  int dev = 0;
  DeviceFacts f;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = device_facts(dev, &f);
  if (e != cudaSuccess) return e;
  // Upper bound of the tiles (each non-empty expert rounds up once), capped at one CTA per SM.
  const int64_t n_step = tile_outputs(a.gated), tile_rows = row_units(a.gated) * kBM;
  const int64_t tiles =
      ((a.rows + tile_rows - 1) / tile_rows + std::min<int64_t>(a.experts, a.rows)) *
      ((a.N + n_step - 1) / n_step);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, f.sms));
  // The maps: the activations' for this launch, and each expert's weights' from a template at
  // the maps' own (aligned, device) address, retargeted on the device. The workspace holds them,
  // then the counter (scratch::moe_fp8_tc_workspace_bytes).
  // A weight box: gated, one warpgroup's 64 gate (or up) rows; else the tile's weight rows.
  const int n_rows = a.gated ? kBN / 4 : kBN, per = a.gated ? 2 : 1;
  auto* maps = static_cast<TmaMap*>(a.tc_workspace);
  auto* counter = reinterpret_cast<int*>(static_cast<uint8_t*>(a.tc_workspace) +
                                         scratch::moe_fp8_tc_counter_offset(a.experts));
  TmaMap a_map, w_map;
  if (e = encode_tma_2d_u8(&a_map, a.xq, a.K, a.rows, a.ldq, kBK, kBM); e != cudaSuccess) return e;
  if (e = encode_tma_2d_u8(&w_map, maps, a.K, a.N, a.K, kBK, n_rows); e != cudaSuccess) return e;
  const int count = per * a.experts;
  launch(moe_fp8_tc_maps_kernel, (count + kMapWarps - 1) / kMapWarps, kMapWarps * 32, 0, stream,
         a.w1, a.w2, count, per, w_map, maps, counter);
  if (e = cudaGetLastError(); e != cudaSuccess) return e;
  using Kernel = void (*)(MoeFp8GemmArgs, TmaMap, const TmaMap*, int*, float);
  static constexpr Kernel kKernels[2][3] = {
      {moe_fp8_tc_kernel<false, 1>, moe_fp8_tc_kernel<false, 2>, moe_fp8_tc_kernel<false, 4>},
      {moe_fp8_tc_kernel<true, 1>, moe_fp8_tc_kernel<true, 2>, moe_fp8_tc_kernel<true, 4>}};
  const int promote_k = a.promote_k > 0 ? a.promote_k : moe_fp8_tc_promote_k(a.gated);
  const int sub = promote_k == 32 ? 0 : promote_k == 64 ? 1 : promote_k == 128 ? 2 : -1;
  if (sub < 0) return cudaErrorInvalidValue;
  const Kernel kernel = kKernels[a.gated ? 1 : 0][sub];
  if (e = allow_optin_smem(dev, reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
  // Serially (launch_serial says why).
  const int smem_bytes = row_units(a.gated) == 2 ? Shape<2>::kSmemBytes : Shape<1>::kSmemBytes;
  launch_serial(kernel, grid, kThreads, smem_bytes, stream, a, a_map,
                static_cast<const TmaMap*>(maps), counter,
                moe_fp8_tc_promotion_gain(f.fp8_sum_bits, promote_k / 32));
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
