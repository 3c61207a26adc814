// Small elementwise ops on [T, N] activations (rows may be strided).
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

// Deterministic pseudo-random values for dummy weights: element (r, c) of a [R, C] tensor gets
// u = splitmix64(seed + ((row0 + r) · full_cols + col0 + c) · φ64) mapped to [-1, 1), then
// offset + bound · u. Indexing by the full tensor makes every TP shard see the same values.
struct UniformFill {
  uint64_t seed = 0;
  float bound = 1.0f, offset = 0.0f;
  int64_t row0 = 0, col0 = 0, full_cols = 1;
};

namespace cpu {
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out);
void scale(const Tensor& a, float alpha, Tensor& out);
void fill_uniform(Tensor& out, const UniformFill& f);
}  // namespace cpu
namespace cuda {
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out);
void scale(const Tensor& a, float alpha, Tensor& out);
void fill_uniform(Tensor& out, const UniformFill& f);
}  // namespace cuda

// out = silu(gate) * up.
inline void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  MLS_DISPATCH(out, silu_mul, gate, up, out);
}
// out = a + b (out may alias a).
inline void add(const Tensor& a, const Tensor& b, Tensor& out) {
  MLS_DISPATCH(out, add, a, b, out);
}
// out[t] = table[ids[t] - vocab_start] for ids inside this shard of rows, else zeros (so that a
// vocab-parallel embedding sums to the full lookup across ranks).
inline void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  MLS_DISPATCH(out, embedding, table, ids, vocab_start, out);
}

// out = alpha · a.
inline void scale(const Tensor& a, float alpha, Tensor& out) {
  MLS_DISPATCH(out, scale, a, alpha, out);
}
// out (f32 or bf16, 1-D or 2-D contiguous) filled as UniformFill describes.
inline void fill_uniform(Tensor& out, const UniformFill& f) {
  MLS_DISPATCH(out, fill_uniform, out, f);
}

}  // namespace mls::ops
