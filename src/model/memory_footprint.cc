#include "model/memory_footprint.h"

#include <algorithm>

#include "model/model_weights.h"
#include "model/step_context.h"
#include "parallel/token_layout.h"

namespace mls {
namespace {

constexpr int64_t kF32 = 4;  // CPU compute dtype; ids are i32, also 4 bytes

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

}  // namespace

int64_t predict_weight_bytes(const io::ModelConfig& c, const ParallelContext& p) {
  ModelWeights scratch;
  int64_t elems = 0;
  for (const WeightSpec& s : weight_table(c, p, scratch)) {
    int64_t n = 1;
    for (int64_t d : s.local_shape) n *= d;
    elems += n;
  }
  // W_UKᵀ per layer: [local heads, kv_lora_rank, qk_nope_head_dim].
  elems += c.num_hidden_layers * shard_sizes(c, p).heads * c.kv_lora_rank * c.qk_nope_head_dim;
  return elems * kF32;
}

ForwardFootprint predict_forward_footprint(const io::ModelConfig& c, const ParallelContext& p,
                                           const ForwardBatch& batch) {
  const ShardSizes sh = shard_sizes(c, p);
  const int64_t N = batch.num_tokens(), H = c.hidden_size, R = batch.num_logit_rows();
  const TokenLayout layout = p.sequence_parallel && p.tp_size > 1
                                 ? TokenLayout::sharded(N, p.tp_size, p.rank)
                                 : TokenLayout::replicated(N);
  const bool sharded = layout.is_sharded();
  const int64_t L = layout.local_rows(), Tp = layout.padded;
  const int64_t nh = sh.heads, dq = c.qk_head_dim(), rkv = c.kv_lora_rank;
  const int64_t dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  Ledger m;
  int64_t comm = 0;

  // Model::forward, in allocation order (see model.cc, decoder_layer.cc, mla_attention.cc,
  // dsa_indexer.cc, moe.cc, mlp.cc, token_layout.cc).
  const int64_t positions = m.alloc(kF32 * N);
  const int64_t x = m.alloc(kF32 * L * H);
  int64_t chosen = 0;
  auto reduce_into_layout = [&](int64_t width) -> int64_t {
    if (p.tp_size == 1) return 0;
    if (!sharded) {
      comm = std::max(comm, kF32 * N * width);  // all_reduce scratch
      return 0;
    }
    const int64_t padded = Tp != N ? m.alloc(kF32 * Tp * width) : 0;
    const int64_t local = m.alloc(kF32 * L * width);
    comm = std::max(comm, kF32 * L * width);  // reduce_scatter scratch
    m.free(padded);
    return local;
  };
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const int64_t h = m.alloc(kF32 * L * H);
    {
      const int64_t wa = FusedAColumns::of(c, layer).width;
      const int64_t a_local = m.alloc(kF32 * L * wa);
      const int64_t proj = sharded ? m.alloc(kF32 * Tp * wa) : 0;
      const int64_t h_all = c.q_lora_rank == 0 && sharded ? m.alloc(kF32 * Tp * H) : 0;
      const int64_t q = m.alloc(kF32 * N * nh * dq);
      const int64_t q_resid = c.q_lora_rank > 0 ? m.alloc(kF32 * N * c.q_lora_rank) : 0;
      m.free(m.alloc(kF32 * N * (rkv + dr)));  // ckv
      switch (c.layer_indexer[layer]) {
        case io::IndexerKind::kFull: {
          const int64_t iq = m.alloc(kF32 * N * c.index_n_heads * c.index_head_dim);
          const int64_t key = m.alloc(kF32 * N * c.index_head_dim);
          const int64_t w = m.alloc(kF32 * N * c.index_n_heads);
          int64_t fresh = 0;
          for (const SequenceChunk& s : batch.seqs)
            fresh += m.alloc(kF32 * s.num_new * c.index_topk);
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
      const int64_t q_lat = m.alloc(kF32 * N * nh * (rkv + dr));
      const int64_t o_lat = m.alloc(kF32 * N * nh * rkv);
      const int64_t o = m.alloc(kF32 * N * nh * dv);
      const int64_t attn = m.alloc(kF32 * N * H);
      m.free(q_lat);
      m.free(o_lat);
      m.free(o);
      const int64_t attn_local = reduce_into_layout(H);
      for (int64_t b : {a_local, proj, h_all, q, q_resid, attn, attn_local}) m.free(b);
    }
    const int64_t h_mlp = sharded ? m.alloc(kF32 * Tp * H) : 0;
    const int64_t mlp_out = m.alloc(kF32 * N * H);
    if (c.layer_is_moe[layer]) {
      const int64_t K = c.num_experts_per_tok;
      const int64_t fixed = m.alloc(kF32 * N * c.n_routed_experts) + m.alloc(kF32 * N * K) +
                            m.alloc(kF32 * N * K) + m.alloc(kF32 * N * H) + m.alloc(kF32 * N * H) +
                            m.alloc(kF32 * N * sh.expert_inter) +
                            m.alloc(kF32 * N * sh.expert_inter);
      if (c.n_shared_experts > 0)
        m.free(m.alloc(kF32 * N * sh.shared_inter) + m.alloc(kF32 * N * sh.shared_inter));
      m.free(fixed);
    } else {
      m.free(m.alloc(kF32 * N * sh.dense_inter) + m.alloc(kF32 * N * sh.dense_inter));
    }
    const int64_t mlp_local = reduce_into_layout(H);
    for (int64_t b : {h, h_mlp, mlp_out, mlp_local}) m.free(b);
  }
  const int64_t normed = sharded ? m.alloc(kF32 * Tp * H) : 0;
  const int64_t rows = m.alloc(kF32 * R * H);
  const int64_t local = m.alloc(kF32 * R * sh.vocab);
  if (p.tp_size > 1) {
    const int64_t gathered = m.alloc(kF32 * p.tp_size * R * sh.vocab);
    m.alloc(kF32 * R * c.vocab_size);  // the returned logits
    m.free(gathered);
  }
  for (int64_t b : {normed, rows, local, x, positions, chosen}) m.free(b);
  return {m.peak(), comm};
}

}  // namespace mls
