#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/moe_routing.h"

namespace mls::ops::cuda {
namespace {

bool on_gpu(const Tensor& ref, const Tensor& t) {
  return !t.device().is_cpu() && t.device() == ref.device();
}

bool activation_dtype(DType t) {
  return t == DType::kBF16 || t == DType::kF32;
}

}  // namespace

void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
               Tensor& weights) {
  const int64_t T = logits.dim(0), E = logits.ndim() == 2 ? logits.dim(1) : 0;
  if (logits.ndim() != 2 || ids.ndim() != 2 || weights.ndim() != 2 || ids.dim(0) != T ||
      ids.dim(1) != a.top_k || weights.dim(0) != T || weights.dim(1) != a.top_k || a.top_k < 1 ||
      a.top_k > E || a.n_group < 1 || E % a.n_group != 0 || a.topk_group < 1 ||
      a.topk_group > a.n_group ||
      (bias.defined() && (bias.numel() != E || !bias.is_contiguous())) || !logits.is_contiguous())
    raise<ShapeError>("moe_route: logits {} bias {} ids {} weights {} top_k {} groups {}/{}",
                      logits.str(), bias.defined() ? bias.str() : "none", ids.str(), weights.str(),
                      a.top_k, a.topk_group, a.n_group);
  if (logits.dtype() != DType::kF32 || ids.dtype() != DType::kI32 ||
      weights.dtype() != DType::kF32 || (bias.defined() && bias.dtype() != DType::kF32))
    raise<ShapeError>("moe_route: logits {}, bias and weights {} must be f32, ids {} i32",
                      logits.str(), weights.str(), ids.str());
  if (!on_gpu(logits, logits) || !on_gpu(logits, ids) || !on_gpu(logits, weights) ||
      (bias.defined() && !on_gpu(logits, bias)))
    raise<ShapeError>("moe_route: logits on {}, ids on {}, weights on {}: all must be on one GPU",
                      logits.device().str(), ids.device().str(), weights.device().str());
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
  const int64_t T = ids.dim(0), K = ids.ndim() == 2 ? ids.dim(1) : 0;
  if (ids.ndim() != 2 || src_token.numel() != T * K || !(dest_row.shape() == ids.shape()) ||
      offsets.numel() != num_experts + 1 || !src_token.is_contiguous() ||
      !dest_row.is_contiguous() || !offsets.is_contiguous())
    raise<ShapeError>("moe_align: ids {} src_token {} dest_row {} offsets {} for {} experts",
                      ids.str(), src_token.str(), dest_row.str(), offsets.str(), num_experts);
  if (ids.dtype() != DType::kI32 || src_token.dtype() != DType::kI32 ||
      dest_row.dtype() != DType::kI32 || offsets.dtype() != DType::kI32)
    raise<ShapeError>("moe_align: ids {} src_token {} dest_row {} offsets {} must be i32",
                      ids.str(), src_token.str(), dest_row.str(), offsets.str());
  if (!on_gpu(ids, ids) || !on_gpu(ids, src_token) || !on_gpu(ids, dest_row) ||
      !on_gpu(ids, offsets))
    raise<ShapeError>(
        "moe_align: ids on {}, src_token on {}, dest_row on {}, offsets on {}: all "
        "must be on one GPU",
        ids.device().str(), src_token.device().str(), dest_row.device().str(),
        offsets.device().str());
  if (num_experts < 1 || num_experts > kernels::kMoeMaxExperts || T * K > kernels::kMoeMaxPairs)
    raise<Unsupported>("moe_align on the GPU: {} experts (1 to {}), {} pairs (at most {})",
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
  const int64_t T = out.dim(0), H = out.ndim() == 2 ? out.dim(1) : 0;
  if (out.ndim() != 2 || y.ndim() != 2 || y.dim(1) != H || dest_row.ndim() != 2 ||
      dest_row.dim(0) != T || !(weights.shape() == dest_row.shape()) || y.stride(1) != 1 ||
      out.stride(1) != 1)
    raise<ShapeError>("moe_unpermute: y {} dest_row {} weights {} out {} do not fit", y.str(),
                      dest_row.str(), weights.str(), out.str());
  if (!activation_dtype(y.dtype()) || !activation_dtype(out.dtype()) ||
      dest_row.dtype() != DType::kI32 || weights.dtype() != DType::kF32)
    raise<ShapeError>(
        "moe_unpermute: y {} and out {} must be bf16 or f32, dest_row {} i32, "
        "weights {} f32",
        y.str(), out.str(), dest_row.str(), weights.str());
  if (!on_gpu(out, out) || !on_gpu(out, y) || !on_gpu(out, dest_row) || !on_gpu(out, weights))
    raise<ShapeError>(
        "moe_unpermute: y on {}, dest_row on {}, weights on {}, out on {}: all "
        "must be on one GPU",
        y.device().str(), dest_row.device().str(), weights.device().str(), out.device().str());
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
