// Key addressing of one DSA indexer step (IndexerParams), shared by the score kernels: how many
// key positions a query scores and the row of k that holds each. A paged row takes a load of the
// block table; key_lookup issues it and key_resolve consumes it, so a kernel can keep the load in
// flight over a tile's compute (key_row does both at once).
#pragma once

#include <cstdint>

#include "ops/cuda/indexer_topk_kernels.h"

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

// The loaded values stay 32-bit until key_resolve: a widening right after a load would wait for
// it.
struct PendingKey {
  int32_t block;  // the block-table entry; the position itself when unpaged; -1 past the table
  int32_t offset;
};

// Key position j (j < valid_keys) of a query of sequence `seq` (any value when unpaged).
__device__ __forceinline__ PendingKey key_lookup(const IndexerParams& p, int64_t seq, int64_t j) {
  if (!p.block_tables) return {static_cast<int32_t>(j), 0};
  // Positions and block sizes fit in 31 bits: 32-bit division is several times cheaper.
  const uint32_t bs = static_cast<uint32_t>(p.block_size), jj = static_cast<uint32_t>(j);
  const uint32_t blk = jj / bs;
  if (blk >= p.max_blocks) return {-1, 0};
  return {p.block_tables[seq * p.bt_ld + blk], static_cast<int32_t>(jj - blk * bs)};
}

// The row of k, or -1 for an address outside the cache (the key then scores as if it were zero).
__device__ __forceinline__ int64_t key_resolve(const IndexerParams& p, PendingKey e) {
  const int64_t row =
      p.block_tables ? static_cast<int64_t>(e.block) * p.block_size + e.offset : e.block;
  return e.block >= 0 && row < p.num_rows ? row : -1;
}

__device__ __forceinline__ int64_t key_row(const IndexerParams& p, int t, int64_t j) {
  return key_resolve(p, key_lookup(p, p.block_tables ? p.token_seq[t] : 0, j));
}

}  // namespace mls::ops::cuda::kernels
