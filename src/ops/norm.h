// Row-wise normalisations in fp32 over the last dimension; rows may be strided.
#pragma once

#include "ops/dispatch.h"
#include "ops/fp8_input.h"

namespace mls::ops {
namespace cpu {
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y);
void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y);
// The CPU's activations are never quantised (q is empty there: ops/fp8_input.h).
inline void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor*) {
  rms_norm(x, w, eps, y);
}
inline void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y,
                         Tensor*) {
  add_rms_norm(x, delta, w, eps, y);
}
}  // namespace cpu
namespace cuda {
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor* q);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y);
void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y, Tensor* q);
}  // namespace cuda

// x and y [T, n] with unit inner stride (y may alias x), w contiguous f32 [n], one device. q, if
// given and defined: y quantised for block-FP8 linears of y (ops/fp8_input.h).
inline void rms_norm_contract(const Tensor& x, const Tensor& w, float, const Tensor& y,
                              const Tensor* q = nullptr, const char* op = "rms_norm") {
  const Contract c(op, y);
  if (q) fp8_input_contract(c, "q", *q, y);
  c.rows("x", x, 2);
  c.rows("y", y, 2);
  c.need(y.dim(0) == x.dim(0) && y.dim(1) == x.dim(1), "y", y, "x's shape {}", x.shape().str());
  c.need(w.numel() == x.dim(1) && w.is_contiguous(), "w", w, "contiguous with {} elements",
         x.dim(1));
  c.dtype("w", w, {DType::kF32});
  c.activation("x", x);
  c.activation("y", y);
  c.on_device("x", x);
  c.on_device("w", w);
}
// And b like w.
inline void layer_norm_contract(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                                const Tensor& y) {
  rms_norm_contract(x, w, eps, y, nullptr, "layer_norm");
  const Contract c("layer_norm", y);
  c.need(b.shape() == w.shape() && b.is_contiguous(), "b", b, "contiguous like w {}", w.str());
  c.dtype("b", b, {DType::kF32});
  c.on_device("b", b);
}
// And delta like x.
inline void add_rms_norm_contract(const Tensor& x, const Tensor& delta, const Tensor& w, float eps,
                                  const Tensor& y, const Tensor* q = nullptr) {
  rms_norm_contract(x, w, eps, y, q, "add_rms_norm");
  const Contract c("add_rms_norm", y);
  c.rows("delta", delta, 2);
  c.need(delta.shape() == x.shape(), "delta", delta, "x's shape {}", x.shape().str());
  c.activation("delta", delta);
  c.on_device("delta", delta);
}

// y = w * x / sqrt(mean(x²) + eps). y may alias x. q: see rms_norm_contract.
inline void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor* q = nullptr) {
  MLS_DISPATCH(y, rms_norm, x, w, eps, y, q);
}
// y = (x - mean) / sqrt(var + eps) * w + b (biased variance, as torch.nn.LayerNorm).
inline void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  MLS_DISPATCH(y, layer_norm, x, w, b, eps, y);
}

// The residual step fused: x += delta, then y = rms_norm(x) (one pass over the row).
inline void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y,
                         Tensor* q = nullptr) {
  MLS_DISPATCH(y, add_rms_norm, x, delta, w, eps, y, q);
}

}  // namespace mls::ops
