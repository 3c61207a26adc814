#include "core/thread_pool.h"
#include "ops/cpu/norm_row.h"
#include "ops/norm.h"

namespace mls::ops::cpu {

void rms_norm(const Tensor& x, const Tensor& w, float eps, Tensor& y) {
  const int64_t n = x.dim(1);
  const float* wp = w.data<float>();
  ThreadPool::global().parallel_for(x.dim(0), 16, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      rms_norm_row(x.data<float>() + t * x.stride(0), wp, n, eps,
                   y.data<float>() + t * y.stride(0));
    }
  });
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y) {
  const int64_t n = x.dim(1);
  const float* wp = w.data<float>();
  const float* bp = b.data<float>();
  ThreadPool::global().parallel_for(x.dim(0), 16, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      layer_norm_row(x.data<float>() + t * x.stride(0), wp, bp, n, eps,
                     y.data<float>() + t * y.stride(0));
    }
  });
}

void add_rms_norm(Tensor& x, const Tensor& delta, const Tensor& w, float eps, Tensor& y) {
  for (int64_t t = 0; t < x.dim(0); ++t) {
    float* xr = x.data<float>() + t * x.stride(0);
    const float* dr = delta.data<float>() + t * delta.stride(0);
    for (int64_t i = 0; i < x.dim(1); ++i) xr[i] += dr[i];
  }
  rms_norm(x, w, eps, y);
}

}  // namespace mls::ops::cpu
