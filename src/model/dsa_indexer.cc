#include "model/dsa_indexer.h"

#include <cmath>
#include <cstring>

#include "ops/indexer_topk.h"
#include "ops/linear.h"
#include "ops/norm.h"

namespace mls {

std::vector<Tensor> dsa_indexer(const io::ModelConfig& c, const ModelConstants& k, int64_t layer,
                                const LayerWeights& w, const StepContext& step, Tensor& index_cache,
                                const Tensor& proj, const Tensor& q_resid) {
  Allocator& a = *step.alloc;
  const int64_t N = proj.dim(0), hi = c.index_n_heads, di = c.index_head_dim;
  const FusedAColumns cols = FusedAColumns::of(c, layer);
  const auto act = MemTag::kActivation;

  Tensor q = Tensor::empty({N, hi * di}, DType::kF32, act, a);
  ops::linear(q_resid, w.idx_wq_b, q);
  Tensor q3 = q.view({N, hi, di});
  ops::apply_rope(q3, 0, step.positions, k.rope, k.indexer_rope_style);  // rope part first

  Tensor key = Tensor::empty({N, di}, DType::kF32, act, a);
  ops::layer_norm(proj.narrow(1, cols.index_k, di), w.idx_k_norm_w, w.idx_k_norm_b, 1e-6f, key);
  ops::apply_rope(key, 0, step.positions, k.rope, k.indexer_rope_style);
  if (key.raw())
    for (int64_t t = 0; t < N; ++t)
      std::memcpy(index_cache.data<float>() + step.slots[t] * di, key.data<float>() + t * di,
                  di * sizeof(float));

  Tensor weights = Tensor::empty({N, hi}, DType::kF32, act, a);
  if (weights.raw()) {
    const float head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi)));
    for (int64_t t = 0; t < N; ++t)
      for (int64_t i = 0; i < hi; ++i)
        weights.data<float>()[t * hi + i] =
            proj.data<float>()[t * proj.stride(0) + cols.index_w + i] * head_scale;
  }

  const float score_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(di)));
  std::vector<Tensor> chosen;
  for (size_t s = 0; s < step.batch->seqs.size(); ++s) {
    const SequenceChunk& sc = step.batch->seqs[s];
    const int64_t S = sc.num_cached + sc.num_new;
    Tensor out = Tensor::empty({sc.num_new, c.index_topk}, DType::kI32, act, a);
    const ops::KeyPages pages{sc.block_table.data(), step.block_size, S};
    ops::indexer_topk(step.seq_rows(s, q3), index_cache, step.seq_rows(s, weights),
                      step.seq_rows(s, step.positions), sc.prompt_len > 0 ? sc.prompt_len : S,
                      score_scale, pages, out);
    chosen.push_back(std::move(out));
  }
  return chosen;
}

}  // namespace mls
