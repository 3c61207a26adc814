// Launchers for the row normalisations (norm_kernels.cu). Plain types only: this header is
// included by nvcc-compiled code, which cannot see fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace mls::ops::cuda::kernels {

// One row-normalisation problem: `rows` rows of `n` values; x, delta and y have their own row
// strides (elements) and dtypes (bf16 or f32); w and b are f32 [n].
struct NormRows {
  int64_t rows = 0, n = 0;
  void* x = nullptr;  // read; also written by add_rms_norm
  int64_t x_stride = 0;
  DType x_dtype = DType::kBF16;
  const void* delta = nullptr;  // add_rms_norm only
  int64_t delta_stride = 0;
  DType delta_dtype = DType::kBF16;
  void* y = nullptr;  // may alias x (or delta)
  int64_t y_stride = 0;
  DType y_dtype = DType::kBF16;
  const float* w = nullptr;
  const float* b = nullptr;  // layer_norm only
  float eps = 0;
  // rms_norm and add_rms_norm into bf16 y with n % 128 == 0: y also quantised for the FP8
  // linears, the bytes launch_quantize_fp8_act(y, .., ldq, q_lead, q, scales) writes, in the
  // buffer layout of fp8_act_buffer (fp8_act_kernels.h). Null: y only.
  uint8_t* q = nullptr;
  int64_t ldq = 0, q_lead = 0;
};

// Whether the norm kernels quantise y themselves for these rows (else the caller quantises it
// with launch_quantize_fp8_act after the norm).
bool norm_quantizes(const NormRows& p);

// y = w · x / sqrt(mean(x²) + eps).
cudaError_t launch_rms_norm(const NormRows& p, cudaStream_t stream);
// y = (x − mean) / sqrt(var + eps) · w + b.
cudaError_t launch_layer_norm(const NormRows& p, cudaStream_t stream);
// x = round(x + delta) in x's dtype, then y = rms_norm(x).
cudaError_t launch_add_rms_norm(const NormRows& p, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
