#include <cuda_bf16.h>

#include <algorithm>
#include <limits>

#include "ops/cuda/device_facts.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/moe_fp8_kernels.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/wgmma_ptx.cuh"

namespace mls::ops::cuda::kernels {
namespace {

// ---- Grouped block-FP8 experts on the tensor cores (steps of many rows: prefill) -------------
//
// Each expert's rows (contiguous after ops::moe_align) are cut into 128-row tiles; an output
// tile is 128 rows × 128 weight rows (gated: 64 gate and the same 64 up rows, for 64 SwiGLU
// outputs), K in blocks of 128, the checkpoint's scale block. Tiles are numbered expert by
// expert, within an expert weight tile by weight tile with its row tiles adjacent, so the CTAs
// running side by side share a weight tile (read from DRAM about once) and an expert's rows (in
// L2). A persistent grid of one CTA per SM walks the tiles; every CTA scans the device-side
// offsets once into shared memory, so nothing waits on the host.
//
// A CTA is two warpgroups, each owning 64 of the tile's rows. All 256 threads copy K blocks
// (with the block's activation and weight scales) into a kStages-deep ring of 128-byte-swizzled
// shared tiles with cp.async, zero-filling past the expert's rows, the weight rows and K. Each
// warpgroup runs the block's four wgmma m64n128k32 in sub-steps of kSub into a fresh fp32
// fragment and, while the tensor cores run the next sub-step, adds the previous one to its
// accumulator scaled by the row's activation scale times the block's weight scale (DeepSeek's
// promotion). Two fragments alternate, so the ring refills kStages - 2 blocks ahead (the slot
// of block kb - 1 may still be read by its MMAs). Rows do not depend on each other, but fp32
// sums inside a sub-step come in the tensor core's order: this kernel is not bitwise equal to
// the skinny one.

constexpr int kBM = 128, kBN = 128, kBK = 128;
constexpr int kStages = 5;
constexpr int kThreads = 256;
// K summed inside the tensor cores between promotions (the launcher's default). Hopper's FP8
// MMAs accumulate with fewer bits than fp32: promoting every 128 K, as DeepSeek's recipe does,
// put the grouped experts at 4.9e-3 rel-L2 from the exact emulation (the FP8 tolerance is 4e-3,
// the skinny kernel's mma.sync 1.7e-3), and the error against the skinny kernel halves from 128
// to 32 (bench/fp8_kernels_benchmark, bench/RESULTS.md "Session 11"); every 32 K costs about
// half the throughput at 8,192 tokens (521 -> 268 TFLOP/s for gate·up).
constexpr int kDefaultPromoteK = 32;
constexpr int kTileBytes = kBM * kBK;  // one operand's K block (e4m3)
// Per slot: A and B tiles, then kBM activation scales and the block's (up to) two weight scales.
constexpr int kScaleBytes = (kBM + 4) * 4;
constexpr int kSmemBytes = kStages * (2 * kTileBytes + kScaleBytes) + 1024 /* alignment */;

__device__ __forceinline__ float silu_mul(float g, float u) {
  return g / (1.0f + __expf(-g)) * u;
}

// Tile `tile` of the numbering above: its expert, first row, end of the expert's rows and first
// weight row; false past the last tile. cum[e] = row tiles of the experts before e.
struct Tile {
  int e;
  int64_t r0, r_end, n0;
};
__device__ __forceinline__ bool find_tile(const int* cum, int E, int n_tiles,
                                          const int32_t* offsets, int64_t tile, int64_t n_step,
                                          Tile& t) {
  const int64_t q = tile / n_tiles;  // cum[e] · n_tiles <= tile < cum[e + 1] · n_tiles
  if (q >= cum[E]) return false;
  int lo = 0, hi = E;  // the largest e with cum[e] <= q
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cum[mid] <= q)
      lo = mid;
    else
      hi = mid;
  }
  const int64_t m_tiles = cum[lo + 1] - cum[lo];
  const int64_t local = tile - static_cast<int64_t>(cum[lo]) * n_tiles;
  t.e = lo;
  t.r0 = offsets[lo] + (local % m_tiles) * kBM;
  t.r_end = offsets[lo + 1];
  t.n0 = (local / m_tiles) * n_step;
  return true;
}

