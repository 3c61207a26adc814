// Launchers for the MoE routing kernels (moe_kernels.cu): routing, expert grouping of the
// (token, slot) pairs, and the weighted sum of the experts' outputs back into token order.
// No fmt-based project headers: this is included by nvcc. Each launcher queues its work on
// `stream` and returns cudaGetLastError().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace mls::ops::cuda::kernels {

// moe_route keeps a token's experts, groups and choices in one warp; moe_align keeps per-warp
// expert counters in shared memory.
inline constexpr int kMoeMaxExperts = 1024;
inline constexpr int kMoeMaxTopK = 32;
inline constexpr int kMoeMaxGroups = 32;
// moe_align's largest T·k (32-bit pair indices with room to spare).
inline constexpr int64_t kMoeMaxPairs = int64_t{1} << 30;

struct RouteArgs {
  const float* logits;  // f32 [T, E], contiguous
  const float* bias;    // f32 [E], or null
  int64_t T;
  int E, n_group, topk_group, top_k;
  bool norm_topk_prob;
  float scaling;
  int32_t* ids;  // [T, top_k]
  int64_t ids_s0, ids_s1;
  float* weights;  // [T, top_k]
  int64_t w_s0, w_s1;
};

// Chooses each token's top_k experts and their weights; ids and weights come in the order
// chosen (descending biased score, ties to the lower expert id).
cudaError_t launch_moe_route(const RouteArgs& a, cudaStream_t stream);

// `workspace`: ops::scratch::moe_align_ints(T·k, E) ints.
// ids i32 [t·s0 + i·s1] (t < T, i < k) → src_token [T·k], dest_row [T·k] (pair t·k + i) and
// offsets [E + 1], grouped stably by expert. The CPU op rejects an id outside [0, E); here,
// unable to raise, such a pair is dropped: dest_row −1, and rows offsets[E]..T·k of src_token
// are −1 (gather_rows reads zeros for them, moe_unpermute skips them).
cudaError_t launch_moe_align(const int32_t* ids, int64_t T, int k, int64_t s0, int64_t s1, int E,
                             int32_t* src_token, int32_t* dest_row, int32_t* offsets,
                             void* workspace, cudaStream_t stream);

struct UnpermuteArgs {
  const void* y;  // [y_rows, H], f32 or bf16, unit inner stride
  DType y_dtype;
  int64_t y_rows, y_stride;
  const int32_t* dest_row;  // [T, k]
  int64_t d_s0, d_s1;
  const float* weights;  // [T, k]
  int64_t w_s0, w_s1;
  void* out;  // [T, H], f32 or bf16, unit inner stride
  DType out_dtype;
  int64_t out_stride;
  int64_t T, H;
  int k;
};

// out[t] = Σ_i weights[t, i] · y[dest_row[t, i]], summed in fp32 in slot order with separately
// rounded products (bitwise the CPU op's sum on f32 data); a dest_row outside [0, y_rows)
// contributes nothing.
cudaError_t launch_moe_unpermute(const UnpermuteArgs& a, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
