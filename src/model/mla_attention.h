// Multi-head Latent Attention of one layer over the paged cache (REFERENCE.md "MLA attention"),
// in the absorbed form for every token: kv_b_proj's key half is folded into the query
// (q_nope · W_UK) and its value half applied after the weighted sum (· W_UVᵀ), so scores are
// taken against the cached latent [c, k_rot] read in place through the block table. Memory is
// O(new tokens), never O(context): the profiled worst case covers any cached context length.
#pragma once

#include "model/kv_cache.h"
#include "model/model_weights.h"
#include "model/step_context.h"

namespace mls {

class MlaAttention {
 public:
  MlaAttention(const io::ModelConfig& c, const ModelConstants& k, int64_t layer)
      : c_(c), k_(k), layer_(layer) {}

  // Step 1: from the fused replicated projection `a` [N, Wa] (see FusedAColumns):
  // q_a_layernorm, q_b_proj, kv_a_layernorm, the cache row's RoPE and write. Returns q (local
  // heads [N, nh, dq], its rotary part not yet rotated: attend rotates it into the latent query)
  // and, on a layer that owns a DSA indexer, its queries index_q [N, hi·di]
  // (the indexer's wq_b of q_a_layernorm's output, computed beside q_b_proj: one input, so one
  // ops::linear_pair). Without q_lora, q = q_proj(h) and h must be replicated.
  void project(const LayerWeights& w, const StepContext& step, Tensor& latent_cache,
               const Tensor& a, const Tensor& h, Tensor& q, Tensor& index_q) const;
  // Step 2: attention over the cache (restricted to the DSA indexer's `chosen` [N, topk] when
  // defined), then o_proj.
  Tensor attend(const LayerWeights& w, const StepContext& step, const Tensor& latent_cache,
                const Tensor& q, const Tensor& chosen) const;

 private:
  const io::ModelConfig& c_;
  const ModelConstants& k_;
  int64_t layer_;
};

}  // namespace mls
