// One decoder layer: h = x + Attn(RMSNorm(x)); out = h + MLP(RMSNorm(h)). Under tensor
// parallelism the attention and MLP outputs are partial sums that are reduced here: the
// decoder layer is the only place where token layouts change.
#pragma once

#include "model/kv_cache.h"
#include "model/mla_attention.h"
#include "model/model_weights.h"
#include "model/step_context.h"

namespace mls {

// x [N, H] is updated in place. `chosen` carries the DSA indexer's selection from the last
// full layer to following shared layers.
void decoder_layer_forward(const io::ModelConfig& c, const ModelConstants& k,
                           const ParallelContext& par, int64_t layer, const LayerWeights& w,
                           const StepContext& step, KvCache& kv, Tensor& x,
                           ChosenIndices& chosen);

}  // namespace mls
