#include "model/dsa_indexer.h"

#include <cmath>

#include "ops/cache_write.h"
#include "ops/elementwise.h"
#include "ops/indexer_topk.h"
#include "ops/linear.h"
#include "ops/rope.h"

namespace mls {

Tensor dsa_indexer(const io::ModelConfig& c, const ModelConstants& k, int64_t layer,
                   const LayerWeights& w, const StepContext& step, Tensor& index_cache,
                   const Tensor& proj, Tensor& q) {
  Allocator& a = *step.alloc;
  const int64_t N = proj.dim(0), hi = c.index_n_heads, di = c.index_head_dim;
  const FusedAColumns cols = FusedAColumns::of(c, layer);
  const auto act = MemTag::kActivation;
  const DType dt = k.act;

  Tensor q3 = q.view({N, hi, di});
  ops::apply_rope(q3, 0, step.positions, k.rope, k.indexer_rope_style);  // rope part first

  // layer_norm, then RoPE over the first rotary dims, into the cache in one op. The dense keys
  // are written for an observer, but allocated in every step: what a step allocates must not
  // depend on an observer (the memory plan is traced without one; the bench times layers with one).
  Tensor key = Tensor::empty({N, di}, dt, act, a);
  ops::indexer_key_write(proj.narrow(1, cols.index_k, di), w.idx_k_norm_w, w.idx_k_norm_b, 1e-6f,
                         step.positions, step.slots, k.rope, k.indexer_rope_style, index_cache,
                         step.observer ? &key : nullptr);

  Tensor weights = Tensor::empty({N, hi}, dt, act, a);
  const float head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi)));
  ops::scale(proj.narrow(1, cols.index_w, hi), head_scale, weights);

  const float score_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(di)));
  Tensor chosen = Tensor::empty({N, c.index_topk}, DType::kI32, act, a);
  ops::indexer_topk(q3, index_cache, weights, step.positions, step.index_row_len, score_scale,
                    step.pages(), k.topk_tie_order, chosen);
  if (step.observer) {
    step.observer(fmt::format("layer.{}.index_q", layer), q3);
    step.observer(fmt::format("layer.{}.index_k", layer), key);
    step.observer(fmt::format("layer.{}.index_w", layer), weights);
  }
  return chosen;
}

}  // namespace mls
