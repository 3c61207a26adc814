#include "model/decoder_layer.h"

#include "model/dsa_indexer.h"
#include "model/mlp.h"
#include "model/moe.h"
#include "ops/elementwise.h"
#include "ops/norm.h"

namespace mls {

void decoder_layer_forward(const io::ModelConfig& c, const ModelConstants& k,
                           const ParallelContext& par, int64_t layer, const LayerWeights& w,
                           const StepContext& step, KvCache& kv, Tensor& x,
                           ChosenIndices& chosen) {
  Allocator& a = *step.alloc;
  const int64_t N = x.dim(0), H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor h = Tensor::empty({N, H}, DType::kF32, MemTag::kActivation, a);
  ops::rms_norm(x, w.input_norm, eps, h);

  MlaAttention mla(c, k);
  Tensor q, q_resid;
  mla.project(w, step, kv.latent[layer], h, q, q_resid);
  switch (c.layer_indexer[layer]) {
    case io::IndexerKind::kFull:
      chosen = dsa_indexer(c, k, w, step, kv.index_key[layer], h, q_resid);
      break;
    case io::IndexerKind::kShared:
      break;  // reuse the most recent full layer's selection
    case io::IndexerKind::kNone:
      chosen.clear();
      break;
  }
  Tensor attn = mla.attend(w, step, kv.latent[layer], q, chosen);
  if (par.tp_size > 1) par.comm->all_reduce(attn);
  ops::add(x, attn, x);

  ops::rms_norm(x, w.post_attention_norm, eps, h);
  Tensor mlp_out = Tensor::empty({N, H}, DType::kF32, MemTag::kActivation, a);
  if (c.layer_is_moe[layer])
    moe_forward(c, w, h, mlp_out, a);
  else
    mlp_forward(w.dense, h, mlp_out, a);
  if (par.tp_size > 1) par.comm->all_reduce(mlp_out);
  ops::add(x, mlp_out, x);
}

}  // namespace mls
