// Mixture of experts (REFERENCE.md "MoE routing"): route, run each chosen expert on its tokens
// in ascending expert id, weight and sum, then add the shared experts.
#pragma once

#include "model/model_weights.h"
#include "model/step_context.h"

namespace mls {

// out [T, H] = MoE(x [T, H]) (a partial sum under tensor parallelism). An observer sees the
// router's logits (f32 [T, E]) as "layer.{layer}.router_logits": tests explain a routing
// choice with them. xq: x quantised for the shared experts' gate and up (ops::fp8_input), or
// empty.
void moe_forward(const io::ModelConfig& c, const LayerWeights& w, const Tensor& x, Tensor& out,
                 Allocator& alloc, const ForwardObserver& observer = nullptr, int64_t layer = -1,
                 const Tensor& xq = {});

}  // namespace mls
