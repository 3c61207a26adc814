#include <cuda_bf16.h>

#include <algorithm>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/norm_kernels.h"
#include "ops/cuda/vec_io.cuh"

namespace mls::ops::cuda::kernels {
namespace {

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

// The common path: 16-byte aligned rows with n % 8 == 0, held in registers (P packs of 8 per
// thread) so that x and delta are read once and x and y written once. A row is one warp's
// (kWarp, short rows, several rows per block) or one block's.
template <Mode M, class TX, class TD, class TY, bool kWarp, int P>
__global__ void __launch_bounds__(512) norm_cached(NormRows p) {
  pdl_begin();
  __shared__ float smem[32];
  const int64_t row = kWarp
                          ? static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32
                          : static_cast<int64_t>(blockIdx.x);
  if (row >= p.rows) return;  // a whole warp (or block) at once
  const int lane = kWarp ? threadIdx.x % 32 : threadIdx.x;
  const int group = kWarp ? 32 : blockDim.x;
  const int packs = static_cast<int>(p.n / 8);  // at most 2048 on this path
  TX* x = static_cast<TX*>(p.x) + row * p.x_stride;
  const TD* d = static_cast<const TD*>(p.delta) + row * p.delta_stride;
  TY* y = static_cast<TY*>(p.y) + row * p.y_stride;

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
  }
}

// Any row length and alignment: one block per row, scalar accesses, x re-read for each pass
// (the row is hot in L1/L2). Each element is touched by the same thread in every pass, so
// aliasing y with x or delta is safe.
template <Mode M, class TX, class TD, class TY>
__global__ void __launch_bounds__(256) norm_generic(NormRows p) {
  pdl_begin();
  __shared__ float smem[32];
  const int64_t row = blockIdx.x;
  TX* x = static_cast<TX*>(p.x) + row * p.x_stride;
  const TD* d = static_cast<const TD*>(p.delta) + row * p.delta_stride;
  TY* y = static_cast<TY*>(p.y) + row * p.y_stride;
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

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

template <Mode M, class TX, class TD, class TY>
cudaError_t launch_typed(const NormRows& p, cudaStream_t stream) {
  const bool vec = p.n % 8 == 0 && aligned16(p.x) && p.x_stride % 8 == 0 && aligned16(p.y) &&
                   p.y_stride % 8 == 0 && aligned16(p.w) && (M != Mode::kLayer || aligned16(p.b)) &&
                   (M != Mode::kAddRms || (aligned16(p.delta) && p.delta_stride % 8 == 0));
  const int64_t packs = p.n / 8;
  if (vec && packs <= 4 * 32) {
    constexpr int kWarps = 4;
    const unsigned grid = static_cast<unsigned>((p.rows + kWarps - 1) / kWarps);
    if (packs <= 32)
      launch(norm_cached<M, TX, TD, TY, true, 1>, grid, 32 * kWarps, 0, stream, p);
    else if (packs <= 64)
      launch(norm_cached<M, TX, TD, TY, true, 2>, grid, 32 * kWarps, 0, stream, p);
    else
      launch(norm_cached<M, TX, TD, TY, true, 4>, grid, 32 * kWarps, 0, stream, p);
  } else if (vec && packs <= 4 * 512) {
    // Up to 256 threads with as few packs each as that allows (n = 6144: 256 threads of 3
    // packs), more threads beyond 8192 values: several CTAs per SM keep enough loads in flight.
    const int64_t per_thread = std::min<int64_t>((packs + 255) / 256, 4);
    const int threads = static_cast<int>((packs + 32 * per_thread - 1) / (32 * per_thread)) * 32;
    const unsigned grid = static_cast<unsigned>(p.rows);
    if (per_thread == 1)
      launch(norm_cached<M, TX, TD, TY, false, 1>, grid, threads, 0, stream, p);
    else if (per_thread == 2)
      launch(norm_cached<M, TX, TD, TY, false, 2>, grid, threads, 0, stream, p);
    else if (per_thread == 3)
      launch(norm_cached<M, TX, TD, TY, false, 3>, grid, threads, 0, stream, p);
    else
      launch(norm_cached<M, TX, TD, TY, false, 4>, grid, threads, 0, stream, p);
  } else {
    launch(norm_generic<M, TX, TD, TY>, static_cast<unsigned>(p.rows), 256, 0, stream, p);
  }
  return cudaGetLastError();
}

bool float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16;
}

template <Mode M, class TX, class TD>
cudaError_t with_y(const NormRows& p, cudaStream_t stream) {
  return p.y_dtype == DType::kF32 ? launch_typed<M, TX, TD, float>(p, stream)
                                  : launch_typed<M, TX, TD, bf16>(p, stream);
}

template <Mode M, class TX>
cudaError_t with_delta(const NormRows& p, cudaStream_t stream) {
  if constexpr (M != Mode::kAddRms)
    return with_y<M, TX, TX>(p, stream);
  else
    return p.delta_dtype == DType::kF32 ? with_y<M, TX, float>(p, stream)
                                        : with_y<M, TX, bf16>(p, stream);
}

template <Mode M>
cudaError_t dispatch(const NormRows& p, cudaStream_t stream) {
  if (!float_dtype(p.x_dtype) || !float_dtype(p.y_dtype) ||
      (M == Mode::kAddRms && !float_dtype(p.delta_dtype)))
    return cudaErrorInvalidValue;
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  return p.x_dtype == DType::kF32 ? with_delta<M, float>(p, stream)
                                  : with_delta<M, bf16>(p, stream);
}

}  // namespace

cudaError_t launch_rms_norm(const NormRows& p, cudaStream_t stream) {
  return dispatch<Mode::kRms>(p, stream);
}
cudaError_t launch_layer_norm(const NormRows& p, cudaStream_t stream) {
  return dispatch<Mode::kLayer>(p, stream);
}
cudaError_t launch_add_rms_norm(const NormRows& p, cudaStream_t stream) {
  return dispatch<Mode::kAddRms>(p, stream);
}

}  // namespace mls::ops::cuda::kernels
