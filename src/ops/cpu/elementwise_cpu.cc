#include <cmath>
#include <cstring>

#include "ops/elementwise.h"

namespace mls::ops::cpu {

static void check_same(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  if (a.ndim() != 2 || !(a.shape() == b.shape()) || !(a.shape() == out.shape()) ||
      a.stride(1) != 1 || b.stride(1) != 1 || out.stride(1) != 1)
    raise<ShapeError>("{}: {} {} -> {} do not fit", op, a.str(), b.str(), out.str());
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  check_same("silu_mul", gate, up, out);
  for (int64_t t = 0; t < gate.dim(0); ++t) {
    const float* g = gate.data<float>() + t * gate.stride(0);
    const float* u = up.data<float>() + t * up.stride(0);
    float* o = out.data<float>() + t * out.stride(0);
    for (int64_t i = 0; i < gate.dim(1); ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_same("add", a, b, out);
  for (int64_t t = 0; t < a.dim(0); ++t) {
    const float* x = a.data<float>() + t * a.stride(0);
    const float* y = b.data<float>() + t * b.stride(0);
    float* o = out.data<float>() + t * out.stride(0);
    for (int64_t i = 0; i < a.dim(1); ++i) o[i] = x[i] + y[i];
  }
}

void embedding(const Tensor& table, const Tensor& ids, int64_t vocab_start, Tensor& out) {
  const int64_t rows = table.dim(0), H = table.dim(1);
  if (table.ndim() != 2 || out.ndim() != 2 || out.dim(0) != ids.numel() || out.dim(1) != H ||
      !out.is_contiguous() || ids.dtype() != DType::kI32)
    raise<ShapeError>("embedding: table {} ids {} out {} do not fit", table.str(), ids.str(),
                      out.str());
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const int64_t r = ids.data<int32_t>()[t] - vocab_start;
    float* o = out.data<float>() + t * H;
    if (r >= 0 && r < rows)
      std::memcpy(o, table.data<float>() + r * H, H * sizeof(float));
    else
      std::memset(o, 0, H * sizeof(float));
  }
}

}  // namespace mls::ops::cpu
