// Key addressing of one DSA indexer step (IndexerParams), shared by the score kernels: how many
// key positions a query scores, the row of k that holds each (paged_rows.cuh in two steps, or
// key_row at once) and the runs of a token group's rows that share a sequence.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/indexer_topk_kernels.h"
#include "ops/cuda/paged_rows.cuh"

namespace mls::ops::cuda::kernels {

// Positions query t scores: j < min(q_pos + 1, row_len, key_bound), none if its sequence is
// out of range.
__device__ __forceinline__ int64_t valid_keys(const IndexerParams& p, int t) {
  if (p.block_tables && (p.token_seq[t] < 0 || p.token_seq[t] >= p.num_seqs)) return 0;
  int64_t n = static_cast<int64_t>(p.q_pos[t]) + 1;
  n = n < p.row_len[t] ? n : p.row_len[t];
  n = n < p.key_bound ? n : p.key_bound;
  return n > 0 ? n : 0;
}

// m16 blocks of heads the score kernels compute (heads past Hi are zero rows with zero weight):
// both kernels sum a key's heads over the same padded blocks, so their scores are the same floats.
__host__ __device__ constexpr int head_blocks(int heads) {
  return (heads + 15) / 16;
}

// Element i of the head weights (query t's head h at t · w_st + h), as a float whatever their
// dtype, times the scale: w · relu(x · scale) = (w · scale) · relu(x) for the positive scale the
// op's contract requires, so the score kernels multiply once per head weight, not per product.
__device__ __forceinline__ float head_weight(const IndexerParams& p, int64_t i) {
  return (p.w_f32 ? static_cast<const float*>(p.w)[i]
                  : __bfloat162float(static_cast<const __nv_bfloat16*>(p.w)[i])) *
         p.scale;
}

// Row of k holding key position j (j < valid_keys) of query t, or -1 for an address outside the
// cache (the key then scores as if it were zero).
__device__ __forceinline__ int64_t key_row(const IndexerParams& p, int t, int64_t j) {
  return paged_resolve(p, paged_lookup(p, p.block_tables ? p.token_seq[t] : 0, j));
}

// The end of the run of tokens of one sequence that starts at row g0 of the group of `cnt` rows
// from tb (every row when unpaged: one sequence).
__device__ __forceinline__ int run_end(const IndexerParams& p, int tb, int g0, int cnt) {
  if (!p.block_tables) return cnt;
  int g1 = g0 + 1;
  while (g1 < cnt && p.token_seq[tb + g1] == p.token_seq[tb + g0]) ++g1;
  return g1;
}

}  // namespace mls::ops::cuda::kernels
