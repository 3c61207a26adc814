// DeepSeek-V3 style routing (REFERENCE.md "MoE routing"): sigmoid scores, biased selection
// within the best groups, unbiased (optionally normalised, then scaled) weights.
#pragma once

#include "ops/dispatch.h"

namespace mls::ops {

struct RoutingArgs {
  int n_group = 1;
  int topk_group = 1;
  int top_k = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

namespace cpu {
void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
               Tensor& weights);
}
namespace cuda {
void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
               Tensor& weights);
}

// logits [T, E] f32, bias [E] f32 (may be undefined: no correction) → ids [T, k] i32 (chosen
// experts, in no particular order), weights [T, k] f32.
inline void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
                      Tensor& weights) {
  MLS_DISPATCH(weights, moe_route, logits, bias, a, ids, weights);
}

}  // namespace mls::ops
