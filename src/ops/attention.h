// Tiled softmax attention for one sequence: scores are produced one query row at a time, so no
// [heads × T × S] tensor ever exists. Covers both MLA formulations:
//   expanded (prefill):  q [T, H, Dk], k [S, H, Dk], v [S, H, Dv]
//   absorbed (decode):   q [T, H, Dk], k [S, 1, Dk], v [S, 1, Dv]   (one latent "head")
// Query t may attend to key j iff j <= q_pos[t] (keys are positions 0..S-1 of the sequence) and,
// with `allowed` [T, K] i32 (−1 = unused slot), j is listed in row t.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

struct AttentionArgs {
  float scale = 1.0f;
  const Tensor* allowed = nullptr;  // optional sparse index lists
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
