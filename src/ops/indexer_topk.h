// DSA lightning-indexer selection (REFERENCE.md) for every query row of a step: for query t,
// score[t, j] = Σ_h w[t, h] · relu(q[t, h] · k[j] · scale) over key positions j <= q_pos[t] of
// its sequence; later positions are masked. The reference scores a prompt in one pass, so a
// prompt token's row spans the whole prompt and a generated token's row its own prefix:
// row_len[t] gives that length (prompt length, or q_pos[t] + 1), and the top min(topk,
// row_len[t]) of the row are chosen with the reference's tie order. Taking the row length from
// the prompt, not from this step's keys, keeps the choice independent of how a prompt is
// chunked. Rows with fewer valid keys than topk list them all. Keys are addressed as in
// attention.h (PagedKeys).
#pragma once

#include "ops/attention.h"

namespace mls::ops {

namespace cpu {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, Tensor& chosen);
}
namespace cuda {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, Tensor& chosen);
}

// q [T, Hi, Di], k [S or cache rows, Di], w [T, Hi] (weights_proj output, already × Hi^-0.5),
// q_pos and row_len i32 [T] → chosen i32 [T, topk] (ascending score rank), unused slots −1.
// Device scratch of one call: fp32 scores of a group of query rows (ops/scratch_sizes.h).
inline ScratchPlan indexer_topk_scratch(const Tensor& q, const Tensor& k, const PagedKeys& pages,
                                        const Tensor& chosen) {
  return {{{scratch::indexer_scratch_floats(q.dim(0), key_bound(pages, k.dim(0)), chosen.dim(1)),
            DType::kF32, MemTag::kActivation},
           {}}};
}

inline void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                         const Tensor& row_len, float scale, const PagedKeys& pages,
                         Tensor& chosen) {
  MLS_DISPATCH_SCRATCH(chosen, indexer_topk_scratch(q, k, pages, chosen), indexer_topk, q, k, w,
                       q_pos, row_len, scale, pages, chosen);
}

}  // namespace mls::ops
