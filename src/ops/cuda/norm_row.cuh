// The device code of one row's normalisation (RMSNorm, LayerNorm, add + RMSNorm) and the one
// choice of how rows are cut into threads, shared by the norm kernels (norm_kernels.cu) and the
// fused cache writes (cache_write_kernels.cu): a row normalised by either is reduced in the same
// order, so both give the same bits.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/fp8_act_rows.cuh"
#include "ops/cuda/norm_kernels.h"
#include "ops/cuda/vec_io.cuh"

namespace mls::ops::cuda::kernels::norm_row {

using bf16 = __nv_bfloat16;

enum class Mode { kRms, kLayer, kAddRms };

__device__ inline float to_f(float v) {
  return v;
}
__device__ inline float to_f(bf16 v) {
  return __bfloat162float(v);
}
template <class T>
__device__ inline T from_f(float v);
template <>
__device__ inline float from_f<float>(float v) {
  return v;
}
template <>
__device__ inline bf16 from_f<bf16>(float v) {
  return __float2bfloat16_rn(v);
}
// The value as T holds it.
template <class T>
__device__ inline float round_to(float v) {
  return to_f(from_f<T>(v));
}

// Eight consecutive values as raw 16-byte words (one for bf16, two for f32; the caller
// guarantees 16-byte alignment). Loading raw and converting later lets every pack's load be in
// flight at once: a conversion right after its load would wait for it.
template <class T>
struct Pack8 {
  uint4 w[sizeof(T) / 2];
};
template <class T>
__device__ inline Pack8<T> load8(const T* p) {
  Pack8<T> r;
#pragma unroll
  for (unsigned i = 0; i < sizeof(T) / 2; ++i) r.w[i] = reinterpret_cast<const uint4*>(p)[i];
  return r;
}
__device__ inline void unpack(const Pack8<bf16>& r, float* v) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(r.w);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}
__device__ inline void unpack(const Pack8<float>& r, float* v) {
  const float* f = reinterpret_cast<const float*>(r.w);
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = f[e];
}

// The xor butterfly leaves every lane with the same bits (each step adds the same two values).
__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the threads that share a row: one warp, or the whole block through shared memory
// (every thread adds the warp partials in the same order, so all get the same value).
template <bool kWarp>
__device__ inline float row_sum(float v, float* smem) {
  v = warp_sum(v);
  if constexpr (kWarp) {
    return v;
  } else {
    if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0;
    for (unsigned i = 0; i < blockDim.x / 32; ++i) s += smem[i];
    __syncthreads();  // smem is reused by the next reduction
    return s;
  }
}

// The threads of the row's warp (kWarp) or block.
template <bool kWarp>
__device__ inline void row_sync() {
  if constexpr (kWarp)
    __syncwarp();
  else
    __syncthreads();
}

// With p.q: token t's pack j of 8 outputs (as stored in y) quantised for the FP8 linears. The 16
// packs of a 128-group are on the 16 lanes of one half-warp (consecutive packs on consecutive
// lanes, n % 128 == 0), which take the group's amax together.
__device__ inline void quantize_pack(const NormRows& p, int64_t t, int j, const float* stored) {
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(stored[e]));
  const unsigned half = 0xffffu << (threadIdx.x & 16);
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(half, amax, off));
  const float scale = fp8_act::group_scale(amax);
  *reinterpret_cast<uint64_t*>(p.q + t * p.ldq + 8 * j) = fp8_act::pack<8>(stored, scale);
  if (j % 16 == 0) {
    float* s = reinterpret_cast<float*>(p.q + p.rows * p.ldq);
    s[fp8_act::scale_index(t, j / 16, p.rows, p.n / 128, p.q_lead)] = scale;
  }
}

