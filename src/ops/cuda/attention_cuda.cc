#include <algorithm>

#include "core/cuda_context.h"
#include "ops/attention.h"
#include "ops/cuda/attention_kernels.h"
#include "ops/cuda/paged_keys_cuda.h"

namespace mls::ops::cuda {

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_pos,
               const AttentionArgs& args, Tensor& out) {
  const int64_t T = q.dim(0), H = q.dim(1), Dk = q.dim(2), Hk = k.dim(1), Dv = v.dim(2);
  kernels::AttentionParams p;
  p.q = q.raw();
  p.q_st = q.stride(0);
  p.q_sh = q.stride(1);
  p.k = k.raw();
  p.k_sr = k.stride(0);
  p.k_sh = k.stride(1);
  p.v = v.raw();
  p.v_sr = v.stride(0);
  p.v_sh = v.stride(1);
  p.out = out.raw();
  p.o_st = out.stride(0);
  p.o_sh = out.stride(1);
  p.q_pos = q_pos.data<int32_t>();
  p.num_rows = k.dim(0);
  p.T = static_cast<int>(T);
  p.H = static_cast<int>(H);
  p.Hk = static_cast<int>(Hk);
  p.Dk = static_cast<int>(Dk);
  p.Dv = static_cast<int>(Dv);
  p.scale = args.scale;
  p.batch_invariant = args.batch_invariant;
  if (const Tensor* a = args.allowed) {
    p.allowed = a->data<int32_t>();
    p.allowed_k = a->dim(1);
  }
  set_pages(args.pages, k.dim(0), p);
  if (T == 0) return;

  // The scratch of ops::attention_scratch; the kernel plans its splits from the same function.
  const int64_t floats =
      scratch::attention_splits(T, H, Hk, Dv, args.allowed ? p.allowed_k : p.key_bound,
                                args.allowed != nullptr, args.batch_invariant)
          .floats;
  Tensor partials;
  if (floats > 0)
    partials = Tensor::empty({floats}, DType::kF32, MemTag::kActivation, mls::cuda::allocator());
  mls::cuda::check(kernels::launch_attention(p, floats > 0 ? partials.data<float>() : nullptr,
                                             mls::cuda::stream()),
                   "attention");
}

}  // namespace mls::ops::cuda
