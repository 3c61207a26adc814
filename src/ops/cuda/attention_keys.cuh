// Key addressing of one attention step (AttentionParams), shared by the attention kernels: which
// key positions a query sees and the row of k/v that holds each entry of its key list.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/cuda/attention_kernels.h"
#include "ops/cuda/paged_rows.cuh"

namespace mls::ops::cuda::kernels {

// Number of key positions query t may see (j <= q_pos, within the host bound).
__device__ __forceinline__ int64_t visible_keys(const AttentionParams& p, int t) {
  const int64_t n = static_cast<int64_t>(p.q_pos[t]) + 1;
  return n < 0 ? 0 : (n < p.key_bound ? n : p.key_bound);
}

// The sequence whose block table query t reads, or -1 when it names none.
__device__ __forceinline__ int64_t seq_of(const AttentionParams& p, int t) {
  if (!p.block_tables) return 0;
  const int64_t s = p.token_seq[t];
  return s >= 0 && s < p.num_seqs ? s : -1;
}

// Length of query t's key list: its visible positions, or its row of `allowed`.
__device__ __forceinline__ int64_t list_length(const AttentionParams& p, int t, int64_t nk,
                                               int64_t seq) {
  if (seq < 0) return 0;
  return p.allowed ? p.allowed_k : nk;
}

// Row of k/v holding entry i of query t's key list, or -1 when the entry is masked (unused
// sparse slot, position past q_pos, or an address outside the cache), in three steps, so a kernel
// can keep the two dependent loads (the list entry, then the block-table entry) in flight over a
// tile's compute (entry_row runs the three at once):
//   entry_index: the position the entry names (a load of the sparse list, kept 32-bit);
//   entry_lookup: that position's block-table entry (a load) and offset in the block;
//   paged_resolve (paged_rows.cuh): the row.
__device__ __forceinline__ int32_t entry_index(const AttentionParams& p, int t, int64_t i) {
  return p.allowed ? p.allowed[t * p.allowed_k + i] : static_cast<int32_t>(i);
}
__device__ __forceinline__ PendingRow entry_lookup(const AttentionParams& p, int32_t j, int64_t nk,
                                                   int64_t seq) {
  if (j < 0 || j >= nk) return {-1, 0};
  return paged_lookup(p, seq, j);
}
__device__ __forceinline__ int64_t entry_row(const AttentionParams& p, int t, int64_t i, int64_t nk,
                                             int64_t seq) {
  return paged_resolve(p, entry_lookup(p, entry_index(p, t, i), nk, seq));
}

// The entries [begin, end) of query t's key list that split `split` of a latent kernel's cut
// covers (splits of keys_per_split entries), with what entry_row needs.
struct SplitRange {
  int64_t seq, nk, begin, end;
};
__device__ __forceinline__ SplitRange split_range(const AttentionParams& p, int t, int split,
                                                  int64_t keys_per_split) {
  SplitRange r;
  r.seq = seq_of(p, t);
  r.nk = visible_keys(p, t);
  const int64_t n_list = list_length(p, t, r.nk, r.seq);
  r.begin = split * keys_per_split;
  r.end = r.begin + keys_per_split < n_list ? r.begin + keys_per_split : n_list;
  return r;
}

// Marks head h of split `split` of query t as holding no key, for the combine kernel.
__device__ __forceinline__ void mark_split_empty(const AttentionParams& p, float* part_ml,
                                                 int split, int t, int h) {
  float* ml = part_ml + ((static_cast<int64_t>(split) * p.T + t) * p.H + h) * 2;
  ml[0] = -INFINITY;
  ml[1] = 0.0f;
}

}  // namespace mls::ops::cuda::kernels
