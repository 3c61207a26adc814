// Launchers for the elementwise ops (elementwise_kernels.cu). Plain types only: this header is
// included by nvcc-compiled code, which cannot see fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace mls::ops::cuda::kernels {

enum class Pointwise { kSiluMul, kAdd, kScale };

// out = op(a, b) over `rows` rows of `cols` values with row strides in elements (unit inner
// stride); each operand bf16 or f32. out may alias a or b. kScale reads a only: alpha · a.
struct PointwiseRows {
  int64_t rows = 0, cols = 0;
  const void* a = nullptr;
  int64_t a_stride = 0;
  DType a_dtype = DType::kBF16;
  const void* b = nullptr;
  int64_t b_stride = 0;
  DType b_dtype = DType::kBF16;
  void* out = nullptr;
  int64_t out_stride = 0;
  DType out_dtype = DType::kBF16;
  float alpha = 1.0f;
};

cudaError_t launch_pointwise(Pointwise op, const PointwiseRows& p, cudaStream_t stream);

// out[t] (contiguous [tokens, hidden]) = table[ids[t] − vocab_start] for ids inside the table's
// `rows`, else zeros. table rows are `table_stride` elements apart; ids are device i32.
cudaError_t launch_embedding(const void* table, DType table_dtype, int64_t rows, int64_t hidden,
                             int64_t table_stride, const int32_t* ids, int64_t tokens,
                             int64_t vocab_start, void* out, DType out_dtype, cudaStream_t stream);

// ops::UniformFill as plain values; element i of a contiguous [n / cols, cols] tensor.
struct FillParams {
  uint64_t seed = 0;
  float bound = 1.0f, offset = 0.0f;
  int64_t row0 = 0, col0 = 0, full_cols = 1;
};

// out: f32, bf16 or fp8 e4m3 (round to nearest, saturating at ±448), n elements.
cudaError_t launch_fill_uniform(void* out, DType dtype, int64_t n, int64_t cols,
                                const FillParams& f, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
