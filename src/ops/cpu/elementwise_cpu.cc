#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "ops/elementwise.h"

namespace mls::ops::cpu {

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  for (int64_t t = 0; t < gate.dim(0); ++t) {
    const float* g = gate.data<float>() + t * gate.stride(0);
    const float* u = up.data<float>() + t * up.stride(0);
    float* o = out.data<float>() + t * out.stride(0);
    for (int64_t i = 0; i < gate.dim(1); ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  for (int64_t t = 0; t < a.dim(0); ++t) {
    const float* x = a.data<float>() + t * a.stride(0);
    const float* y = b.data<float>() + t * b.stride(0);
    float* o = out.data<float>() + t * out.stride(0);
    for (int64_t i = 0; i < a.dim(1); ++i) o[i] = x[i] + y[i];
  }
}

void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  const int64_t rows = table.dim(0), H = table.dim(1);
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const int64_t r = ids.data<int32_t>()[t] - vocab_start;
    float* o = out.data<float>() + t * H;
    if (r >= 0 && r < rows)
      std::memcpy(o, table.data<float>() + r * table.stride(0), H * sizeof(float));
    else
      std::memset(o, 0, H * sizeof(float));
  }
}

void scale(const Tensor& a, float alpha, Tensor& out) {
  for (int64_t t = 0; t < a.dim(0); ++t) {
    const float* x = a.data<float>() + t * a.stride(0);
    float* o = out.data<float>() + t * out.stride(0);
    for (int64_t i = 0; i < a.dim(1); ++i) o[i] = alpha * x[i];
  }
}

void fill_uniform(Tensor& out, const UniformFill& f) {
  const int64_t cols = out.ndim() == 2 ? out.dim(1) : 1;
  float* o = out.data<float>();
  ThreadPool::global().parallel_for(out.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t r = i / cols + f.row0, c = i % cols + f.col0;
      uint64_t z = f.seed + static_cast<uint64_t>(r * f.full_cols + c) * 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
      o[i] = f.offset + f.bound * u;
    }
  });
}

}  // namespace mls::ops::cpu
