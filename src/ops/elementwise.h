// Small elementwise ops on [T, N] activations (rows may be strided).
#pragma once

#include "ops/dispatch.h"
#include "ops/fp8_input.h"

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
// The CPU's activations are never quantised (q is empty there: ops/fp8_input.h).
inline void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, Tensor*) {
  silu_mul(gate, up, out);
}
}  // namespace cpu
namespace cuda {
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, Tensor* q);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out);
void scale(const Tensor& a, float alpha, Tensor& out);
void fill_uniform(Tensor& out, const UniformFill& f);
}  // namespace cuda

// a, b and out: [T, N] of one shape with unit inner stride, one device (out may alias them).
inline void pointwise_contract(const char* op, const Tensor& a, const Tensor& b,
                               const Tensor& out) {
  const Contract c(op, out);
  c.rows("a", a, 2);
  c.need(b.shape() == a.shape() && b.stride(-1) == 1, "b", b, "{} with unit inner stride",
         a.shape().str());
  c.need(out.shape() == a.shape() && out.stride(-1) == 1, "out", out, "{} with unit inner stride",
         a.shape().str());
  c.activation("a", a);
  c.activation("b", b);
  c.activation("out", out);
  c.on_device("a", a);
  c.on_device("b", b);
}
// q, if given and defined: out quantised for block-FP8 linears of out (ops/fp8_input.h), from
// bf16 gate and up.
inline void silu_mul_contract(const Tensor& gate, const Tensor& up, const Tensor& out,
                              const Tensor* q = nullptr) {
  pointwise_contract("silu_mul", gate, up, out);
  if (!q || !q->defined()) return;
  const Contract c("silu_mul", out);
  fp8_input_contract(c, "q", *q, out);
  c.dtype("gate (with q)", gate, {DType::kBF16});
  c.dtype("up (with q)", up, {DType::kBF16});
}
inline void add_contract(const Tensor& a, const Tensor& b, const Tensor& out) {
  pointwise_contract("add", a, b, out);
}
inline void scale_contract(const Tensor& a, float, const Tensor& out) {
  pointwise_contract("scale", a, a, out);
}
// table [rows, H] with unit inner stride, ids contiguous i32, out contiguous [ids, H].
inline void embedding_contract(const Tensor& table, const Tensor& ids, int64_t, const Tensor& out) {
  const Contract c("embedding", out);
  c.rows("table", table, 2);
  c.index("ids", ids, -1);
  c.need(out.ndim() == 2 && out.is_contiguous() && out.dim(0) == ids.numel() &&
             out.dim(1) == table.dim(1),
         "out", out, "contiguous [{}, {}]", ids.numel(), table.dim(1));
  c.activation("table", table);
  c.activation("out", out);
  c.on_device("table", table);
}
// out contiguous with at most 2 dims: f32 (CPU); f32, bf16 or fp8 (GPU).
inline void fill_uniform_contract(const Tensor& out, const UniformFill&) {
  const Contract c("fill_uniform", out);
  c.need(out.ndim() <= 2 && out.is_contiguous(), "out", out, "contiguous with at most 2 dims");
  if (c.gpu())
    c.dtype("out", out, {DType::kF32, DType::kBF16, DType::kFP8E4M3});
  else
    c.dtype("out", out, {DType::kF32});
}

// out = silu(gate) * up.
inline void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, Tensor* q = nullptr) {
  MLS_DISPATCH(out, silu_mul, gate, up, out, q);
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