// The common path: 16-byte aligned rows with n % 8 == 0, held in registers (P packs of 8 per
// thread) so that x and delta are read once and x and y written once. A row is one warp's
// (kWarp, short rows, several rows per block) or one block's. x, d, y: the row's start (token t);
// p gives n, w, b and eps (and q). smem: 32 floats.
template <Mode M, class TX, class TD, class TY, bool kWarp, int P>
__device__ inline void cached(const NormRows& p, int64_t t, TX* x, const TD* d, TY* y,
                              float* smem) {
  const int lane = kWarp ? threadIdx.x % 32 : threadIdx.x;
  const int group = kWarp ? 32 : blockDim.x;
  const int packs = static_cast<int>(p.n / 8);  // at most 2048 on this path

  Pack8<TX> rx[P];
  Pack8<TD> rd[M == Mode::kAddRms ? P : 1];
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int j = lane + k * group;
    if (j >= packs) continue;
    rx[k] = load8(x + 8 * j);
    if constexpr (M == Mode::kAddRms) rd[k] = load8(d + 8 * j);
  }
  float v[P][8];
  float s = 0;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int j = lane + k * group;
    if (j >= packs) continue;
    unpack(rx[k], v[k]);
    if constexpr (M == Mode::kAddRms) {
      float dv[8];
      unpack(rd[k], dv);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[k][e] = round_to<TX>(v[k][e] + dv[e]);
      store8(x + 8 * j, v[k]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) s += M == Mode::kLayer ? v[k][e] : v[k][e] * v[k][e];
  }
  s = row_sum<kWarp>(s, smem);
  const float inv_n = 1.0f / static_cast<float>(p.n);
  float mean = 0, inv;
  if constexpr (M == Mode::kLayer) {
    // Variance from the centred values (two passes over registers), as the CPU computes it.
    mean = s * inv_n;
    float var = 0;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      if (lane + k * group >= packs) continue;
#pragma unroll
      for (int e = 0; e < 8; ++e) var += (v[k][e] - mean) * (v[k][e] - mean);
    }
    var = row_sum<kWarp>(var, smem);
    inv = 1.0f / sqrtf(var * inv_n + p.eps);
  } else {
    inv = 1.0f / sqrtf(s * inv_n + p.eps);
  }
  // w (and b), hot in L1, are loaded where used: holding them all costs registers, and
  // measured slower on [8192, 6144].
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const int j = lane + k * group;
    if (j >= packs) continue;
    float w[8], out[8];
    unpack(load8(p.w + 8 * j), w);
    if constexpr (M == Mode::kLayer) {
      float b[8];
      unpack(load8(p.b + 8 * j), b);
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = (v[k][e] - mean) * inv * w[e] + b[e];
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) out[e] = w[e] * (v[k][e] * inv);
    }
    store8(y + 8 * j, out);
    if constexpr (M != Mode::kLayer && std::is_same_v<TY, bf16>) {
      if (p.q) {
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = round_to<TY>(out[e]);
        quantize_pack(p, t, j, out);
      }
    }
  }
}

// Any row length and alignment: one block per row, scalar accesses, x re-read for each pass
// (the row is hot in L1/L2). Each element is touched by the same thread in every pass, so
// aliasing y with x or delta is safe.
template <Mode M, class TX, class TD, class TY>
__device__ inline void generic(const NormRows& p, TX* x, const TD* d, TY* y, float* smem) {
  float s = 0;
  for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) {
    float v = to_f(x[i]);
    if constexpr (M == Mode::kAddRms) {
      v = round_to<TX>(v + to_f(d[i]));
      x[i] = from_f<TX>(v);
    }
    s += M == Mode::kLayer ? v : v * v;
  }
  s = row_sum<false>(s, smem);
  const float inv_n = 1.0f / static_cast<float>(p.n);
  float mean = 0, inv;
  if constexpr (M == Mode::kLayer) {
    mean = s * inv_n;
    float var = 0;
    for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) {
      const float c = to_f(x[i]) - mean;
      var += c * c;
    }
    var = row_sum<false>(var, smem);
    inv = 1.0f / sqrtf(var * inv_n + p.eps);
  } else {
    inv = 1.0f / sqrtf(s * inv_n + p.eps);
  }
  for (int64_t i = threadIdx.x; i < p.n; i += blockDim.x) {
    const float v = to_f(x[i]);
    y[i] = from_f<TY>(M == Mode::kLayer ? (v - mean) * inv * p.w[i] + p.b[i] : p.w[i] * (v * inv));
  }
}

