#include "model/step_context.h"

#include "core/error.h"
#include "ops/rope.h"

namespace mls {

ModelConstants ModelConstants::make(const io::ModelConfig& c, const ParallelContext& p) {
  ModelConstants k;
  ops::RopeParamsF rp;
  rp.theta = c.rope.theta;
  rp.yarn = c.rope.type == "yarn";
  rp.factor = c.rope.factor;
  rp.original_max_position_embeddings =
      static_cast<double>(c.rope.original_max_position_embeddings);
  rp.beta_fast = c.rope.beta_fast;
  rp.beta_slow = c.rope.beta_slow;
  // transformers treats an mscale of 0 as absent.
  rp.has_mscale = c.rope.mscale.has_value() && *c.rope.mscale != 0;
  rp.has_mscale_all_dim = c.rope.mscale_all_dim.has_value() && *c.rope.mscale_all_dim != 0;
  rp.mscale = c.rope.mscale.value_or(0);
  rp.mscale_all_dim = c.rope.mscale_all_dim.value_or(0);
  if (rp.yarn && rp.original_max_position_embeddings <= 0)
    rp.original_max_position_embeddings = static_cast<double>(c.max_position_embeddings);
  k.rope = ops::RopeTable(rp, static_cast<int>(c.qk_rope_head_dim));
  k.mla_rope_style =
      c.mla_rope_interleaved ? ops::RopeStyle::kInterleaved : ops::RopeStyle::kHalfSplit;
  k.indexer_rope_style =
      c.indexer_rope_interleaved ? ops::RopeStyle::kInterleaved : ops::RopeStyle::kHalfSplit;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  if (rp.yarn && rp.has_mscale_all_dim) {
    const double m = ops::yarn_mscale(rp.factor, rp.mscale_all_dim);
    scale *= m * m;
  }
  k.softmax_scale = static_cast<float>(scale);
  k.local_heads = c.num_attention_heads / p.tp_size;
  k.local_vocab = (c.vocab_size + p.tp_size - 1) / p.tp_size;
  k.vocab_start = p.rank * k.local_vocab;
  return k;
}

StepContext::StepContext(const ForwardBatch& b, int64_t bs, Allocator& a)
    : batch(&b), block_size(bs), alloc(&a) {
  const int64_t N = b.num_tokens();
  positions = Tensor::empty({N}, DType::kI32, MemTag::kActivation, a);
  slots.resize(N);
  int64_t row = 0;
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const SequenceChunk& sc = b.seqs[s];
    seq_start.push_back(row);
    const int64_t need_blocks = (sc.num_cached + sc.num_new + bs - 1) / bs;
    if (static_cast<int64_t>(sc.block_table.size()) < need_blocks)
      raise<InternalError>("sequence {} covers {} tokens with {} blocks of {}", s,
                           sc.num_cached + sc.num_new, sc.block_table.size(), bs);
    for (int64_t i = 0; i < sc.num_new; ++i, ++row) {
      const int64_t p = sc.num_cached + i;
      if (positions.raw()) positions.data<int32_t>()[row] = static_cast<int32_t>(p);
      slots[row] = slot(s, p);
    }
  }
  if (row != N) raise<InternalError>("batch lists {} tokens but its sequences cover {}", N, row);
}

}  // namespace mls
