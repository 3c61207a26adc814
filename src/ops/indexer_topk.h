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
// The score kernels indexer_topk picks between by the step (tests compare them bitwise on the
// same rows): one query row a CTA (decode) or CTAs of consecutive rows sharing staged keys.
enum class IndexerScoreKernel { kOneToken, kTokenGroups };
// indexer_topk's fp32 scores alone, by `kernel`: scores f32 [T, >= key bound] on the GPU with
// unit inner stride; row t gets query t's valid positions, the rest is left as it was.
void indexer_scores(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                    const Tensor& row_len, float scale, const PagedKeys& pages,
                    IndexerScoreKernel kernel, Tensor& scores);
}  // namespace cuda

// q [T, Hi, Di], k [S or cache rows, Di], w [T, Hi] (weights_proj output, already × Hi^-0.5),
// scale > 0 (Di^-0.5: the GPU kernels take it into the head weights, w · relu(x · scale) =
// (w · scale) · relu(x)), q_pos and row_len i32 [T] → chosen i32 [T, topk], unused slots −1.
// row_len[t] (> q_pos[t]) is the reference's row length (the prompt length for a prompt token,
// else q_pos[t] + 1), read by kTorchReference only. kServing lists a row's keys in ascending
// index order, then −1s; kTorchReference in torch's order, with −1 where it ranked a masked
// position.
// The inputs' part, for T rows (indexer_ties_at_cut has no output): q [T, Hi, Di], k [rows, Di],
// w [T, Hi] with unit inner strides, q_pos contiguous i32 [T], paged keys as attention's, all on
// `out`'s device. CPU: f32; GPU: q and k bf16, w bf16 or f32.
inline void indexer_inputs_contract(const Contract& c, const Tensor& q, const Tensor& k,
                                    const Tensor& w, const Tensor& q_pos, float scale,
                                    const PagedKeys& pages, int64_t T) {
  c.positive("scale", scale);
  c.rows("q", q, 3);
  c.need(q.dim(0) == T, "q", q, "{} rows", T);
  c.rows("k", k, 2);
  c.need(k.dim(1) == q.dim(2), "k", k, "[rows, {}]", q.dim(2));
  c.rows("w", w, 2);
  c.need(w.dim(0) == T && w.dim(1) == q.dim(1), "w", w, "[{}, {}]", T, q.dim(1));
  c.index("q_pos", q_pos, T);
  paged_keys_contract(c, pages, T);
  c.activation("q", q, false);
  c.activation("k", k, false);
  c.activation("w", w);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"w", &w}})
    c.on_device(name, *t);
}
// And row_len contiguous i32 [T], chosen contiguous i32 [T, topk].
inline void indexer_topk_contract(const Tensor& q, const Tensor& k, const Tensor& w,
                                  const Tensor& q_pos, const Tensor& row_len, float scale,
                                  const PagedKeys& pages, TopkTieOrder, const Tensor& chosen) {
  const Contract c("indexer_topk", chosen);
  c.need(chosen.ndim() == 2 && chosen.is_contiguous(), "chosen", chosen, "contiguous [T, topk]");
  c.dtype("chosen", chosen, {DType::kI32});
  indexer_inputs_contract(c, q, k, w, q_pos, scale, pages, chosen.dim(0));
  c.index("row_len", row_len, chosen.dim(0));
}

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
