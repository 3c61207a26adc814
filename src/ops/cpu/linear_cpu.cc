#include <cblas.h>

#include <algorithm>

#include "ops/linear.h"

namespace mls::ops::cpu {

// W's rows may be apart (a head of a batched W): cblas reads every operand at its row stride
// (a single row's stride is never used, but cblas wants it at least the row length).
void linear(const Tensor& x, const Tensor& w, Tensor& y, bool accumulate) {
  const int64_t m = x.dim(0), n = w.dim(0), k = w.dim(1);
  if (m == 0 || n == 0) return;
  const auto ld = [](const Tensor& t) {
    return static_cast<int>(std::max<int64_t>({t.stride(0), t.dim(1), 1}));
  };
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x.data<float>(), ld(x), w.data<float>(), ld(w),
              accumulate ? 1.0f : 0.0f, y.data<float>(), ld(y));
}

void linear_pair(const Tensor& x, const Tensor& w1, Tensor& y1, const Tensor& w2, Tensor& y2) {
  linear(x, w1, y1, false);
  linear(x, w2, y2, false);
}

void linear_batched(const Tensor& x, const Tensor& w, Tensor& y) {
  for (int64_t b = 0; b < w.dim(0); ++b) {
    Tensor yb = y.select(1, b);
    linear(x.select(1, b), w.select(0, b), yb, false);
  }
}

}  // namespace mls::ops::cpu
