// DSA lightning-indexer selection for one sequence (REFERENCE.md): for each query t,
// score[t, j] = Σ_h w[t, h] · relu(q[t, h] · k[j] · scale) over keys j <= q_pos[t]; keys past
// q_pos[t] are masked. The reference scores a prompt in one pass, so a prompt token's row spans
// the whole prompt (prompt_len keys, the future ones masked) and a generated token's row its
// own prefix; the top min(topk, row length) of that row are chosen with the reference's tie
// order. Taking the row length from the prompt, not from this step's keys, keeps the choice
// independent of how a prompt is chunked. Rows with fewer valid keys than topk list them all.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

// Where key position j lives: row j of k, or with a block table (paged cache) row
// block_table[j / block_size] · block_size + j % block_size; num_keys = S.
struct KeyPages {
  const int32_t* block_table = nullptr;
  int64_t block_size = 0;
  int64_t num_keys = 0;
};

namespace cpu {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  int64_t prompt_len, float scale, const KeyPages& pages, Tensor& chosen);
}
namespace cuda {
void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                  int64_t prompt_len, float scale, const KeyPages& pages, Tensor& chosen);
}

// q [T, Hi, Di], k [S or cache rows, Di], w [T, Hi] (weights_proj output, already × Hi^-0.5), q_pos
// i32 [T] → chosen i32 [T, topk], unused slots −1.
inline void indexer_topk(const Tensor& q, const Tensor& k, const Tensor& w, const Tensor& q_pos,
                         int64_t prompt_len, float scale, const KeyPages& pages, Tensor& chosen) {
  MLS_DISPATCH(chosen, indexer_topk, q, k, w, q_pos, prompt_len, scale, pages, chosen);
}

}  // namespace mls::ops
