// Shared helpers for the CUDA op tests: each test builds its inputs on the CPU, runs the CPU
// op as the reference, runs the CUDA op on bf16 copies, and compares in fp32. Without a GPU the
// tests skip, visibly.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/cuda_allocator.h"
#include "core/cuda_context.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/copy.h"
#include "ops/cuda/block_fp8_reference.h"
#include "ops/linear.h"
#include "ops/test_inputs.h"

namespace mls::ops::test {

#define MLS_REQUIRE_GPU()                                                       \
  do {                                                                          \
    if (::mls::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

inline Allocator& gpu() {
  return ::mls::cuda::allocator();
}

// The CUDA op tests' tolerances against the CPU op: an output stored as bf16 differs from the
// fp32 reference by its own rounding, at most half an ulp = 2^-8 relative, plus fp32 order
// (~1e-6); an f32 output by the fp32 summation order alone.
inline constexpr double kBf16OutTol = 4e-3;
inline constexpr double kF32OutTol = 2e-5;

inline Tensor dev_empty(const Shape& s, DType d) {
  return Tensor::empty(s, d, MemTag::kActivation, gpu());
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

// Host f32 values rounded through bf16, as the GPU sees them.
inline Tensor round_bf16(const Tensor& t) {
  Tensor r = Tensor::empty(t.shape(), DType::kF32, MemTag::kActivation);
  for (int64_t i = 0; i < t.numel(); ++i)
    r.data<float>()[i] = bf16_to_f32(f32_to_bf16(t.data<float>()[i]));
  return r;
}

// A block-FP8 weight as a checkpoint stores it: e4m3 values and one f32 scale per 128x128 block
// (amax / 448, like DeepSeek's weight_scale_inv), plus its dequantised f32 value.
struct Fp8Weight {
  Tensor q;      // host e4m3 [out, in]
  Tensor scale;  // host f32 [ceil(out/128), ceil(in/128)]
  Tensor deq;    // host f32 [out, in]
};

inline Fp8Weight make_fp8_weight(int64_t out, int64_t in, uint32_t seed) {
  Tensor w = random({out, in}, seed, 0.05f);
  float* fw = w.data<float>();
  const int64_t NB = (out + 127) / 128, KB = (in + 127) / 128;
  // Blocks of very different magnitudes, so a scale applied to the wrong block shows.
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = 0; j < in; ++j)
      fw[i * in + j] *= std::ldexp(1.0f, static_cast<int>((i / 128 * 3 + j / 128 * 5) % 7) - 3);
  Fp8Weight r{Tensor::empty({out, in}, DType::kFP8E4M3, MemTag::kWeights),
              Tensor::empty({NB, KB}, DType::kF32, MemTag::kWeights),
              Tensor::empty({out, in}, DType::kF32, MemTag::kWeights)};
  for (int64_t bi = 0; bi < NB; ++bi)
    for (int64_t bj = 0; bj < KB; ++bj) {
      float amax = 0.0f;
      for (int64_t i = bi * 128; i < std::min(out, bi * 128 + 128); ++i)
        for (int64_t j = bj * 128; j < std::min(in, bj * 128 + 128); ++j)
          amax = std::max(amax, std::fabs(fw[i * in + j]));
      const float s = amax / 448.0f;
      r.scale.data<float>()[bi * KB + bj] = s;
      for (int64_t i = bi * 128; i < std::min(out, bi * 128 + 128); ++i)
        for (int64_t j = bj * 128; j < std::min(in, bj * 128 + 128); ++j) {
          const uint8_t q = f32_to_fp8e4m3(fw[i * in + j] / s);
          r.q.data<uint8_t>()[i * in + j] = q;
          r.deq.data<float>()[i * in + j] = fp8e4m3_to_f32(q) * s;
        }
    }
  return r;
}

inline Tensor upload_fp8(const Fp8Weight& w) {
  Tensor dev = to_gpu(w.q, DType::kFP8E4M3);
  dev.set_block_scale(to_gpu(w.scale, DType::kF32));
  ops::attach_padded_block_scale(dev, ::mls::cuda::allocator());  // as the loader does
  return dev;
}

// The activation quantisation the GPU applies, emulated: per token and 128-group along K,
// scale = amax / 448 (1 for an all-zero group), x ≈ e4m3(x / scale) · scale (quantise_act_row).
inline Tensor emulate_act_quant(const Tensor& x) {
  const int64_t T = x.dim(0), K = x.dim(1);
  Tensor r = Tensor::empty(x.shape(), DType::kF32, MemTag::kActivation);
  std::vector<uint8_t> q(K);
  std::vector<float> scales((K + 127) / 128);
  for (int64_t t = 0; t < T; ++t) {
    cuda::kernels::test::quantise_act_row(x.data<float>() + t * K, K, q.data(), scales.data());
    for (int64_t k = 0; k < K; ++k)
      r.data<float>()[t * K + k] =
          static_cast<float>(cuda::kernels::test::e4m3(q[k])) * scales[k / 128];
  }
  return r;
}

}  // namespace mls::ops::test
