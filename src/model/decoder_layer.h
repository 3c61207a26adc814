// One decoder layer: h = x + Attn(RMSNorm(x)); out = h + MLP(RMSNorm(h)). This is the only
// place where token layouts change (parallel/token_layout.h):
//   - The residual stream x is in `layout`: Replicated, or Sharded under sequence parallelism.
//   - The fused replicated projection (q_a + kv_a + indexer wk + weights_proj) runs on the rows
//     this rank holds; its narrow output is all-gathered and trimmed to T (project, then gather).
//   - Attention and MLP outputs are partial sums over ranks: all-reduced (Replicated) or
//     reduce-scattered back into the shard (Sharded). The MLP input is gathered first.
#pragma once

#include "model/kv_cache.h"
#include "model/mla_attention.h"
#include "model/model_weights.h"
#include "model/step_context.h"
#include "parallel/token_layout.h"

namespace mls {

// The residual add a layer leaves to the next norm: the MLP output, which the next layer's input
// norm (or the final norm) adds into x as it normalises (ops::add_rms_norm: one launch for both).
// `added`: already added (an observer wanted x whole); the delta stays allocated all the same
// until that norm, so that a step allocates alike with and without an observer.
struct PendingAdd {
  Tensor delta;
  bool added = false;
  bool open() const { return delta.defined() && !added; }  // a delta x still lacks
};

// x += the pending delta unless it is added already: x whole.
void settle(Tensor& x, PendingAdd& pending);

// y = rms_norm(x + the pending delta), x updated to the sum (y may alias x); the delta is
// released. q: as ops::rms_norm's (y quantised for block-FP8 linears of y).
void norm_with_pending(Tensor& x, PendingAdd& pending, const Tensor& w, float eps, Tensor& y,
                       Tensor* q = nullptr);

// x [layout.local_rows(), H] is updated in place, but for the layer's MLP output, which is left
// in `pending` (the previous layer's is added first). `chosen` carries the DSA indexer's
// selection from the last full layer to following shared layers.
void decoder_layer_forward(const io::ModelConfig& c, const ModelConstants& k,
                           const ParallelContext& par, const TokenLayout& layout, int64_t layer,
                           const LayerWeights& w, const StepContext& step, KvCache& kv, Tensor& x,
                           PendingAdd& pending, Tensor& chosen);

}  // namespace mls
