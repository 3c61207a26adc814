// Host-side checks shared by the CUDA attention and indexer ops: i32 index tensors on the
// output's GPU, and the step's PagedKeys (ops/attention.h) unpacked into the kernels' fields.
#pragma once

#include <algorithm>

#include "ops/attention.h"

namespace mls::ops::cuda {

// `t` must be i32 on out's device and, for n >= 0, contiguous [n].
inline void check_index(const char* op, const char* what, const Tensor& t, int64_t n,
                        const Tensor& out) {
  if (t.dtype() != DType::kI32 || t.device() != out.device())
    raise<ShapeError>("{}: {} {} must be i32 on {}", op, what, t.str(), out.device().str());
  if (n >= 0 && (t.numel() != n || !t.is_contiguous()))
    raise<ShapeError>("{}: {} {} must be contiguous [{}]", op, what, t.str(), n);
}

// Fills the paging fields every kernel parameter block of ours names alike (block_tables,
// bt_ld, num_seqs, max_blocks, token_seq, block_size, key_bound) for T query rows over a cache
// of `rows` rows; unpaged keys bound the key count by the rows.
template <class Params>
void set_pages(const char* op, const PagedKeys& pages, int64_t T, int64_t rows, const Tensor& out,
               Params& p) {
  if (!pages.block_tables) {
    p.key_bound = key_bound(pages, rows);
    return;
  }
  const Tensor& bt = *pages.block_tables;
  check_index(op, "block_tables", bt, -1, out);
  if (bt.ndim() != 2 || bt.stride(1) != 1)
    raise<ShapeError>("{}: block_tables {} must be [num_seqs, max_blocks] with unit inner stride",
                      op, bt.str());
  if (!pages.token_seq) raise<ShapeError>("{}: paged keys need token_seq", op);
  check_index(op, "token_seq", *pages.token_seq, T, out);
  if (pages.block_size < 1 || pages.max_keys < 1)
    raise<ShapeError>("{}: paged keys need block_size ({}) and max_keys ({}) >= 1", op,
                      pages.block_size, pages.max_keys);
  p.block_tables = bt.data<int32_t>();
  p.bt_ld = bt.stride(0);
  p.num_seqs = bt.dim(0);
  p.max_blocks = bt.dim(1);
  p.token_seq = pages.token_seq->data<int32_t>();
  p.block_size = pages.block_size;
  p.key_bound = key_bound(pages, rows);
}

}  // namespace mls::ops::cuda
