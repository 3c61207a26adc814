// y[T, out] = x[T, in] · Wᵀ with W stored [out, in] (the checkpoint layout). Rows of x and y may
// be strided (views into wider activations); W is contiguous.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {
namespace cpu {
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate);
}
namespace cuda {
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate);
}

// accumulate: y += x·Wᵀ instead of y = x·Wᵀ.
inline void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate = false) {
  MLS_DISPATCH(y, linear, x, w, y, accumulate);
}

}  // namespace mls::ops
