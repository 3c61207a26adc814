// DSA lightning-indexer selection (REFERENCE.md) for every query row of a step: for query t,
// score[t, j] = Σ_h w[t, h] · relu(q[t, h] · k[j] · scale) over key positions j <= q_pos[t] of
// its sequence; later positions are masked. Rows with fewer valid keys than topk list them all.
// Which of the keys tied with the k-th score a row keeps is set by TopkTieOrder. Keys are
// addressed as in attention.h (PagedKeys).
#pragma once

#include <vector>

#include "ops/attention.h"

namespace mls::ops {

// The rule that breaks exact ties at a row's top-k cut (ReLU zeros make them common).
enum class TopkTieOrder {
  // Larger score first, equal scores by lower key index, over the row's valid keys only: a
  // row's selection never depends on the keys after it, so a cached prefix's selections hold
  // for any continuation (prefix caching on DSA models). CPU and GPU alike.
  kServing,
  // PyTorch's CPU topk (cpu/torch_topk.h) over the reference's row: a prompt token's row spans
  // the whole prompt (row_len, masked keys −inf), so ties fall as in transformers and its
  // goldens are reproduced exactly. CPU only; for the conformance suite.
  kTorchReference,
};
// What serving runs; the conformance suite asks for kTorchReference explicitly.
inline constexpr TopkTieOrder kDefaultTopkTieOrder = TopkTieOrder::kServing;

namespace cpu {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, TopkTieOrder order,
                  Tensor& chosen);
// Per query row, whether an exact tie sits at its top-k cut: more than topk valid keys and the
// topk-th largest score equal to the next one, so that the tie order decides which keys are
// kept (the conformance suite counts these rows; scores as indexer_topk computes them).
std::vector<bool> indexer_ties_at_cut(const Tensor& q, const Tensor& k, const Tensor& w,
                                      const Tensor& q_pos, float scale, const PagedKeys& pages,
                                      int64_t topk);
}  // namespace cpu
namespace cuda {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  const Tensor& row_len, float scale, const PagedKeys& pages, TopkTieOrder order,
                  Tensor& chosen);
}

// q [T, Hi, Di], k [S or cache rows, Di], w [T, Hi] (weights_proj output, already × Hi^-0.5),
// q_pos and row_len i32 [T] → chosen i32 [T, topk], unused slots −1. row_len[t] (> q_pos[t]) is
// the reference's row length (the prompt length for a prompt token, else q_pos[t] + 1), read by
// kTorchReference only. kServing lists a row's keys in ascending index order, then −1s;
// kTorchReference in torch's order, with −1 where it ranked a masked position.
// Device scratch of one call: fp32 scores of a group of query rows (ops/scratch_sizes.h).
inline ScratchPlan indexer_topk_scratch(const Tensor& q, const Tensor& k, const PagedKeys& pages,
                                        const Tensor& chosen) {
  return {{{scratch::indexer_scratch_floats(q.dim(0), key_bound(pages, k.dim(0)), chosen.dim(1)),
            DType::kF32, MemTag::kActivation},
           {}}};
}

inline void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                         const Tensor& row_len, float scale, const PagedKeys& pages,
                         TopkTieOrder order, Tensor& chosen) {
  MLS_DISPATCH_SCRATCH(chosen, indexer_topk_scratch(q, k, pages, chosen), indexer_topk, q, k, w,
                       q_pos, row_len, scale, pages, order, chosen);
}

}  // namespace mls::ops
