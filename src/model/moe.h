// Mixture of experts (REFERENCE.md "MoE routing"): route, run each chosen expert on its tokens
// in ascending expert id, weight and sum, then add the shared experts.
#pragma once

#include "model/model_weights.h"

namespace mls {

// out [T, H] = MoE(x [T, H]) (a partial sum under tensor parallelism).
void moe_forward(const io::ModelConfig& c, const LayerWeights& w, const Tensor& x, Tensor& out,
                 Allocator& alloc);

}  // namespace mls
