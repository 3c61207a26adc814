// Launchers for attention (attention_kernels.cu). Plain types only: this header is included by
// nvcc-compiled code, which cannot see fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mls::ops::cuda::kernels {

// One step's attention (see ops/attention.h). All pointers are device memory; strides are in
// elements and every innermost stride is 1. q, k, v and out are bf16.
struct AttentionParams {
  const void* q = nullptr;  // [T, H, Dk]
  int64_t q_st = 0, q_sh = 0;
  const void* k = nullptr;  // [rows, Hk, Dk]
  int64_t k_sr = 0, k_sh = 0;
  const void* v = nullptr;  // [rows, Hk, Dv]
  int64_t v_sr = 0, v_sh = 0;
  void* out = nullptr;  // [T, H, Dv]
  int64_t o_st = 0, o_sh = 0;
  const int32_t* q_pos = nullptr;    // [T]
  const int32_t* allowed = nullptr;  // [T, allowed_k] contiguous, or null (dense)
  int64_t allowed_k = 0;
  const int32_t* block_tables = nullptr;  // [num_seqs, bt_ld]-strided, or null (unpaged)
  int64_t bt_ld = 0, num_seqs = 0, max_blocks = 0;
  const int32_t* token_seq = nullptr;  // [T]
  int64_t block_size = 1;
  int64_t num_rows = 0;   // rows of k and v: block-table entries past them mask the key
  int64_t key_bound = 0;  // no query sees more keys than this (host-known)
  int T = 0, H = 0, Hk = 1, Dk = 0, Dv = 0;
  float scale = 1.0f;
  bool batch_invariant = false;  // ops::AttentionArgs::batch_invariant
};

// out = attention; `scratch` holds ops::scratch::attention_splits(...).floats floats for this
// step (split partial outputs and their softmax statistics; may be null when that is 0).
cudaError_t launch_attention(const AttentionParams& p, float* scratch, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
