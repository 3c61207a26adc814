#include <cuda_bf16.h>

#include "ops/cuda/cache_write_kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/norm_row.cuh"
#include "ops/cuda/rope_row.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;
using norm_row::from_f;
using norm_row::Mode;
using norm_row::to_f;

// Pairs per thread at most: a row has 32 threads or more, and at most kMaxRopeHalf pairs.
constexpr int kSlots = kMaxRopeHalf / 32;

template <class T>
__device__ inline T* cache_row(const CacheWrite& p, int32_t slot) {
  return slot < 0 ? nullptr
                  : static_cast<T*>(p.cache) + static_cast<int64_t>(slot) * p.cache_stride;
}

// One token per warp or block, as norm_kernels.cu cuts these rows (norm_row.cuh): the normalised
// c goes straight to the cache row, then the row's threads rotate k_rot from x into the row's last
// 2·half values (interleaved input pairs written half-split, as apply_rope does).
template <class T, class V>
__global__ void __launch_bounds__(V::kGeneric ? 256 : 512) latent_kernel(CacheWrite p) {
  pdl_begin();
  __shared__ float smem[32];
  const int64_t t = norm_row::row_index<V>();
  if (t >= p.norm.rows) return;  // a whole warp (or block) at once
  T* row = cache_row<T>(p, p.slots[t]);
  if (!row) return;  // likewise
  T* x = static_cast<T*>(p.norm.x) + t * p.norm.x_stride;
  norm_row::normalise<Mode::kRms, T, T, T, V>(p.norm, t, x, nullptr, row, smem);
  const int half = p.freqs.half;
  const int32_t pos = p.positions[t];
  const T* k = x + p.norm.n;
  T* out = row + p.norm.n;
  for (int i = norm_row::row_lane<V>(); i < half; i += norm_row::row_threads<V>()) {
    const float a = to_f(p.interleaved ? k[2 * i] : k[i]);
    const float b = to_f(p.interleaved ? k[2 * i + 1] : k[i + half]);
    const float2 r =
        rope_row::rotate(a, b, rope_row::cos_sin(pos, p.freqs.inv_freq[i], p.freqs.scaling));
    out[i] = from_f<T>(r.x);
    out[i + half] = from_f<T>(r.y);
  }
}

// One token per warp or block: layer_norm into the token's dense row if there is one, else into
// its cache row; the row's threads then rotate its first 2·half values in place from the values
// as stored (as apply_rope reads the normalised key), every pair read before any is written, and
// with both rows complete the cache row from the dense one.
template <class T, class V>
__global__ void __launch_bounds__(V::kGeneric ? 256 : 512) indexer_kernel(CacheWrite p) {
  pdl_begin();
  __shared__ float smem[32];
  const int64_t t = norm_row::row_index<V>();
  if (t >= p.norm.rows) return;  // a whole warp (or block) at once
  T* cached = cache_row<T>(p, p.slots[t]);
  T* dense = p.norm.y ? static_cast<T*>(p.norm.y) + t * p.norm.y_stride : nullptr;
  T* row = dense ? dense : cached;
  if (!row) return;  // likewise
  T* x = static_cast<T*>(p.norm.x) + t * p.norm.x_stride;
  norm_row::normalise<Mode::kLayer, T, T, T, V>(p.norm, t, x, nullptr, row, smem);
  norm_row::row_sync<V::kWarp>();

  const int lane = norm_row::row_lane<V>(), threads = norm_row::row_threads<V>();
  const int half = p.freqs.half;
  T a[kSlots], b[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int i = lane + k * threads;
    if (i >= half) continue;
    a[k] = p.interleaved ? row[2 * i] : row[i];
    b[k] = p.interleaved ? row[2 * i + 1] : row[i + half];
  }
  norm_row::row_sync<V::kWarp>();
  T* also = dense && cached ? cached : nullptr;
  const int32_t pos = p.positions[t];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int i = lane + k * threads;
    if (i >= half) continue;
    const float2 r = rope_row::rotate(to_f(a[k]), to_f(b[k]),
                                      rope_row::cos_sin(pos, p.freqs.inv_freq[i], p.freqs.scaling));
    const T lo = from_f<T>(r.x), hi = from_f<T>(r.y);
    row[i] = lo;
    row[i + half] = hi;
    if (also) {
      also[i] = lo;
      also[i + half] = hi;
    }
  }
  if (also)
    for (int64_t j = 2 * half + lane; j < p.norm.n; j += threads) also[j] = row[j];
}

template <class T>
cudaError_t launch_typed(const CacheWrite& p, bool latent, cudaStream_t stream) {
  // The cut norm_kernels.cu would take for these rows, written where this kernel writes them.
  const NormRows& n = p.norm;
  const bool vec = n.n % 8 == 0 && norm_row::vec_rows(n.x, n.x_stride) &&
                   norm_row::vec_rows(p.cache, p.cache_stride) &&
                   (!n.y || norm_row::vec_rows(n.y, n.y_stride)) && norm_row::aligned16(n.w) &&
                   (latent || norm_row::aligned16(n.b));
  const norm_row::Cut cut = norm_row::Cut::of(n.n, vec);
  norm_row::with_variant(cut, [&](auto v) {
    if (latent)
      launch(latent_kernel<T, decltype(v)>, cut.grid(n.rows), cut.threads, 0, stream, p);
    else
      launch(indexer_kernel<T, decltype(v)>, cut.grid(n.rows), cut.threads, 0, stream, p);
  });
  return cudaGetLastError();
}

cudaError_t dispatch(const CacheWrite& p, bool latent, cudaStream_t stream) {
  if ((p.norm.x_dtype != DType::kBF16 && p.norm.x_dtype != DType::kF32) ||
      p.freqs.half > kMaxRopeHalf)
    return cudaErrorInvalidValue;
  if (p.norm.rows == 0) return cudaSuccess;
  return p.norm.x_dtype == DType::kF32 ? launch_typed<float>(p, latent, stream)
                                       : launch_typed<bf16>(p, latent, stream);
}

}  // namespace

cudaError_t launch_latent_cache_write(const CacheWrite& p, cudaStream_t stream) {
  return dispatch(p, true, stream);
}
cudaError_t launch_indexer_key_write(const CacheWrite& p, cudaStream_t stream) {
  return dispatch(p, false, stream);
}

}  // namespace mls::ops::cuda::kernels
