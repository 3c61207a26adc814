// Shared helpers for the CUDA op tests: each test builds its inputs on the CPU, runs the CPU
// op as the reference, runs the CUDA op on bf16 copies, and compares in fp32. Without a GPU the
// tests skip, visibly.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/copy.h"

namespace mls::ops::test {

#define MLS_REQUIRE_GPU()                                                       \
  do {                                                                          \
    if (::mls::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

inline Allocator& gpu() {
  return ::mls::cuda::allocator();
}

inline Tensor random_cpu(const Shape& s, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  Tensor t = Tensor::empty(s, DType::kF32, MemTag::kActivation);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(g);
  return t;
}

inline Tensor ints_cpu(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32, MemTag::kActivation);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// A contiguous device copy of a contiguous host tensor, converted to `dtype` on the device.
inline Tensor to_gpu(const Tensor& host, DType dtype = DType::kBF16) {
  Tensor staged = Tensor::empty(host.shape(), host.dtype(), MemTag::kActivation, gpu());
  copy(host, staged);
  if (dtype == host.dtype()) return staged;
  Tensor out = Tensor::empty(host.shape(), dtype, MemTag::kActivation, gpu());
  copy(staged, out);
  return out;
}

// The device tensor as contiguous host f32 (i32 stays i32); synchronises.
inline Tensor to_cpu(const Tensor& dev) {
  const DType host_dtype = dev.dtype() == DType::kI32 ? DType::kI32 : DType::kF32;
  Tensor conv = Tensor::empty(dev.shape(), host_dtype, MemTag::kActivation, gpu());
  copy(dev, conv);
  Tensor out = Tensor::empty(dev.shape(), host_dtype, MemTag::kActivation);
  copy(conv, out);
  ::mls::cuda::synchronize();
  return out;
}

// The CPU reference rounded through bf16, as the GPU sees its inputs.
inline Tensor bf16_rounded(const Tensor& host) {
  return to_cpu(to_gpu(host));
}

// ‖a − b‖ / ‖b‖ over all elements (contiguous f32).
inline double rel_l2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    const double d = static_cast<double>(a.data<float>()[i]) - b.data<float>()[i];
    num += d * d;
    den += static_cast<double>(b.data<float>()[i]) * b.data<float>()[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace mls::ops::test
