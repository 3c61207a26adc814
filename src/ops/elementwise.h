// Small elementwise ops on [T, N] activations (rows may be strided).
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

namespace cpu {
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out);
}  // namespace cpu
namespace cuda {
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out);
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

}  // namespace mls::ops