// kSub: MMAs (32 K each) accumulated in the tensor cores before each promotion to the fp32
// accumulator.
template <bool kGated, int kSub>
__global__ void __launch_bounds__(kThreads, 1) moe_fp8_tc_kernel(const MoeFp8GemmArgs a) {
  pdl_begin();
  extern __shared__ uint8_t smem_raw[];
  __shared__ int cum[kMoeMaxExperts + 1];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                             ~static_cast<uintptr_t>(1023));
  uint8_t* sa = smem;                         // [kStages][kBM rows][128 bytes]
  uint8_t* sb = smem + kStages * kTileBytes;  // [kStages][kBN rows][128 bytes]
  auto* ss = reinterpret_cast<float*>(smem + 2 * kStages * kTileBytes);  // [kStages][kBM + 4]

  const int E = a.experts;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  if (warp == 0) {
    // Row tiles per expert, prefix-summed: each lane a run of experts, then a warp scan.
    const int per = (E + 31) / 32, e_lo = min(E, lane * per), e_hi = min(E, e_lo + per);
    int sum = 0;
    for (int e = e_lo; e < e_hi; ++e) sum += (a.offsets[e + 1] - a.offsets[e] + kBM - 1) / kBM;
    int incl = sum;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += v;
    }
    int run = incl - sum;
    for (int e = e_lo; e < e_hi; ++e) {
      cum[e] = run;
      run += (a.offsets[e + 1] - a.offsets[e] + kBM - 1) / kBM;
    }
    if (lane == 31) cum[E] = incl;
  }
  __syncthreads();

  constexpr int64_t n_step = kGated ? kBN / 2 : kBN;  // outputs per tile
  const int n_tiles = static_cast<int>((a.N + n_step - 1) / n_step);
  const int64_t KB = (a.K + kBK - 1) / kBK;
  // This thread's accumulator rows within the tile (C fragment rows l/4 and l/4 + 8 of its warp).
  const int frag_row = wg * 64 + (warp & 3) * 16 + (lane >> 2);
  // This thread's copies: chunk tid % 8 of tile rows tid / 8 + 32 i, A for i < 4, B after.
  const int chunk = tid & 7, row_base = tid >> 3;

  for (int64_t tile = blockIdx.x;; tile += gridDim.x) {
    Tile t;
    if (!find_tile(cum, E, n_tiles, a.offsets, tile, n_step, t)) break;
    const auto* w1 = reinterpret_cast<const uint8_t*>(a.w1[t.e]);
    const auto* w2 = kGated ? reinterpret_cast<const uint8_t*>(a.w2[t.e]) : nullptr;
    const float* s1 = reinterpret_cast<const float*>(a.s1[t.e]) + (t.n0 / 128) * a.sw_ld;
    const float* s2 =
        kGated ? reinterpret_cast<const float*>(a.s2[t.e]) + (t.n0 / 128) * a.sw_ld : nullptr;

    // K block kb into ring slot `slot`: 2 × 128 rows × 8 chunks of 16 bytes (8 per thread), the
    // rows' activation scales and the weight scales.
    const auto load = [&](int slot, int64_t kb) {
      uint8_t* da = sa + slot * kTileBytes;
      uint8_t* db = sb + slot * kTileBytes;
      const int64_t k = kb * kBK + chunk * 16;
      const bool k_ok = k < a.K;
#pragma unroll
      for (int i = 0; i < kBM / 32; ++i) {
        const int row = row_base + 32 * i;
        const int64_t r = t.r0 + row;
        const bool ok = k_ok && r < t.r_end;
        cp_async16(da + swizzle128(row, chunk), ok ? a.xq + r * a.ldq + k : a.xq, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < kBN / 32; ++i) {
        const int row = row_base + 32 * i;
        const bool second = kGated && row >= kBN / 2;
        const uint8_t* w = second ? w2 : w1;
        const int64_t n = t.n0 + (second ? row - kBN / 2 : row);
        const bool ok = k_ok && n < a.N;
        cp_async16(db + swizzle128(row, chunk), ok ? w + n * a.K + k : w1, ok ? 16 : 0);
      }
      float* sc = ss + slot * (kBM + 4);
      if (tid < kBM) {
        const int64_t r = t.r0 + tid;
        const float* src = a.x_scale + kb * a.x_scale_ld + r;
        cp_async4(sc + tid, r < t.r_end ? src : a.x_scale, r < t.r_end ? 4 : 0);
      } else if (tid == kBM) {
        cp_async4(sc + kBM, s1 + kb, 4);
      } else if (kGated && tid == kBM + 1) {
        cp_async4(sc + kBM + 1, s2 + kb, 4);
      }
    };

    float acc[64], p0[64], p1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < kStages - 2; ++s) {
      if (s < KB) load(s, s);
      cp_async_commit();
    }
    // Sub-step i: kSub of the kBK / 32 MMAs of K block i / kPer into a fresh fragment.
    constexpr int kPer = kBK / 32 / kSub;
    const int64_t steps = KB * kPer;
    // Adds sub-step i's fragment to the accumulator with its block's scales (from the ring).
    const auto promote = [&](float(&part)[64], int64_t i) {
      const float* sc = ss + static_cast<int>((i / kPer) % kStages) * (kBM + 4);
      const float sx0 = sc[frag_row], sx1 = sc[frag_row + 8];
      const float sw1 = sc[kBM], sw2 = kGated ? sc[kBM + 1] : sw1;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float sw = kGated && j >= 8 ? sw2 : sw1;
        acc[4 * j + 0] += part[4 * j + 0] * (sx0 * sw);
        acc[4 * j + 1] += part[4 * j + 1] * (sx0 * sw);
        acc[4 * j + 2] += part[4 * j + 2] * (sx1 * sw);
        acc[4 * j + 3] += part[4 * j + 3] * (sx1 * sw);
      }
    };
    // Sub-step i into `cur`; the first of a block waits for the block's slot and refills the ring.
    const auto issue = [&](int64_t i, float(&cur)[64]) {
      const int64_t kb = i / kPer;
      const int sub = static_cast<int>(i % kPer);
      if (sub == 0) {
        cp_async_wait<kStages - 3>();
        fence_proxy_async_smem();
        __syncthreads();  // block kb is in its slot; block kb - 2's slot is free
        if (kb + kStages - 2 < KB)
          load(static_cast<int>((kb + kStages - 2) % kStages), kb + kStages - 2);
        cp_async_commit();
      }
      const int slot = static_cast<int>(kb % kStages);
      // +32 bytes of K per MMA: 2 in the descriptors' 16-byte units.
      const uint64_t da = wgmma_desc_sw128(sa + slot * kTileBytes + wg * 64 * kBK) + 2 * kSub * sub;
      const uint64_t db = wgmma_desc_sw128(sb + slot * kTileBytes) + 2 * kSub * sub;
      wgmma_fence_operands(cur);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kSub; ++k) wgmma_e4m3_m64n128k32(cur, da + 2 * k, db + 2 * k, k);
      wgmma_commit();
    };
    // Sub-step i into `cur`, then sub-step i - 1 promoted from `prev` once its MMAs are done.
    const auto step = [&](int64_t i, float(&cur)[64], float(&prev)[64]) {
      issue(i, cur);
      wgmma_wait<1>();
      wgmma_fence_operands(prev);
      promote(prev, i - 1);
    };
    issue(0, p0);
    int64_t i = 1;
    for (; i + 1 < steps; i += 2) {
      step(i, p1, p0);
      step(i + 1, p0, p1);
    }
    if (i < steps) {
      step(i, p1, p0);
      wgmma_wait<0>();
      wgmma_fence_operands(p1);
      promote(p1, i);
    } else {
      wgmma_wait<0>();
      wgmma_fence_operands(p0);
      promote(p0, i - 1);
    }

    auto* y = static_cast<__nv_bfloat16*>(a.y);
    const int64_t row0 = t.r0 + frag_row;
    constexpr int kOutChunks = kGated ? 8 : 16;
