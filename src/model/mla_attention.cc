#include "model/mla_attention.h"

#include "ops/attention.h"
#include "ops/cache_write.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace mls {

void MlaAttention::project(const LayerWeights& w, const StepContext& step, Tensor& latent_cache,
                           const Tensor& a, const Tensor& h, Tensor& q, Tensor& index_q) const {
  Allocator& al = *step.alloc;
  const auto act = MemTag::kActivation;
  const DType dt = k_.act;
  const int64_t N = a.dim(0), nh = k_.local_heads, dq = c_.qk_head_dim();
  const int64_t rkv = c_.kv_lora_rank, dr = c_.qk_rope_head_dim;
  const FusedAColumns cols = FusedAColumns::of(c_, layer_);

  const bool indexer = c_.indexer(layer_) == io::IndexerKind::kFull;
  MLS_CHECK(!indexer || c_.q_lora_rank > 0, "layer {}: a DSA indexer needs q_lora_rank > 0",
            layer_);
  q = Tensor::empty({N, nh * dq}, dt, act, al);
  if (indexer) index_q = Tensor::empty({N, c_.index_n_heads * c_.index_head_dim}, dt, act, al);
  if (c_.q_lora_rank > 0) {
    Tensor q_resid = Tensor::empty({N, c_.q_lora_rank}, dt, act, al);
    Tensor q_resid_q = ops::fp8_input(N, w.q_b_proj, dt, al);
    ops::rms_norm(a.narrow(1, cols.q, c_.q_lora_rank), w.q_a_norm, 1e-6f, q_resid, &q_resid_q);
    if (indexer)
      ops::linear_pair(q_resid, w.q_b_proj, q, w.idx_wq_b, index_q, q_resid_q);
    else
      ops::linear(q_resid, w.q_b_proj, q, false, q_resid_q);
  } else {
    ops::linear(h, w.q_proj, q);
  }
  q = q.view({N, nh, dq});

  // [c, k_rot] is exactly the cache row: normalise c and rotate k_rot into it, in one op.
  ops::latent_cache_write(a.narrow(1, cols.kv, rkv + dr), w.kv_a_norm, 1e-6f, step.positions,
                          step.slots, k_.rope, k_.mla_rope_style, latent_cache);
}

Tensor MlaAttention::attend(const LayerWeights& w, const StepContext& step,
                            const Tensor& latent_cache, const Tensor& q,
                            const Tensor& chosen) const {
  Allocator& a = *step.alloc;
  const auto act = MemTag::kActivation;
  const DType dt = k_.act;
  const int64_t N = q.dim(0), nh = k_.local_heads, dn = c_.qk_nope_head_dim;
  const int64_t dr = c_.qk_rope_head_dim, dv = c_.v_head_dim, rkv = c_.kv_lora_rank;

  // Queries in latent space: [q_nope · W_UK, q_rot] per head, all heads in one batched GEMM.
  Tensor q_lat = Tensor::empty({N, nh, rkv + dr}, dt, act, a);
  Tensor q_lat_c = q_lat.narrow(2, 0, rkv);
  ops::linear_batched(q.narrow(2, 0, dn), w.w_uk_t, q_lat_c);
  Tensor q_lat_rot = q_lat.narrow(2, rkv, dr);
  ops::rope_into(q.narrow(2, dn, dr), step.positions, k_.rope, k_.mla_rope_style, q_lat_rot);

  // One latent "head" shared by all query heads, read from the cache in place; every sequence
  // of the step in one call.
  const Tensor keys = latent_cache.unsqueeze(1);
  const Tensor values = latent_cache.narrow(1, 0, rkv).unsqueeze(1);
  Tensor o_lat = Tensor::empty({N, nh, rkv}, dt, act, a);
  const ops::AttentionArgs args{.scale = k_.softmax_scale,
                                .allowed = chosen.defined() ? &chosen : nullptr,
                                .pages = step.pages(),
                                .batch_invariant = k_.batch_invariant};
  ops::attention(q_lat, keys, values, step.positions, args, o_lat);

  // Back out of latent space: o_h = o_lat_h · W_UVᵀ (head-strided rows of kv_b_proj), o_proj.
  Tensor o = Tensor::empty({N, nh, dv}, dt, act, a);
  const Tensor w_uv = w.kv_b_proj.view({nh, dn + dv, rkv}).narrow(1, dn, dv);
  ops::linear_batched(o_lat, w_uv, o);
  Tensor out = Tensor::empty({N, c_.hidden_size}, dt, act, a);
  ops::linear(o.view({N, nh * dv}), w.o_proj, out);
  return out;
}

}  // namespace mls
