// Tiled softmax attention for one sequence: scores are produced one query row at a time, so no
// [heads × T × S] tensor ever exists. Covers both MLA formulations:
//   expanded:  q [T, H, Dk], k [S, H, Dk], v [S, H, Dv]
//   absorbed:  q [T, H, Dk], k [rows, 1, Dk], v [rows, 1, Dv]   (one latent "head")
// Keys are the sequence's positions 0..S-1. Position j lives in row j of k and v, or, with a
// block table (paged cache), in row block_table[j / block_size] · block_size + j % block_size,
// so attention reads the cache in place and needs no memory proportional to the context.
// Query t may attend to key j iff j <= q_pos[t] and, with `allowed` [T, K] i32 (−1 = unused
// slot), j is listed in row t.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

struct AttentionArgs {
  float scale = 1.0f;
  const Tensor* allowed = nullptr;  // optional sparse index lists
  // Paged key addressing (optional): the sequence's block table and its number of keys S.
  const int32_t* block_table = nullptr;
  int64_t block_size = 0;
  int64_t num_keys = 0;
};

namespace cpu {
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out);
}
namespace cuda {
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out);
}

inline void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
                      const AttentionArgs& args, Tensor& out) {
  MLS_DISPATCH(out, attention, q, k, v, q_pos, args, out);
}

}  // namespace mls::ops