inline bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}
// Rows starting at ptr, `stride` elements apart, that the cached path can read or write.
inline bool vec_rows(const void* ptr, int64_t stride) {
  return aligned16(ptr) && stride % 8 == 0;
}

// How rows of n values are cut into threads: with vec (n % 8 == 0 and every row operand
// vec_rows), a warp per row (4 per block) up to 1024 values, a block per row up to 16384, both
// holding the row in registers; else a block of 256 threads per row (generic).
struct Cut {
  enum class Kind { kWarp, kBlock, kGeneric };
  Kind kind = Kind::kGeneric;
  int per_thread = 0;  // P: packs of 8 per thread
  int threads = 256;   // per block
  int rows_per_block = 1;

  static Cut of(int64_t n, bool vec) {
    const int64_t packs = n / 8;
    Cut c;
    if (vec && packs <= 4 * 32) {
      c.kind = Kind::kWarp;
      c.rows_per_block = 4;
      c.threads = 32 * c.rows_per_block;
      c.per_thread = packs <= 32 ? 1 : (packs <= 64 ? 2 : 4);
    } else if (vec && packs <= 4 * 512) {
      // Up to 256 threads with as few packs each as that allows (n = 6144: 256 threads of 3
      // packs), more threads beyond 8192 values: several CTAs per SM keep enough loads in flight.
      c.kind = Kind::kBlock;
      c.per_thread = static_cast<int>(std::min<int64_t>((packs + 255) / 256, 4));
      c.threads = static_cast<int>((packs + 32 * c.per_thread - 1) / (32 * c.per_thread)) * 32;
    }
    return c;
  }
  unsigned grid(int64_t rows) const {
    return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  }
};

// A cut's kernel variant as types: kWarp, P (0: generic).
template <bool kWarpV, int PV>
struct CutVariant {
  static constexpr bool kWarp = kWarpV;
  static constexpr int P = PV;
  static constexpr bool kGeneric = PV == 0;
};

// Calls f(CutVariant<...>{}) for the cut's variant (one instantiation per variant a cut can be).
template <class F>
void with_variant(const Cut& c, F&& f) {
  switch (c.kind) {
    case Cut::Kind::kWarp:
      if (c.per_thread == 1) return f(CutVariant<true, 1>{});
      if (c.per_thread == 2) return f(CutVariant<true, 2>{});
      return f(CutVariant<true, 4>{});
    case Cut::Kind::kBlock:
      if (c.per_thread == 1) return f(CutVariant<false, 1>{});
      if (c.per_thread == 2) return f(CutVariant<false, 2>{});
      if (c.per_thread == 3) return f(CutVariant<false, 3>{});
      return f(CutVariant<false, 4>{});
    case Cut::Kind::kGeneric:
      return f(CutVariant<false, 0>{});
  }
}

// The row a thread works on under variant V, and its index among the row's threads.
template <class V>
__device__ inline int64_t row_index() {
  return V::kWarp ? static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32
                  : static_cast<int64_t>(blockIdx.x);
}
template <class V>
__device__ inline int row_lane() {
  return V::kWarp ? threadIdx.x % 32 : threadIdx.x;
}
template <class V>
__device__ inline int row_threads() {
  return V::kWarp ? 32 : blockDim.x;
}

// Normalises token t's row at x (with d) into y under variant V (quantising it where
// norm_quantizes).
template <Mode M, class TX, class TD, class TY, class V>
__device__ inline void normalise(const NormRows& p, int64_t t, TX* x, const TD* d, TY* y,
                                 float* smem) {
  if constexpr (V::kGeneric)
    generic<M, TX, TD, TY>(p, x, d, y, smem);
  else
    cached<M, TX, TD, TY, V::kWarp, V::P>(p, t, x, d, y, smem);
}

}  // namespace mls::ops::cuda::kernels::norm_row
