// The input of a block-FP8 linear, quantised: x [T, K] as e4m3 rows scratch::fp8_act_ld(K) bytes
// apart, then one f32 scale per token and 128-wide K group (scale = amax / 448, q = x / scale),
// the scales of the first scratch::fp8_cublaslt_lead(T, K) tokens laid out for cuBLASLt and the
// rest after them (ops/cuda/fp8_act_kernels.h): scratch::fp8_act_bytes(T, K) bytes in all.
//
// ops::linear quantises its input itself unless given these bytes (`xq`). The ops that produce a
// linear's input can write them on the way (ops::rms_norm, ops::add_rms_norm, ops::silu_mul:
// their `q`), which saves a launch and a pass over x per linear at decode. Only the GPU quantises
// activations (the CPU computes a block-FP8 linear in f32 from x itself), so only bf16
// activations have them.
#pragma once

#include "core/tensor.h"
#include "ops/contract.h"
#include "ops/scratch_sizes.h"

namespace mls::ops {

// The quantised input of block-FP8 linears of `w` for T rows of activations in `act`: allocated
// (tag activation) where activations are quantised (bf16, a GPU) and w is block-FP8; else an
// empty tensor, which every op taking one reads as "none".
inline Tensor fp8_input(int64_t T, const Tensor& w, DType act, Allocator& alloc) {
  if (w.dtype() != DType::kFP8E4M3 || act != DType::kBF16) return {};
  return Tensor::empty({scratch::fp8_act_bytes(T, w.dim(1))}, DType::kFP8E4M3, MemTag::kActivation,
                       alloc);
}

// q (defined) holds the quantised form of x [T, K]: bf16 x on a GPU, FP8 bytes
// fp8_act_bytes(T, K), contiguous, on c's device.
inline void fp8_input_contract(const Contract& c, const char* name, const Tensor& q,
                               const Tensor& x) {
  if (!q.defined()) return;
  c.need(c.gpu() && x.dtype() == DType::kBF16, name, q,
         "absent: only bf16 activations on a GPU are quantised (x is {})", x.str());
  c.need(q.dtype() == DType::kFP8E4M3 && q.ndim() == 1 && q.is_contiguous() &&
             q.numel() == scratch::fp8_act_bytes(x.dim(0), x.dim(1)),
         name, q, "contiguous FP8 bytes [{}] for x {}", scratch::fp8_act_bytes(x.dim(0), x.dim(1)),
         x.str());
  c.on_device(name, q);
}

}  // namespace mls::ops
