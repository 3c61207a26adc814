// The gated MLP used by dense layers, shared experts and every routed expert:
// down(silu(gate(x)) * up(x)), no bias. With tensor parallelism the result is a partial sum.
#pragma once

#include "model/model_weights.h"

namespace mls {

// out [T, H] = MLP(x [T, H]), using caller-provided gate/up buffers of at least [T, I] rows
// (views are fine); accumulate adds into out instead.
void mlp_forward_into(const MlpWeights& w, const Tensor& x, Tensor& out, Tensor gate, Tensor up,
                      bool accumulate = false);

// Same, allocating the gate/up buffers (tag activation).
void mlp_forward(const MlpWeights& w, const Tensor& x, Tensor& out, Allocator& alloc,
                 bool accumulate = false);

}  // namespace mls
