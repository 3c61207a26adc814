#include "model/mlp.h"

#include "ops/elementwise.h"
#include "ops/linear.h"

namespace mls {

void mlp_forward_into(const MlpWeights& w, const Tensor& x, Tensor& out, Tensor gate, Tensor up,
                      bool accumulate) {
  const int64_t T = x.dim(0);
  gate = gate.narrow(0, 0, T);
  up = up.narrow(0, 0, T);
  ops::linear_pair(x, w.gate, gate, w.up, up);
  ops::silu_mul(gate, up, gate);
  ops::linear(gate, w.down, out, accumulate);
}

void mlp_forward(const MlpWeights& w, const Tensor& x, Tensor& out, Allocator& alloc,
                 bool accumulate) {
  const int64_t T = x.dim(0), I = w.gate.dim(0);
  const DType dt = x.dtype();
  mlp_forward_into(w, x, out, Tensor::empty({T, I}, dt, MemTag::kActivation, alloc),
                   Tensor::empty({T, I}, dt, MemTag::kActivation, alloc), accumulate);
}

}  // namespace mls
