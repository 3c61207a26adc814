// The gated MLP used by dense layers, shared experts and every routed expert:
// down(silu(gate(x)) * up(x)), no bias. With tensor parallelism the result is a partial sum.
#pragma once

#include "model/model_weights.h"

namespace mls {

// out [T, H] = MLP(x [T, H]), using caller-provided gate/up buffers of at least [T, I] rows
// (views are fine); accumulate adds into out instead. xq: x quantised for the gate and up
// weights, and down_q: the buffer the down projection's input is quantised into
// (ops::fp8_input), each empty where there is none.
void mlp_forward_into(const MlpWeights& w, const Tensor& x, Tensor& out, Tensor gate, Tensor up,
                      bool accumulate = false, const Tensor& xq = {}, Tensor down_q = {});

// Same, allocating the gate/up buffers and down_q (tag activation).
void mlp_forward(const MlpWeights& w, const Tensor& x, Tensor& out, Allocator& alloc,
                 bool accumulate = false, const Tensor& xq = {});

}  // namespace mls
