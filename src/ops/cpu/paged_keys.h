// Host-side addressing of PagedKeys (ops/attention.h), shared by the CPU attention and indexer.
#pragma once

#include "ops/attention.h"

namespace mls::ops::cpu {

// Cache row of key position j for query row t.
inline int64_t key_row(const PagedKeys& p, int64_t t, int32_t j) {
  if (!p.block_tables) return j;
  const int64_t seq = p.token_seq->data<int32_t>()[t];
  const int32_t block =
      p.block_tables->data<int32_t>()[seq * p.block_tables->stride(0) + j / p.block_size];
  return static_cast<int64_t>(block) * p.block_size + j % p.block_size;
}

// Every query position must address keys inside the cache: its block-table row must cover it.
inline void check_key_range(const char* op, const Tensor& q_pos, const PagedKeys& p, int64_t rows) {
  const int32_t* pos = q_pos.data<int32_t>();
  for (int64_t t = 0; t < q_pos.numel(); ++t) {
    const int64_t limit = p.block_tables ? p.block_tables->dim(1) * p.block_size : rows;
    if (pos[t] < 0 || pos[t] >= limit)
      raise<ShapeError>("{}: query position {} outside the {} addressable keys", op, pos[t], limit);
    if (p.block_tables && p.token_seq->data<int32_t>()[t] >= p.block_tables->dim(0))
      raise<ShapeError>("{}: query row {} names sequence {} of {}", op, t,
                        p.token_seq->data<int32_t>()[t], p.block_tables->dim(0));
  }
}

}  // namespace mls::ops::cpu
