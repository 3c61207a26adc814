#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/moe_routing.h"

namespace mls::ops::cuda {

void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
               Tensor& weights) {
  const int64_t T = logits.dim(0), E = logits.dim(1);
  if (E > kernels::kMoeMaxExperts || a.top_k > kernels::kMoeMaxTopK ||
      a.n_group > kernels::kMoeMaxGroups)
    raise<Unsupported>("moe_route on the GPU: {} experts, top_k {}, {} groups (at most {}, {}, {})",
                       E, a.top_k, a.n_group, kernels::kMoeMaxExperts, kernels::kMoeMaxTopK,
                       kernels::kMoeMaxGroups);
  kernels::RouteArgs r{};
  r.logits = logits.data<float>();
  r.bias = bias.defined() ? bias.data<float>() : nullptr;
  r.T = T;
  r.E = static_cast<int>(E);
  r.n_group = a.n_group;
  r.topk_group = a.topk_group;
  r.top_k = a.top_k;
  r.norm_topk_prob = a.norm_topk_prob;
  r.scaling = a.routed_scaling_factor;
  r.ids = ids.data<int32_t>();
  r.ids_s0 = ids.stride(0);
  r.ids_s1 = ids.stride(1);
  r.weights = weights.data<float>();
  r.w_s0 = weights.stride(0);
  r.w_s1 = weights.stride(1);
  mls::cuda::check(kernels::launch_moe_route(r, mls::cuda::stream()), "moe_route");
}

void moe_align(const Tensor& ids, int64_t num_experts, Tensor& src_token, Tensor& dest_row,
               Tensor& offsets) {
  const int64_t T = ids.dim(0), K = ids.dim(1);
  if (num_experts > kernels::kMoeMaxExperts || T * K > kernels::kMoeMaxPairs)
    raise<Unsupported>("moe_align on the GPU: {} experts (at most {}), {} pairs (at most {})",
                       num_experts, kernels::kMoeMaxExperts, T * K, kernels::kMoeMaxPairs);
  const int E = static_cast<int>(num_experts);
  const int64_t ints = scratch::moe_align_ints(T * K, E);
  Tensor ws;
  if (ints > 0) ws = Tensor::empty({ints}, DType::kI32, MemTag::kWorkspace, mls::cuda::allocator());
  mls::cuda::check(kernels::launch_moe_align(
                       ids.data<int32_t>(), T, static_cast<int>(K), ids.stride(0), ids.stride(1), E,
                       src_token.data<int32_t>(), dest_row.data<int32_t>(), offsets.data<int32_t>(),
                       ints > 0 ? ws.raw() : nullptr, mls::cuda::stream()),
                   "moe_align");
}

void moe_unpermute(const Tensor& y, const Tensor& dest_row, const Tensor& weights, Tensor& out) {
  const int64_t T = out.dim(0), H = out.dim(1);
  if (dest_row.dim(1) > INT32_MAX)
    raise<Unsupported>("moe_unpermute: {} slots per token", dest_row.dim(1));
  kernels::UnpermuteArgs a{};
  a.y = y.raw();
  a.y_dtype = y.dtype();
  a.y_rows = y.dim(0);
  a.y_stride = y.stride(0);
  a.dest_row = dest_row.data<int32_t>();
  a.d_s0 = dest_row.stride(0);
  a.d_s1 = dest_row.stride(1);
  a.weights = weights.data<float>();
  a.w_s0 = weights.stride(0);
  a.w_s1 = weights.stride(1);
  a.out = out.raw();
  a.out_dtype = out.dtype();
  a.out_stride = out.stride(0);
  a.T = T;
  a.H = H;
  a.k = static_cast<int>(dest_row.dim(1));
  mls::cuda::check(kernels::launch_moe_unpermute(a, mls::cuda::stream()), "moe_unpermute");
}

}  // namespace mls::ops::cuda
