#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/torch_topk.h"
#include "ops/moe_routing.h"

namespace mls::ops::cpu {

// Indices of the k largest values, chosen as torch's CPU topk chooses them (ties included).
static void top_k(const std::vector<float>& v, int k, std::vector<std::pair<float, int32_t>>& q,
                  std::vector<int>& idx) {
  q.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) q[i] = {v[i], static_cast<int32_t>(i)};
  torch_topk(q, k);
  idx.resize(k);
  for (int i = 0; i < k; ++i) idx[i] = q[i].second;
}

void moe_route(const Tensor& logits, const Tensor& bias, const RoutingArgs& a, Tensor& ids,
               Tensor& weights) {
  const int64_t T = logits.dim(0), E = logits.dim(1);
  if (logits.ndim() != 2 || ids.dim(0) != T || ids.dim(1) != a.top_k || weights.dim(0) != T ||
      weights.dim(1) != a.top_k || a.top_k > E || E % a.n_group != 0 || a.topk_group > a.n_group ||
      (bias.defined() && bias.numel() != E) || !logits.is_contiguous())
    raise<ShapeError>("moe_route: logits {} bias {} ids {} weights {} top_k {} groups {}/{}",
                      logits.str(), bias.defined() ? bias.str() : "none", ids.str(), weights.str(),
                      a.top_k, a.topk_group, a.n_group);
  const int64_t per_group = E / a.n_group;
  std::vector<float> s(E), sc(E), group_score(a.n_group), tmp;
  std::vector<int> chosen, groups, best2;
  std::vector<std::pair<float, int32_t>> queue;
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.data<float>() + t * E;
    for (int64_t e = 0; e < E; ++e) {
      s[e] = 1.0f / (1.0f + std::exp(-l[e]));
      sc[e] = s[e] + (bias.defined() ? bias.data<float>()[e] : 0.0f);
    }
    if (a.n_group > 1) {
      for (int g = 0; g < a.n_group; ++g) {
        tmp.assign(sc.begin() + g * per_group, sc.begin() + (g + 1) * per_group);
        const int n = static_cast<int>(std::min<int64_t>(2, per_group));
        top_k(tmp, n, queue, best2);
        group_score[g] = 0;
        for (int i : best2) group_score[g] += tmp[i];
      }
      top_k(group_score, a.topk_group, queue, groups);
      std::vector<bool> keep(a.n_group, false);
      for (int g : groups) keep[g] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!keep[e / per_group]) sc[e] = -std::numeric_limits<float>::infinity();
    }
    top_k(sc, a.top_k, queue, chosen);
    float sum = 0;
    for (int i = 0; i < a.top_k; ++i) sum += s[chosen[i]];
    for (int i = 0; i < a.top_k; ++i) {
      float w = s[chosen[i]];
      if (a.norm_topk_prob) w /= (sum + 1e-20f);
      ids.data<int32_t>()[t * a.top_k + i] = chosen[i];
      weights.data<float>()[t * a.top_k + i] = w * a.routed_scaling_factor;
    }
  }
}

}  // namespace mls::ops::cpu
