#include "model/moe.h"

#include <cstring>
#include <vector>

#include "model/mlp.h"
#include "ops/linear.h"
#include "ops/moe_routing.h"

namespace mls {

void moe_forward(const io::ModelConfig& c, const LayerWeights& w, const Tensor& x, Tensor& out,
                 Allocator& alloc) {
  const auto act = MemTag::kActivation;
  const int64_t T = x.dim(0), H = c.hidden_size, E = c.n_routed_experts;
  const int64_t K = c.num_experts_per_tok;
  Tensor logits = Tensor::empty({T, E}, DType::kF32, act, alloc);
  ops::linear(x, w.router, logits);
  Tensor ids = Tensor::empty({T, K}, DType::kI32, act, alloc);
  Tensor weights = Tensor::empty({T, K}, DType::kF32, act, alloc);
  ops::RoutingArgs ra{static_cast<int>(c.n_group), static_cast<int>(c.topk_group),
                      static_cast<int>(K), c.norm_topk_prob,
                      static_cast<float>(c.routed_scaling_factor)};
  ops::moe_route(logits, w.router_bias, ra, ids, weights);

  // The busiest expert can take every token: gather and gate/up buffers are sized for T rows
  // once, so real runs and meta-mode traces allocate exactly the same bytes.
  const int64_t I = w.experts[0].gate.dim(0);
  Tensor xin = Tensor::empty({T, H}, DType::kF32, act, alloc);
  Tensor y = Tensor::empty({T, H}, DType::kF32, act, alloc);
  Tensor gate = Tensor::empty({T, I}, DType::kF32, act, alloc);
  Tensor up = Tensor::empty({T, I}, DType::kF32, act, alloc);
  if (out.raw()) std::memset(out.data<float>(), 0, out.nbytes());
  if (ids.raw()) {
    std::vector<std::vector<std::pair<int64_t, float>>> routed(E);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < K; ++i)
        routed[ids.data<int32_t>()[t * K + i]].push_back({t, weights.data<float>()[t * K + i]});
    for (int64_t e = 0; e < E; ++e) {
      const auto& list = routed[e];
      const int64_t n = static_cast<int64_t>(list.size());
      if (n == 0) continue;
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(xin.data<float>() + i * H, x.data<float>() + list[i].first * x.stride(0),
                    H * sizeof(float));
      Tensor ye = y.narrow(0, 0, n);
      mlp_forward_into(w.experts[e], xin.narrow(0, 0, n), ye, gate, up);
      for (int64_t i = 0; i < n; ++i) {
        float* dst = out.data<float>() + list[i].first * out.stride(0);
        const float* src = y.data<float>() + i * H;
        const float wt = list[i].second;
        for (int64_t d = 0; d < H; ++d) dst[d] += src[d] * wt;
      }
    }
  }
  if (c.n_shared_experts > 0) mlp_forward(w.shared, x, out, alloc, true);
}

}  // namespace mls
