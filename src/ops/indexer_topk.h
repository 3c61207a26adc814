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
inline void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                         const Tensor& row_len, float scale, const PagedKeys& pages,
                         Tensor& chosen) {
  MLS_DISPATCH(chosen, indexer_topk, q, k, w, q_pos, row_len, scale, pages, chosen);
}

#ifdef MLASERVE_CUDA
namespace cuda {
int64_t indexer_topk_scratch_bytes(int64_t T, int64_t max_keys, int64_t topk);
}
#endif
// Bytes of device scratch one indexer_topk call takes (see attention_scratch_bytes).
inline int64_t indexer_topk_scratch_bytes(Device device, int64_t T, int64_t max_keys,
                                          int64_t topk) {
#ifdef MLASERVE_CUDA
  if (!device.is_cpu()) return cuda::indexer_topk_scratch_bytes(T, max_keys, topk);
#endif
  (void)device, (void)T, (void)max_keys, (void)topk;
  return 0;
}

}  // namespace mls::ops
