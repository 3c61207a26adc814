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
  const int64_t N = q.dim(0), nh = k_.local_heads, dv = c_.v_head_dim;
  Tensor o = Tensor::empty({N, nh, dv}, DType::kF32, act, a);
  for (size_t s = 0; s < step.batch->seqs.size(); ++s) {
    const SequenceChunk& sc = step.batch->seqs[s];
    if (sc.num_new == 0) continue;
    Tensor latent = step.gather_cache(s, latent_cache, sc.num_cached + sc.num_new, act);
    const Tensor* allowed = chosen.empty() ? nullptr : &chosen[s];
    Tensor qs = step.seq_rows(s, q);
    Tensor os = step.seq_rows(s, o);
    if (sc.num_new == 1)
      attend_absorbed(w, step, s, latent, qs, allowed, os);
    else
      attend_expanded(w, step, s, latent, qs, allowed, os);
  }
  Tensor out = Tensor::empty({N, c_.hidden_size}, DType::kF32, act, a);
  ops::linear(o.view({N, nh * dv}), w.o_proj, out);
  return out;
}

void MlaAttention::attend_expanded(const LayerWeights& w, const StepContext& step, size_t s,
                                   const Tensor& latent, const Tensor& q, const Tensor* allowed,
                                   Tensor& o) const {
  Allocator& a = *step.alloc;
  const auto act = MemTag::kActivation;
  const int64_t S = latent.dim(0), nh = k_.local_heads, dn = c_.qk_nope_head_dim;
  const int64_t dr = c_.qk_rope_head_dim, dv = c_.v_head_dim, rkv = c_.kv_lora_rank;
  Tensor kv = Tensor::empty({S, nh * (dn + dv)}, DType::kF32, act, a);
  ops::linear(latent.narrow(1, 0, rkv), w.kv_b_proj, kv);
  // K = [k_nope per head, the one shared k_rot].
  Tensor keys = Tensor::empty({S, nh, dn + dr}, DType::kF32, act, a);
  if (keys.raw())
    for (int64_t j = 0; j < S; ++j)
      for (int64_t h = 0; h < nh; ++h) {
        float* dst = keys.data<float>() + (j * nh + h) * (dn + dr);
        std::memcpy(dst, kv.data<float>() + (j * nh + h) * (dn + dv), dn * sizeof(float));
        std::memcpy(dst + dn, latent.data<float>() + j * (rkv + dr) + rkv, dr * sizeof(float));
      }
  Tensor values = kv.view({S, nh, dn + dv}).narrow(2, dn, dv);
  ops::AttentionArgs args{k_.softmax_scale, allowed};
  ops::attention(q, keys, values, step.seq_rows(s, step.positions), args, o);
}

void MlaAttention::attend_absorbed(const LayerWeights& w, const StepContext& step, size_t s,
                                   const Tensor& latent, const Tensor& q, const Tensor* allowed,
                                   Tensor& o) const {
  Allocator& a = *step.alloc;
  const auto act = MemTag::kActivation;
  const int64_t n = q.dim(0), nh = k_.local_heads, dn = c_.qk_nope_head_dim;
  const int64_t dr = c_.qk_rope_head_dim, dv = c_.v_head_dim, rkv = c_.kv_lora_rank;
  // Query in latent space: [q_nope · W_UK, q_rot] per head.
  Tensor q_lat = Tensor::empty({n, nh, rkv + dr}, DType::kF32, act, a);
  for (int64_t h = 0; h < nh; ++h) {
    Tensor qh = q.select(1, h);
    Tensor dst = q_lat.select(1, h);
    Tensor lat = dst.narrow(1, 0, rkv);
    ops::linear(qh.narrow(1, 0, dn), w.w_uk_t.select(0, h), lat);
    if (dst.raw())
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(dst.data<float>() + t * dst.stride(0) + rkv,
                    qh.data<float>() + t * qh.stride(0) + dn, dr * sizeof(float));
  }
  Tensor o_lat = Tensor::empty({n, nh, rkv}, DType::kF32, act, a);
  ops::AttentionArgs args{k_.softmax_scale, allowed};
  ops::attention(q_lat, latent.unsqueeze(1), latent.narrow(1, 0, rkv).unsqueeze(1),
                 step.seq_rows(s, step.positions), args, o_lat);
  // Back out of latent space: o_h = o_lat_h · W_UVᵀ.
  for (int64_t h = 0; h < nh; ++h) {
    Tensor oh = o.select(1, h);
    ops::linear(o_lat.select(1, h), w.kv_b_proj.narrow(0, h * (dn + dv) + dn, dv), oh);
  }
}

}  // namespace mls
