#include <algorithm>
#include <vector>

#include "core/thread_pool.h"
#include "ops/cache_write.h"
#include "ops/cpu/norm_row.h"
#include "ops/cpu/rope_row.h"

namespace mls::ops::cpu {
namespace {

// scatter_rows' range check, made before any row is written.
void check_slots(const char* op, const Tensor& slots, const Tensor& cache) {
  for (int64_t t = 0; t < slots.numel(); ++t) {
    const int32_t r = slots.data<int32_t>()[t];
    if (r >= cache.dim(0)) raise<ShapeError>("{}: row {} outside cache {}", op, r, cache.str());
  }
}

float* cache_row(Tensor& cache, const Tensor& slots, int64_t t) {
  const int32_t r = slots.data<int32_t>()[t];
  return r < 0 ? nullptr : cache.data<float>() + r * cache.stride(0);
}

}  // namespace

void latent_cache_write(const Tensor& kv, const Tensor& norm_w, float eps, const Tensor& positions,
                        const Tensor& slots, const RopeTable& table, RopeStyle style,
                        Tensor& cache) {
  check_slots("latent_cache_write", slots, cache);
  const int64_t r = norm_w.numel();
  const int half = table.dim() / 2;
  ThreadPool::global().parallel_for(kv.dim(0), 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> c(half), s(half);
    for (int64_t t = lo; t < hi; ++t) {
      float* row = cache_row(cache, slots, t);
      if (!row) continue;
      const float* x = kv.data<float>() + t * kv.stride(0);
      rms_norm_row(x, norm_w.data<float>(), r, eps, row);
      rope_cos_sin(table, positions.data<int32_t>()[t], c.data(), s.data());
      rope_rotate(x + r, row + r, half, c.data(), s.data(), style == RopeStyle::kInterleaved);
    }
  });
}

void indexer_key_write(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b, float eps,
                       const Tensor& positions, const Tensor& slots, const RopeTable& table,
                       RopeStyle style, Tensor& cache, Tensor* key) {
  check_slots("indexer_key_write", slots, cache);
  const int64_t n = x.dim(1);
  const int half = table.dim() / 2;
  ThreadPool::global().parallel_for(x.dim(0), 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> c(half), s(half), rotated(2 * half);
    for (int64_t t = lo; t < hi; ++t) {
      float* cached = cache_row(cache, slots, t);
      float* dense = key ? key->data<float>() + t * key->stride(0) : nullptr;
      float* row = dense ? dense : cached;
      if (!row) continue;
      layer_norm_row(x.data<float>() + t * x.stride(0), norm_w.data<float>(), norm_b.data<float>(),
                     n, eps, row);
      rope_cos_sin(table, positions.data<int32_t>()[t], c.data(), s.data());
      rope_rotate(row, rotated.data(), half, c.data(), s.data(), style == RopeStyle::kInterleaved);
      std::copy(rotated.begin(), rotated.end(), row);
      if (dense && cached) std::copy(dense, dense + n, cached);
    }
  });
}

}  // namespace mls::ops::cpu
