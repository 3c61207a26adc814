#include "model/mlp.h"

#include "ops/elementwise.h"
#include "ops/linear.h"

namespace mls {

void mlp_forward(const MlpWeights& w, const Tensor& x, Tensor& out, Allocator& alloc,
                 bool accumulate) {
  const int64_t T = x.dim(0), I = w.gate.dim(0);
  Tensor gate = Tensor::empty({T, I}, DType::kF32, MemTag::kActivation, alloc);
  Tensor up = Tensor::empty({T, I}, DType::kF32, MemTag::kActivation, alloc);
  ops::linear(x, w.gate, gate);
  ops::linear(x, w.up, up);
  ops::silu_mul(gate, up, gate);
  ops::linear(gate, w.down, out, accumulate);
}

}  // namespace mls
