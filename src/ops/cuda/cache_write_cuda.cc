#include "core/cuda_context.h"
#include "ops/cache_write.h"
#include "ops/cuda/cache_write_kernels.h"
#include "ops/cuda/rope_freqs.h"

namespace mls::ops::cuda {
namespace {

kernels::CacheWrite params(const char* op, const Tensor& x, int64_t n, const Tensor& norm_w,
                           float eps, const Tensor& positions, const Tensor& slots,
                           const RopeTable& table, RopeStyle style, Tensor& cache) {
  kernels::CacheWrite p;
  p.norm.rows = x.dim(0);
  p.norm.n = n;
  p.norm.x = x.raw();
  p.norm.x_stride = x.stride(0);
  p.norm.x_dtype = x.dtype();
  p.norm.y_dtype = x.dtype();
  p.norm.w = static_cast<const float*>(norm_w.raw());
  p.norm.eps = eps;
  p.positions = static_cast<const int32_t*>(positions.raw());
  p.slots = static_cast<const int32_t*>(slots.raw());
  p.cache = cache.raw();
  p.cache_stride = cache.stride(0);
  p.freqs = rope_freqs(table, op);
  p.interleaved = style == RopeStyle::kInterleaved;
  return p;
}

}  // namespace

void latent_cache_write(const Tensor& kv, const Tensor& norm_w, float eps, const Tensor& positions,
                        const Tensor& slots, const RopeTable& table, RopeStyle style,
                        Tensor& cache) {
  const kernels::CacheWrite p = params("latent_cache_write", kv, norm_w.numel(), norm_w, eps,
                                       positions, slots, table, style, cache);
  mls::cuda::check(kernels::launch_latent_cache_write(p, mls::cuda::stream()),
                   "latent_cache_write");
}

void indexer_key_write(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b, float eps,
                       const Tensor& positions, const Tensor& slots, const RopeTable& table,
                       RopeStyle style, Tensor& cache, Tensor* key) {
  kernels::CacheWrite p =
      params("indexer_key_write", x, x.dim(1), norm_w, eps, positions, slots, table, style, cache);
  p.norm.b = static_cast<const float*>(norm_b.raw());
  if (key) {
    p.norm.y = key->raw();
    p.norm.y_stride = key->stride(0);
  }
  mls::cuda::check(kernels::launch_indexer_key_write(p, mls::cuda::stream()), "indexer_key_write");
}

}  // namespace mls::ops::cuda
