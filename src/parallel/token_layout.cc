#include "parallel/token_layout.h"

#include "core/error.h"
#include "ops/copy.h"

namespace mls {

TokenLayout TokenLayout::replicated(int64_t tokens) {
  return {Kind::kReplicated, tokens, tokens, 1, 0};
}

TokenLayout TokenLayout::sharded(int64_t tokens, int tp, int rank) {
  if (tp < 1 || rank < 0 || rank >= tp)
    raise<InternalError>("sharded layout for rank {} of {}", rank, tp);
  const int64_t padded = (tokens + tp - 1) / tp * tp;
  return {Kind::kSharded, tokens, padded, tp, rank};
}

void TokenLayout::expect(const Tensor& x, const char* what) const {
  if (x.dim(0) != local_rows())
    raise<InternalError>(
        "{}: token dimension {} but the {} layout of T={} (padded {}, tp={}) "
        "holds {} rows on rank {}",
        what, x.dim(0), is_sharded() ? "sharded" : "replicated", tokens, padded, tp, local_rows(),
        rank);
}

Tensor all_gather_trim(const Tensor& local, const TokenLayout& layout, int64_t true_tokens,
                       Communicator& comm, Allocator& alloc) {
  if (true_tokens != layout.tokens)
    raise<InternalError>("all_gather_trim: positions hold {} tokens but the layout says {}",
                         true_tokens, layout.tokens);
  layout.expect(local, "all_gather_trim input");
  if (!layout.is_sharded()) return local;
  const int64_t w = local.dim(1);
  Tensor in = local;
  if (!local.is_contiguous()) {
    in = Tensor::empty({local.dim(0), w}, local.dtype(), MemTag::kActivation, alloc);
    ops::copy(local, in);
  }
  Tensor full = Tensor::empty({layout.padded, w}, local.dtype(), MemTag::kActivation, alloc);
  if (full.raw()) comm.all_gather(in, full);
  return full.narrow(0, 0, true_tokens);
}

Tensor reduce_scatter_padded(const Tensor& partial, const TokenLayout& layout, Communicator& comm,
                             Allocator& alloc) {
  if (partial.dim(0) != layout.tokens || !partial.is_contiguous())
    raise<InternalError>("reduce_scatter_padded: partial {} for T={}", partial.str(),
                         layout.tokens);
  const int64_t w = partial.dim(1);
  Tensor padded = partial;
  if (layout.padded != layout.tokens) {
    padded = Tensor::zeros({layout.padded, w}, partial.dtype(), MemTag::kActivation, alloc);
    Tensor head = padded.narrow(0, 0, layout.tokens);
    ops::copy(partial, head);
  }
  Tensor out = Tensor::empty({layout.local_rows(), w}, partial.dtype(), MemTag::kActivation, alloc);
  // In meta mode too: the communicator traces its scratch (parallel/collective_scratch.h).
  comm.reduce_scatter(padded, out);
  return out;
}

}  // namespace mls
