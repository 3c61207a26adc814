// Fused cache writes: a step's new cache rows normalised, rotated and stored by one op (one kernel
// on the GPU) instead of a norm, a copy, a rotation and a row scatter. Each equals its composition
// of ops::rms_norm or layer_norm, apply_rope and scatter_rows: bitwise on the CPU, and bitwise
// against the CUDA ops on the GPU (the same row reductions and rotation, norm_row.cuh and
// rope_row.cuh).
#pragma once

#include "ops/dispatch.h"
#include "ops/rope.h"

namespace mls::ops {

namespace cpu {
void latent_cache_write(const Tensor& kv, const Tensor& norm_w, float eps, const Tensor& positions,
                        const Tensor& slots, const RopeTable& table, RopeStyle style,
                        Tensor& cache);
void indexer_key_write(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b, float eps,
                       const Tensor& positions, const Tensor& slots, const RopeTable& table,
                       RopeStyle style, Tensor& cache, Tensor* key);
}  // namespace cpu
namespace cuda {
void latent_cache_write(const Tensor& kv, const Tensor& norm_w, float eps, const Tensor& positions,
                        const Tensor& slots, const RopeTable& table, RopeStyle style,
                        Tensor& cache);
void indexer_key_write(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b, float eps,
                       const Tensor& positions, const Tensor& slots, const RopeTable& table,
                       RopeStyle style, Tensor& cache, Tensor* key);
}  // namespace cuda

// What both take: per token of x (2-d, unit inner stride, rows may be strided) a position and a
// cache slot (contiguous i32 [T]); cache rows as wide as x's, of x's dtype, apart from x.
inline void cache_write_contract(const Contract& c, const char* x_name, const Tensor& x,
                                 const Tensor& positions, const Tensor& slots,
                                 const Tensor& cache) {
  c.rows("cache", cache, 2);
  c.need(cache.dim(1) == x.dim(1) && cache.dtype() == x.dtype(), "cache", cache,
         "{} rows {} wide like {}", dtype_name(x.dtype()), x.dim(1), x_name);
  c.index("positions", positions, x.dim(0));
  c.index("slots", slots, x.dim(0));
  c.activation(x_name, x);
  c.on_device(x_name, x);
  c.disjoint("cache", cache, x_name, x);
}
// A normalisation's weight or bias: contiguous f32 [n].
inline void norm_param_contract(const Contract& c, const char* name, const Tensor& t, int64_t n) {
  c.need(t.ndim() == 1 && t.numel() == n && t.is_contiguous(), name, t,
         "contiguous with {} elements", n);
  c.dtype(name, t, {DType::kF32});
  c.on_device(name, t);
}

// kv [T, r + d]: d the table's even rotary dim, r norm_w's length (contiguous f32).
inline void latent_cache_write_contract(const Tensor& kv, const Tensor& norm_w, float,
                                        const Tensor& positions, const Tensor& slots,
                                        const RopeTable& table, RopeStyle, const Tensor& cache) {
  const Contract c("latent_cache_write", cache);
  c.rows("kv", kv, 2);
  const int d = table.dim();
  const int64_t r = kv.dim(1) - d;
  c.need(d % 2 == 0 && r >= 0, "kv", kv, "[T, r + d] with the even rotary dim d = {} last", d);
  norm_param_contract(c, "norm_w", norm_w, r);
  cache_write_contract(c, "kv", kv, positions, slots, cache);
}

// x [T, n] with n at least the table's even rotary dim; norm_w, norm_b contiguous f32 [n]; key,
// when given, [T, n] of x's dtype with unit inner stride, apart from x and the cache.
inline void indexer_key_write_contract(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b,
                                       float, const Tensor& positions, const Tensor& slots,
                                       const RopeTable& table, RopeStyle, const Tensor& cache,
                                       const Tensor* key) {
  const Contract c("indexer_key_write", cache);
  c.rows("x", x, 2);
  const int d = table.dim();
  c.need(d % 2 == 0 && d <= x.dim(1), "x", x, "[T, n] holding the even rotary dim {}", d);
  norm_param_contract(c, "norm_w", norm_w, x.dim(1));
  norm_param_contract(c, "norm_b", norm_b, x.dim(1));
  cache_write_contract(c, "x", x, positions, slots, cache);
  if (!key) return;
  c.rows("key", *key, 2);
  c.need(key->shape() == x.shape() && key->dtype() == x.dtype(), "key", *key, "{} {} like x",
         dtype_name(x.dtype()), x.shape().str());
  c.on_device("key", *key);
  c.disjoint("key", *key, "x", x);
  c.disjoint("key", *key, "cache", cache);
}

// cache[slots[t]] = [rms_norm(kv[t, :r]) · norm_w, rope(kv[t, r:])] for slots[t] >= 0 (negative
// slots are skipped, as scatter_rows skips them): the MLA latent row [c, k_rot] of each token.
// kv is the fused-A projection's [c | k_rot] columns; interleaved k_rot pairs are written
// half-split, as apply_rope writes them.
inline void latent_cache_write(const Tensor& kv, const Tensor& norm_w, float eps,
                               const Tensor& positions, const Tensor& slots, const RopeTable& table,
                               RopeStyle style, Tensor& cache) {
  MLS_DISPATCH(cache, latent_cache_write, kv, norm_w, eps, positions, slots, table, style, cache);
}

// The DSA indexer's key: k = layer_norm(x[t]) with its first table.dim() values rotated
// (apply_rope at offset 0 of the normalised values as stored), written to cache[slots[t]] for
// slots[t] >= 0 and, when `key` is given, to key[t] for every t (the dense keys an observer reads).
inline void indexer_key_write(const Tensor& x, const Tensor& norm_w, const Tensor& norm_b,
                              float eps, const Tensor& positions, const Tensor& slots,
                              const RopeTable& table, RopeStyle style, Tensor& cache,
                              Tensor* key = nullptr) {
  MLS_DISPATCH(cache, indexer_key_write, x, norm_w, norm_b, eps, positions, slots, table, style,
               cache, key);
}

}  // namespace mls::ops
