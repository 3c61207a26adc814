#include "model/decoder_layer.h"

#include "model/dsa_indexer.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "ops/elementwise.h"
#include "ops/fp8_input.h"
#include "ops/linear.h"
#include "ops/norm.h"

namespace mls {
namespace {

// Replicated → this rank's rows of `layout`, summing partial results over ranks on the way.
Tensor reduce_into_layout(Tensor& partial, const ParallelContext& par, const TokenLayout& layout,
                          Allocator& a) {
  if (par.tp_size == 1) return partial;
  if (layout.is_sharded()) return reduce_scatter_padded(partial, layout, *par.comm, a);
  par.comm->all_reduce(partial);
  return partial;
}

// This rank's rows → all T rows.
Tensor gather_from_layout(const Tensor& local, const TokenLayout& layout, const StepContext& step,
                          const ParallelContext& par, Allocator& a) {
  if (!layout.is_sharded()) return local;
  return all_gather_trim(local, layout, step.positions.numel(), *par.comm, a);
}

}  // namespace

void settle(Tensor& x, PendingAdd& pending) {
  if (!pending.open()) return;
  ops::add(x, pending.delta, x);
  pending.added = true;
}

void norm_with_pending(Tensor& x, PendingAdd& pending, const Tensor& w, float eps, Tensor& y,
                       Tensor* q) {
  if (pending.open())
    ops::add_rms_norm(x, pending.delta, w, eps, y, q);
  else
    ops::rms_norm(x, w, eps, y, q);
  pending = PendingAdd();
}

void decoder_layer_forward(const io::ModelConfig& c, const ModelConstants& k,
                           const ParallelContext& par, const TokenLayout& layout, int64_t layer,
                           const LayerWeights& w, const StepContext& step, KvCache& kv, Tensor& x,
                           PendingAdd& pending, Tensor& chosen) {
  Allocator& a = *step.alloc;
  const auto act = MemTag::kActivation;
  const int64_t L = layout.local_rows(), N = step.positions.numel(), H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  layout.expect(x, "decoder layer input");

  const DType dt = k.act;
  Tensor h = Tensor::empty({L, H}, dt, act, a);
  // The layer input quantised by its norm for the fused projections, where they are block-FP8.
  Tensor hq_a = ops::fp8_input(L, w.fused_a, dt, a);
  norm_with_pending(x, pending, w.input_norm, eps, h, &hq_a);
  // The MLP's input quantised by the post-attention norm for the gate and up weights (the dense
  // MLP's or the shared experts'), where that input is h itself (not gathered from other ranks).
  const Tensor* mlp_gate = !c.is_moe(layer)         ? &w.dense.gate
                           : c.n_shared_experts > 0 ? &w.shared.gate
                                                    : nullptr;
  Tensor hq = mlp_gate && !layout.is_sharded() ? ops::fp8_input(L, *mlp_gate, dt, a) : Tensor();
  {
    // Attention half. Its intermediates (the gathered projection, q, the indexer's output)
    // are released at the end of this block, before the MLP allocates.
    const FusedAColumns cols = FusedAColumns::of(c, layer);
    Tensor a_local = Tensor::empty({L, cols.width}, dt, act, a);
    Tensor a_mla = a_local.narrow(1, 0, w.fused_a.dim(0));
    if (w.fused_a_index.defined()) {
      Tensor a_index = a_local.narrow(1, cols.index_k, w.fused_a_index.dim(0));
      ops::linear_pair(h, w.fused_a, a_mla, w.fused_a_index, a_index, hq_a);
    } else {
      ops::linear(h, w.fused_a, a_mla, false, hq_a);
    }
    hq_a = Tensor();  // read by the projections only
    const Tensor proj = gather_from_layout(a_local, layout, step, par, a);
    MLS_CHECK(proj.dim(0) == N, "fused projection has {} rows for {} tokens", proj.dim(0), N);
    // Without q_lora, q_proj is column-parallel over the full layer input.
    const Tensor h_all = c.q_lora_rank > 0 ? Tensor() : gather_from_layout(h, layout, step, par, a);

    MlaAttention mla(c, k, layer);
    Tensor q, index_q;
    mla.project(w, step, kv.latent[layer], proj, h_all, q, index_q);
    switch (c.indexer(layer)) {
      case io::IndexerKind::kFull:
        chosen = dsa_indexer(c, k, layer, w, step, kv.index_key[layer], proj, index_q);
        break;
      case io::IndexerKind::kShared:
        break;  // reuse the most recent full layer's selection
      case io::IndexerKind::kNone:
        chosen = Tensor();
        break;
    }
    Tensor attn = mla.attend(w, step, kv.latent[layer], q, chosen);
    Tensor attn_local = reduce_into_layout(attn, par, layout, a);
    layout.expect(attn_local, "attention output");
    ops::add_rms_norm(x, attn_local, w.post_attention_norm, eps, h, &hq);
  }

  const Tensor h_mlp = gather_from_layout(h, layout, step, par, a);
  MLS_CHECK(h_mlp.dim(0) == N, "MLP input has {} rows for {} tokens", h_mlp.dim(0), N);
  Tensor mlp_out = Tensor::empty({N, H}, dt, act, a);
  if (c.is_moe(layer))
    moe_forward(c, w, h_mlp, mlp_out, a, step.observer, layer, hq);
  else
    mlp_forward(w.dense, h_mlp, mlp_out, a, false, hq);
  Tensor mlp_local = reduce_into_layout(mlp_out, par, layout, a);
  layout.expect(mlp_local, "MLP output");
  pending = {.delta = mlp_local, .added = false};
}

}  // namespace mls
