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
      ids.data<int32_t>()[t * ids.stride(0) + i * ids.stride(1)] = chosen[i];
      weights.data<float>()[t * weights.stride(0) + i * weights.stride(1)] =
          w * a.routed_scaling_factor;
    }
  }
}

void moe_align(const Tensor& ids, int64_t num_experts, Tensor& src_token, Tensor& dest_row,
               Tensor& offsets) {
  const int64_t T = ids.dim(0), K = ids.dim(1);
  // Pair i = (t, slot) of ids at any strides.
  const auto id = [&](int64_t i) {
    return ids.data<int32_t>()[i / K * ids.stride(0) + i % K * ids.stride(1)];
  };
  int32_t* off = offsets.data<int32_t>();
  std::fill(off, off + num_experts + 1, 0);
  for (int64_t i = 0; i < T * K; ++i) {
    if (id(i) < 0 || id(i) >= num_experts)
      raise<ShapeError>("moe_align: expert id {} outside {} experts", id(i), num_experts);
    ++off[id(i) + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) off[e + 1] += off[e];
  std::vector<int32_t> next(off, off + num_experts);
  for (int64_t i = 0; i < T * K; ++i) {  // (token, slot) order: stable within an expert
    const int32_t r = next[id(i)]++;
    src_token.data<int32_t>()[r] = static_cast<int32_t>(i / K);
    dest_row.data<int32_t>()[i] = r;
  }
}

void moe_unpermute(const Tensor& y, const Tensor& dest_row, const Tensor& weights, Tensor& out) {
  const int64_t T = out.dim(0), H = out.dim(1), K = dest_row.dim(1);
  for (int64_t t = 0; t < T; ++t) {
    float* o = out.data<float>() + t * out.stride(0);
    std::fill(o, o + H, 0.0f);
    for (int64_t i = 0; i < K; ++i) {
      const float wt = weights.data<float>()[t * weights.stride(0) + i * weights.stride(1)];
      const int32_t row = dest_row.data<int32_t>()[t * dest_row.stride(0) + i * dest_row.stride(1)];
      const float* src = y.data<float>() + row * y.stride(0);
      for (int64_t d = 0; d < H; ++d) o[d] += wt * src[d];
    }
  }
}

}  // namespace mls::ops::cpu
