// The token-layout contract (DESIGN.md): every activation between layers is either Replicated
// (all T tokens on every rank) or Sharded (T padded up to a multiple of tp; rank r holds rows
// [r·T_pad/tp, (r+1)·T_pad/tp)). Only the decoder layer changes layouts, and only through the
// helpers below; every gather trims back to the true T, given by the positions tensor, so a
// padded or multiplied token dimension can never leak into RoPE, the cache or the MoE. Data
// moves through ops (copies, collectives) on the tensors' device: host or GPU alike.
#pragma once

#include "core/tensor.h"
#include "parallel/communicator.h"

namespace mls {

struct TokenLayout {
  enum class Kind { kReplicated, kSharded };
  Kind kind = Kind::kReplicated;
  int64_t tokens = 0;  // true T
  int64_t padded = 0;  // T rounded up to a multiple of tp (sharded), else T
  int tp = 1;
  int rank = 0;

  static TokenLayout replicated(int64_t tokens);
  static TokenLayout sharded(int64_t tokens, int tp, int rank);

  bool is_sharded() const { return kind == Kind::kSharded; }
  // Rows this rank holds: T (replicated) or T_pad / tp (sharded).
  int64_t local_rows() const { return is_sharded() ? padded / tp : tokens; }
  // Global index of this rank's first row.
  int64_t first_row() const { return is_sharded() ? rank * local_rows() : 0; }
  // Throws InternalError unless x's token dimension is what this layout says this rank holds.
  void expect(const Tensor& x, const char* what) const;
};

// Sharded [T_pad/tp, W] → Replicated [T, W]: all-gather, then trim the padding rows using
// true_tokens (the positions tensor's length), which must equal the layout's T.
Tensor all_gather_trim(const Tensor& local, const TokenLayout& layout, int64_t true_tokens,
                       Communicator& comm, Allocator& alloc);

// Replicated partial sums [T, W] → Sharded [T_pad/tp, W] of the sums over ranks.
Tensor reduce_scatter_padded(const Tensor& partial, const TokenLayout& layout, Communicator& comm,
                             Allocator& alloc);

}  // namespace mls