#pragma unroll
    for (int j = 0; j < kOutChunks; ++j) {
      const int64_t n = t.n0 + 8 * j + 2 * (lane & 3);
      if (n >= a.N) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = row0 + 8 * h;
        if (r >= t.r_end) continue;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if constexpr (kGated) {
          v0 = silu_mul(v0, acc[4 * (j + 8) + 2 * h]);
          v1 = silu_mul(v1, acc[4 * (j + 8) + 2 * h + 1]);
        }
        *reinterpret_cast<__nv_bfloat162*>(y + r * a.ldy + n) = __floats2bfloat162_rn(v0, v1);
      }
    }
    // The next tile's first loads reuse the ring (and its scales, read by the last promotion).
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_moe_fp8_gemm_tc(const MoeFp8GemmArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.N <= 0) return cudaSuccess;
  if (a.experts <= 0 || a.experts > kMoeMaxExperts || a.K % 16 != 0 || a.N % 2 != 0 ||
      a.ldq % 16 != 0 || a.ldy % 2 != 0)
    return cudaErrorInvalidValue;
  int dev = 0;
  DeviceFacts f;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = device_facts(dev, &f);
  if (e != cudaSuccess) return e;
  // Upper bound of the tiles (each non-empty expert rounds up once), capped at one CTA per SM.
  const int64_t n_step = a.gated ? kBN / 2 : kBN;
  const int64_t tiles = ((a.rows + kBM - 1) / kBM + std::min<int64_t>(a.experts, a.rows)) *
                        ((a.N + n_step - 1) / n_step);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, f.sms));
  using Kernel = void (*)(MoeFp8GemmArgs);
  static constexpr Kernel kKernels[2][3] = {
      {moe_fp8_tc_kernel<false, 1>, moe_fp8_tc_kernel<false, 2>, moe_fp8_tc_kernel<false, 4>},
      {moe_fp8_tc_kernel<true, 1>, moe_fp8_tc_kernel<true, 2>, moe_fp8_tc_kernel<true, 4>}};
  const int promote_k = a.promote_k > 0 ? a.promote_k : kDefaultPromoteK;
  const int sub = promote_k == 32 ? 0 : promote_k == 64 ? 1 : promote_k == 128 ? 2 : -1;
  if (sub < 0) return cudaErrorInvalidValue;
  const Kernel kernel = kKernels[a.gated ? 1 : 0][sub];
  if (e = allow_optin_smem(dev, reinterpret_cast<const void*>(kernel)); e != cudaSuccess) return e;
  launch(kernel, grid, kThreads, kSmemBytes, stream, a);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
