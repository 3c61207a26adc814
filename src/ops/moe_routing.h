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
void moe_align(const Tensor& ids, int64_t num_experts, Tensor& src_token, Tensor& dest_row,
               Tensor& offsets);
void moe_unpermute(const Tensor& y, const Tensor& dest_row, const Tensor& weights, Tensor& out);
}  // namespace cpu
namespace cuda {
void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
               Tensor& weights);
void moe_align(const Tensor& ids, int64_t num_experts, Tensor& src_token, Tensor& dest_row,
               Tensor& offsets);
void moe_unpermute(const Tensor& y, const Tensor& dest_row, const Tensor& weights, Tensor& out);
}  // namespace cuda

// logits [T, E] f32, bias [E] f32 (may be undefined: no correction) → ids [T, k] i32 (chosen
// experts, in no particular order), weights [T, k] f32.
inline void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
                      Tensor& weights) {
  MLS_DISPATCH(weights, moe_route, logits, bias, a, ids, weights);
}

// Groups the T·k (token, slot) pairs by expert, stably (ascending expert id, then token, then
// slot): permuted row r holds token src_token[r] (i32 [T·k]); pair (t, i) went to row
// dest_row[t, i] (i32 [T, k]); expert e owns rows [offsets[e], offsets[e + 1]) (i32 [E + 1]).
inline void moe_align(const Tensor& ids, int64_t num_experts, Tensor& src_token, Tensor& dest_row,
                      Tensor& offsets) {
  MLS_DISPATCH_SCRATCH(
      offsets,
      (ScratchPlan{{{scratch::moe_align_ints(ids.numel(), static_cast<int>(num_experts)),
                     DType::kI32, MemTag::kWorkspace},
                    {}}}),
      moe_align, ids, num_experts, src_token, dest_row, offsets);
}
// out[t] = Σ_i weights[t, i] · y[dest_row[t, i]] (summed in slot order i, fp32): y [T·k, H].
inline void moe_unpermute(const Tensor& y, const Tensor& dest_row, const Tensor& weights,
                          Tensor& out) {
  MLS_DISPATCH(out, moe_unpermute, y, dest_row, weights, out);
}

}  // namespace mls::ops
