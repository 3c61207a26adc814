// DSA lightning indexer of one layer (REFERENCE.md): scores every visible cached key for each
// new token and keeps the top index_topk, which restrict that layer's (and the following
// "shared" layers') attention.
#pragma once

#include "model/kv_cache.h"
#include "model/model_weights.h"
#include "model/step_context.h"

namespace mls {

// a: the fused replicated projection [N, Wa] (holding wk and weights_proj outputs); q: the
// indexer's queries [N, hi·di] before RoPE (wq_b of q_a_layernorm's output, from
// MlaAttention::project), rotated here in place. Writes the new tokens' indexer keys into the cache
// and returns, per sequence, chosen i32 [num_new, topk].
Tensor dsa_indexer(const io::ModelConfig& c, const ModelConstants& k, int64_t layer,
                   const LayerWeights& w, const StepContext& step, Tensor& index_cache,
                   const Tensor& a, Tensor& q);

}  // namespace mls
