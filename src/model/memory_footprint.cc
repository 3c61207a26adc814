#include "model/memory_footprint.h"

#include <algorithm>

#include "model/model_weights.h"
#include "model/step_context.h"
#include "ops/attention.h"
#include "ops/indexer_topk.h"
#include "parallel/token_layout.h"

namespace mls {
namespace {

// A ledger of live allocations tracking the high-water mark.
class Ledger {
 public:
  int64_t alloc(int64_t bytes) {
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return bytes;
  }
  void free(int64_t bytes) { live_ -= bytes; }
  int64_t peak() const { return peak_; }

 private:
  int64_t live_ = 0, peak_ = 0;
};

// The step's longest key range, as StepContext computes it.
int64_t max_keys_of(const ForwardBatch& b) {
  int64_t m = 0;
  for (const SequenceChunk& s : b.seqs) m = std::max({m, s.num_cached + s.num_new, s.prompt_len});
  return m;
}

}  // namespace

int64_t predict_context_bytes(const io::ModelConfig& c, const ParallelContext& p,
                              int64_t max_tokens, int64_t max_seqs, int64_t max_model_len,
                              int64_t block_size, Device device) {
  const int64_t tables = max_seqs * ((max_model_len + block_size - 1) / block_size) * 4;
  const int64_t heads = shard_sizes(c, p).heads;
  const bool indexer = std::any_of(c.layer_indexer.begin(), c.layer_indexer.end(),
                                   [](io::IndexerKind k) { return k == io::IndexerKind::kFull; });
  const int64_t dk = c.kv_lora_rank + c.qk_rope_head_dim;
  // The attention kernel's split scratch is largest for few long rows, bounded by the rows the
  // GPU holds at once; either end of the token range gives the worst case.
  const int64_t attention = std::max(
      ops::attention_scratch_bytes(device, 1, heads, dk, c.kv_lora_rank, max_model_len),
      ops::attention_scratch_bytes(device, max_tokens, heads, dk, c.kv_lora_rank, max_model_len));
  // Attention and indexer scratch are live at different times: the larger one counts.
  return tables + std::max(attention, indexer ? ops::indexer_topk_scratch_bytes(
                                                    device, max_tokens, max_model_len, c.index_topk)
                                              : 0);
}

int64_t predict_weight_bytes(const io::ModelConfig& c, const ParallelContext& p, Device device) {
  ModelWeights scratch;
  int64_t bytes = 0;
  for (const WeightSpec& s : weight_table(c, p, scratch)) {
    int64_t n = 1;
    for (int64_t d : s.local_shape) n *= d;
    const DType dt = weight_dtype(c, s, device, true);
    bytes += n * static_cast<int64_t>(dtype_size(dt));
    if (dt == DType::kFP8E4M3) bytes += block_scale_bytes(s.local_shape[0], s.local_shape[1]);
  }
  // W_UKᵀ per layer: [local heads, kv_lora_rank, qk_nope_head_dim], in kv_b_proj's dtype.
  const int64_t w_uk =
      c.num_hidden_layers * shard_sizes(c, p).heads * c.kv_lora_rank * c.qk_nope_head_dim;
  return bytes + w_uk * (device.is_cpu() ? 4 : 2);
}

ForwardFootprint predict_forward_footprint(const io::ModelConfig& c, const ParallelContext& p,
                                           const ForwardBatch& batch, Device device) {
  const ShardSizes sh = shard_sizes(c, p);
  const int64_t N = batch.num_tokens(), H = c.hidden_size, R = batch.num_logit_rows();
  const TokenLayout layout = p.sequence_parallel && p.tp_size > 1
                                 ? TokenLayout::sharded(N, p.tp_size, p.rank)
                                 : TokenLayout::replicated(N);
  const bool sharded = layout.is_sharded();
  const int64_t L = layout.local_rows(), Tp = layout.padded;
  const int64_t nh = sh.heads, dq = c.qk_head_dim(), rkv = c.kv_lora_rank;
  const int64_t dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t E = static_cast<int64_t>(dtype_size(activation_dtype(device)));
  constexpr int64_t kI32 = 4, kF32 = 4;  // ids; router logits, routing weights, logits
  Ledger m;
  int64_t comm = 0;

  // Model::forward, in allocation order (see model.cc, step_context.cc, decoder_layer.cc,
  // mla_attention.cc, dsa_indexer.cc, moe.cc, mlp.cc, token_layout.cc).
  const int64_t step = m.alloc(kI32 * StepContext::index_elems(batch, L));
  const int64_t x = m.alloc(E * L * H);
  int64_t chosen = 0;
  auto reduce_into_layout = [&](int64_t width) -> int64_t {
    if (p.tp_size == 1) return 0;
    if (!sharded) {
      comm = std::max(comm, kF32 * N * width);  // all_reduce scratch (fp32 sums)
      return 0;
    }
    const int64_t padded = Tp != N ? m.alloc(E * Tp * width) : 0;
    const int64_t local = m.alloc(E * L * width);
    comm = std::max(comm, kF32 * L * width);  // reduce_scatter scratch
    m.free(padded);
    return local;
  };
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const int64_t h = m.alloc(E * L * H);
    {
      const int64_t wa = FusedAColumns::of(c, layer).width;
      const int64_t a_local = m.alloc(E * L * wa);
      const int64_t proj = sharded ? m.alloc(E * Tp * wa) : 0;
      const int64_t h_all = c.q_lora_rank == 0 && sharded ? m.alloc(E * Tp * H) : 0;
      const int64_t q = m.alloc(E * N * nh * dq);
      const int64_t q_resid = c.q_lora_rank > 0 ? m.alloc(E * N * c.q_lora_rank) : 0;
      m.free(m.alloc(E * N * (rkv + dr)));  // ckv
      switch (c.layer_indexer[layer]) {
        case io::IndexerKind::kFull: {
          const int64_t iq = m.alloc(E * N * c.index_n_heads * c.index_head_dim);
          const int64_t key = m.alloc(E * N * c.index_head_dim);
          const int64_t w = m.alloc(E * N * c.index_n_heads);
          const int64_t fresh = m.alloc(kI32 * N * c.index_topk);
          m.free(m.alloc(
              ops::indexer_topk_scratch_bytes(device, N, max_keys_of(batch), c.index_topk)));
          m.free(iq);
          m.free(key);
          m.free(w);
          m.free(chosen);
          chosen = fresh;
          break;
        }
        case io::IndexerKind::kShared:
          break;
        case io::IndexerKind::kNone:
          m.free(chosen);
          chosen = 0;
          break;
      }
      const int64_t q_lat = m.alloc(E * N * nh * (rkv + dr));
      const int64_t o_lat = m.alloc(E * N * nh * rkv);
      m.free(
          m.alloc(ops::attention_scratch_bytes(device, N, nh, rkv + dr, rkv, max_keys_of(batch))));
      const int64_t o = m.alloc(E * N * nh * dv);
      const int64_t attn = m.alloc(E * N * H);
      m.free(q_lat);
      m.free(o_lat);
      m.free(o);
      const int64_t attn_local = reduce_into_layout(H);
      for (int64_t b : {a_local, proj, h_all, q, q_resid, attn, attn_local}) m.free(b);
    }
    const int64_t h_mlp = sharded ? m.alloc(E * Tp * H) : 0;
    const int64_t mlp_out = m.alloc(E * N * H);
    if (c.layer_is_moe[layer]) {
      const int64_t K = c.num_experts_per_tok;
      const int64_t fixed = m.alloc(kF32 * N * c.n_routed_experts) + m.alloc(kI32 * N * K) +
                            m.alloc(kF32 * N * K) + m.alloc(kI32 * N * K) + m.alloc(kI32 * N * K) +
                            m.alloc(kI32 * (c.n_routed_experts + 1)) + m.alloc(E * N * K * H) +
                            m.alloc(E * N * K * H) + m.alloc(E * N * sh.expert_inter) +
                            m.alloc(E * N * sh.expert_inter);
      if (c.n_shared_experts > 0)
        m.free(m.alloc(E * N * sh.shared_inter) + m.alloc(E * N * sh.shared_inter));
      m.free(fixed);
    } else {
      m.free(m.alloc(E * N * sh.dense_inter) + m.alloc(E * N * sh.dense_inter));
    }
    const int64_t mlp_local = reduce_into_layout(H);
    for (int64_t b : {h, h_mlp, mlp_out, mlp_local}) m.free(b);
  }
  const int64_t normed = sharded ? m.alloc(E * Tp * H) : 0;
  const int64_t rows = m.alloc(E * R * H);
  const int64_t local = m.alloc(kF32 * R * sh.vocab);
  if (p.tp_size > 1) {
    const int64_t gathered = m.alloc(kF32 * p.tp_size * R * sh.vocab);
    m.alloc(kF32 * R * c.vocab_size);  // the returned logits
    m.free(gathered);
  }
  for (int64_t b : {normed, rows, local, x, step, chosen}) m.free(b);
  return {m.peak(), comm};
}

}  // namespace mls
