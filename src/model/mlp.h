// The gated MLP used by dense layers, shared experts and every routed expert:
// down(silu(gate(x)) * up(x)), no bias. With tensor parallelism the result is a partial sum.
#pragma once

#include "model/model_weights.h"

namespace mls {

// out [T, H] = MLP(x [T, H]); accumulate adds into out instead.
void mlp_forward(const MlpWeights& w, const Tensor& x, Tensor& out, Allocator& alloc,
                 bool accumulate = false);

}  // namespace mls
