// The step's PagedKeys (ops/attention.h, whose contract the dispatcher has checked) unpacked into
// the fields every kernel parameter block of the CUDA attention and indexer names alike.
#pragma once

#include "ops/attention.h"

namespace mls::ops::cuda {

// Fills block_tables, bt_ld, num_seqs, max_blocks, token_seq, block_size and key_bound for a
// cache of `rows` rows; unpaged keys bound the key count by the rows.
template <class Params>
void set_pages(const PagedKeys& pages, int64_t rows, Params& p) {
  p.key_bound = key_bound(pages, rows);
  if (!pages.block_tables) return;
  const Tensor& bt = *pages.block_tables;
  p.block_tables = bt.data<int32_t>();
  p.bt_ld = bt.stride(0);
  p.num_seqs = bt.dim(0);
  p.max_blocks = bt.dim(1);
  p.token_seq = pages.token_seq->data<int32_t>();
  p.block_size = pages.block_size;
}

}  // namespace mls::ops::cuda
