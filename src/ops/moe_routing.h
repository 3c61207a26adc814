// DeepSeek-V3 style routing (REFERENCE.md "MoE routing"): sigmoid scores, biased selection
// within the best groups, unbiased (optionally normalised, then scaled) weights.
#pragma once

#include <utility>

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

inline void moe_route_contract(const Tensor& logits, const Tensor& bias, const RoutingArgs& a,
                               const Tensor& ids, const Tensor& weights) {
  const Contract c("moe_route", weights);
  c.need(logits.ndim() == 2 && logits.is_contiguous(), "logits", logits, "contiguous [T, E]");
  const int64_t T = logits.dim(0), E = logits.dim(1);
  c.need(a.top_k >= 1 && a.top_k <= E && a.n_group >= 1 && E % a.n_group == 0 &&
             a.topk_group >= 1 && a.topk_group <= a.n_group,
         "logits", logits, "[T, E] routed by top_k {} in 1..E and {} of {} groups dividing E",
         a.top_k, a.topk_group, a.n_group);
  c.need(ids.ndim() == 2 && ids.dim(0) == T && ids.dim(1) == a.top_k, "ids", ids, "[{}, {}]", T,
         a.top_k);
  c.need(weights.ndim() == 2 && weights.dim(0) == T && weights.dim(1) == a.top_k, "weights",
         weights, "[{}, {}]", T, a.top_k);
  c.dtype("logits", logits, {DType::kF32});
  c.dtype("ids", ids, {DType::kI32});
  c.dtype("weights", weights, {DType::kF32});
  c.on_device("logits", logits);
  c.on_device("ids", ids);
  if (!bias.defined()) return;
  c.need(bias.numel() == E && bias.is_contiguous(), "bias", bias, "contiguous with {} elements", E);
  c.dtype("bias", bias, {DType::kF32});
  c.on_device("bias", bias);
}

// logits [T, E] f32, bias [E] f32 (may be undefined: no correction) → ids [T, k] i32 (chosen
// experts, in no particular order), weights [T, k] f32.
inline void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
                      Tensor& weights) {
  MLS_DISPATCH(weights, moe_route, logits, bias, a, ids, weights);
}

// ids i32 [T, k] (any strides); src_token, dest_row (ids' shape) and offsets contiguous i32, one
// device.
inline void moe_align_contract(const Tensor& ids, int64_t num_experts, const Tensor& src_token,
                               const Tensor& dest_row, const Tensor& offsets) {
  const Contract c("moe_align", offsets);
  c.need(ids.ndim() == 2, "ids", ids, "[T, k]");
  c.dtype("ids", ids, {DType::kI32});
  c.on_device("ids", ids);
  c.index("src_token", src_token, ids.numel());
  c.index("dest_row", dest_row, -1);
  c.need(dest_row.shape() == ids.shape(), "dest_row", dest_row, "ids' shape {}", ids.shape().str());
  c.need(num_experts >= 1, "offsets", offsets, "for at least one expert, not {}", num_experts);
  c.index("offsets", offsets, num_experts + 1);
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
// y [rows, H] and out [T, H] with unit inner stride; dest_row i32 and weights f32 [T, k] (any
// strides); one device.
inline void moe_unpermute_contract(const Tensor& y, const Tensor& dest_row, const Tensor& weights,
                                   const Tensor& out) {
  const Contract c("moe_unpermute", out);
  c.rows("out", out, 2);
  c.rows("y", y, 2);
  c.need(y.dim(1) == out.dim(1), "y", y, "[rows, {}]", out.dim(1));
  c.need(dest_row.ndim() == 2 && dest_row.dim(0) == out.dim(0), "dest_row", dest_row, "[{}, k]",
         out.dim(0));
  c.need(weights.shape() == dest_row.shape(), "weights", weights, "dest_row's shape {}",
         dest_row.shape().str());
  c.activation("y", y);
  c.activation("out", out);
  c.dtype("dest_row", dest_row, {DType::kI32});
  c.dtype("weights", weights, {DType::kF32});
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"y", &y},
                                {"dest_row", &dest_row},
                                {"weights", &weights}})
    c.on_device(name, *t);
  c.disjoint("out", out, "y", y);
}

// out[t] = Σ_i weights[t, i] · y[dest_row[t, i]] (summed in slot order i, fp32): y [T·k, H].
inline void moe_unpermute(const Tensor& y, const Tensor& dest_row, const Tensor& weights,
                          Tensor& out) {
  MLS_DISPATCH(out, moe_unpermute, y, dest_row, weights, out);
}

}  // namespace mls::ops
