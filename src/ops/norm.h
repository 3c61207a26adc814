// Row-wise normalisations in fp32 over the last dimension; rows may be strided.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {
namespace cpu {
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y);
void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y);
}  // namespace cpu
namespace cuda {
void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y);
void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y);
}  // namespace cuda

// y = w * x / sqrt(mean(x²) + eps). y may alias x.
inline void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  MLS_DISPATCH(y, rms_norm, x, w, eps, y);
}
// y = (x - mean) / sqrt(var + eps) * w + b (biased variance, as torch.nn.LayerNorm).
inline void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  MLS_DISPATCH(y, layer_norm, x, w, b, eps, y);
}

// The residual step fused: x += delta, then y = rms_norm(x) (one pass over the row).
inline void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y) {
  MLS_DISPATCH(y, add_rms_norm, x, delta, w, eps, y);
}

}  // namespace mls::ops
