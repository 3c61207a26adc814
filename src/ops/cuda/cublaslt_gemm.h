// cuBLASLt behind the linear ops. Each GPU thread (rank) has, per device, one cuBLASLt handle,
// one GEMM workspace allocated once from mls::cuda::allocator() (MemTag::kWorkspace, kept for the
// thread's life; lt_prepare takes it at rank start-up, outside any step) and a cache from the full
// problem description to its matmul descriptor, layouts and chosen algorithm, so the heuristic
// query runs once per shape rather than per call.
#pragma once

#include <library_types.h>

#include <cstddef>
#include <cstdint>

namespace mls::ops::cuda {

// A (strided-batched) GEMM in the row-major form of a linear layer, for each batch b:
// y_b[i, j] = Σ_l x_b[i, l] · w_b[j, l] (+ y_b[i, j] when accumulate), fp32 accumulation.
// x_b row i at x + b·batch_stride_x + i·ldx (likewise w, y); strides in elements.
struct LtLinear {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* x = nullptr;
  int64_t ldx = 0, batch_stride_x = 0;
  const void* w = nullptr;
  int64_t ldw = 0, batch_stride_w = 0;
  void* y = nullptr;
  int64_t ldy = 0, batch_stride_y = 0;
  cudaDataType_t ab_type = CUDA_R_16BF;  // x and w
  cudaDataType_t y_type = CUDA_R_16BF;
  bool accumulate = false;
  // Block-scaled FP8 (ab_type CUDA_R_8F_E4M3, batch 1): x_scale is VEC128, f32
  // [ceil(k/128)][m] (token-major within a K block); w_scale is BLK128x128, f32
  // [ceil(n/128)][round_up(ceil(k/128), 4)] (row-major, rows padded to 4 floats).
  bool block_scaled = false;
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  // Plain GEMMs: one algorithm for every m (batch invariance, cublaslt_gemm.cc); false: the
  // heuristic's for m itself, for models whose GEMMs choose by step size anyway.
  bool invariant = true;
};

// Creates this thread's cuBLASLt handle and workspace now (a rank does at start-up, so that no
// step allocates them lazily: a step's allocations live in its fixed workspace).
void lt_prepare();

// Whether cuBLASLt has an algorithm for this problem (queried once per problem and cached).
bool lt_linear_supported(const LtLinear& p);
// Runs the GEMM on this thread's stream; throws Unsupported when cuBLASLt has no algorithm.
void lt_linear(const LtLinear& p);

// This thread's scratch for our own GEMM kernels, carved out of the same workspace (never used
// concurrently with cuBLASLt: everything runs in stream order): split-K partials, and arrival
// counters that are zero between launches.
struct GemmScratch {
  float* partial = nullptr;
  size_t partial_bytes = 0;
  int* counters = nullptr;
  int64_t num_counters = 0;
  int num_sms = 0;
};
GemmScratch gemm_scratch();

}  // namespace mls::ops::cuda
