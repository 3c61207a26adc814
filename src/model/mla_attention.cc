#include "model/mla_attention.h"

#include <cstring>

#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace mls {

void MlaAttention::project(const LayerWeights& w, const StepContext& step, Tensor& latent_cache,
                           const Tensor& a, const Tensor& h, Tensor& q, Tensor& q_resid) const {
  Allocator& al = *step.alloc;
  const auto act = MemTag::kActivation;
  const int64_t N = a.dim(0), nh = k_.local_heads, dq = c_.qk_head_dim();
  const int64_t rkv = c_.kv_lora_rank, dr = c_.qk_rope_head_dim;
  const FusedAColumns cols = FusedAColumns::of(c_, layer_);

  q = Tensor::empty({N, nh * dq}, DType::kF32, act, al);
  if (c_.q_lora_rank > 0) {
    q_resid = Tensor::empty({N, c_.q_lora_rank}, DType::kF32, act, al);
    ops::rms_norm(a.narrow(1, cols.q, c_.q_lora_rank), w.q_a_norm, 1e-6f, q_resid);
    ops::linear(q_resid, w.q_b_proj, q);
  } else {
    ops::linear(h, w.q_proj, q);
  }
  q = q.view({N, nh, dq});
  ops::apply_rope(q, c_.qk_nope_head_dim, step.positions, k_.rope, k_.mla_rope_style);

  // [c, k_rot] is exactly the cache row: normalise c and rotate k_rot, then store.
  Tensor ckv = Tensor::empty({N, rkv + dr}, DType::kF32, act, al);
  Tensor c = ckv.narrow(1, 0, rkv);
  ops::rms_norm(a.narrow(1, cols.kv, rkv), w.kv_a_norm, 1e-6f, c);
  if (ckv.raw())
    for (int64_t t = 0; t < N; ++t)
      std::memcpy(ckv.data<float>() + t * (rkv + dr) + rkv,
                  a.data<float>() + t * a.stride(0) + cols.kv + rkv, dr * sizeof(float));
  ops::apply_rope(ckv, rkv, step.positions, k_.rope, k_.mla_rope_style);
  if (ckv.raw())
    for (int64_t t = 0; t < N; ++t)
      std::memcpy(latent_cache.data<float>() + step.slots[t] * (rkv + dr),
                  ckv.data<float>() + t * (rkv + dr), (rkv + dr) * sizeof(float));
}

Tensor MlaAttention::attend(const LayerWeights& w, const StepContext& step,
                            const Tensor& latent_cache, const Tensor& q,
                            const ChosenIndices& chosen) const {
  Allocator& a = *step.alloc;
  const auto act = MemTag::kActivation;
  const int64_t N = q.dim(0), nh = k_.local_heads, dn = c_.qk_nope_head_dim;
  const int64_t dr = c_.qk_rope_head_dim, dv = c_.v_head_dim, rkv = c_.kv_lora_rank;

  // Queries in latent space: [q_nope · W_UK, q_rot] per head, for all N tokens at once.
  Tensor q_lat = Tensor::empty({N, nh, rkv + dr}, DType::kF32, act, a);
  for (int64_t h = 0; h < nh; ++h) {
    Tensor qh = q.select(1, h);
    Tensor dst = q_lat.select(1, h);
    Tensor lat = dst.narrow(1, 0, rkv);
    ops::linear(qh.narrow(1, 0, dn), w.w_uk_t.select(0, h), lat);
    if (dst.raw())
      for (int64_t t = 0; t < N; ++t)
        std::memcpy(dst.data<float>() + t * dst.stride(0) + rkv,
                    qh.data<float>() + t * qh.stride(0) + dn, dr * sizeof(float));
  }

  // One latent "head" shared by all query heads, read from the cache in place.
  const Tensor keys = latent_cache.unsqueeze(1);
  const Tensor values = latent_cache.narrow(1, 0, rkv).unsqueeze(1);
  Tensor o_lat = Tensor::empty({N, nh, rkv}, DType::kF32, act, a);
  for (size_t s = 0; s < step.batch->seqs.size(); ++s) {
    const SequenceChunk& sc = step.batch->seqs[s];
    if (sc.num_new == 0) continue;
    ops::AttentionArgs args{.scale = k_.softmax_scale,
                            .allowed = chosen.empty() ? nullptr : &chosen[s],
                            .block_table = sc.block_table.data(),
                            .block_size = step.block_size,
                            .num_keys = sc.num_cached + sc.num_new};
    Tensor os = step.seq_rows(s, o_lat);
    ops::attention(step.seq_rows(s, q_lat), keys, values, step.seq_rows(s, step.positions), args,
                   os);
  }

  // Back out of latent space: o_h = o_lat_h · W_UVᵀ, then o_proj.
  Tensor o = Tensor::empty({N, nh, dv}, DType::kF32, act, a);
  for (int64_t h = 0; h < nh; ++h) {
    Tensor oh = o.select(1, h);
    ops::linear(o_lat.select(1, h), w.kv_b_proj.narrow(0, h * (dn + dv) + dn, dv), oh);
  }
  Tensor out = Tensor::empty({N, c_.hidden_size}, DType::kF32, act, a);
  ops::linear(o.view({N, nh * dv}), w.o_proj, out);
  return out;
}

}  // namespace mls
