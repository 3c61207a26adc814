#include "model/mlp.h"

#include "ops/elementwise.h"
#include "ops/fp8_input.h"
#include "ops/linear.h"

namespace mls {

void mlp_forward_into(const MlpWeights& w, const Tensor& x, Tensor& out, Tensor gate, Tensor up,
                      bool accumulate, const Tensor& xq, Tensor down_q) {
  const int64_t T = x.dim(0);
  gate = gate.narrow(0, 0, T);
  up = up.narrow(0, 0, T);
  ops::linear_pair(x, w.gate, gate, w.up, up, xq);
  ops::silu_mul(gate, up, gate, &down_q);
  ops::linear(gate, w.down, out, accumulate, down_q);
}

void mlp_forward(const MlpWeights& w, const Tensor& x, Tensor& out, Allocator& alloc,
                 bool accumulate, const Tensor& xq) {
  const int64_t T = x.dim(0), I = w.gate.dim(0);
  const DType dt = x.dtype();
  const auto act = MemTag::kActivation;
  Tensor gate = Tensor::empty({T, I}, dt, act, alloc), up = Tensor::empty({T, I}, dt, act, alloc);
  mlp_forward_into(w, x, out, gate, up, accumulate, xq, ops::fp8_input(T, w.down, dt, alloc));
}

}  // namespace mls
