#include "model/model.h"

#include <algorithm>

#include "core/error.h"
#include "model/decoder_layer.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "parallel/token_layout.h"

namespace mls {

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, const LoadOptions& opts) {
  Allocator& alloc = opts.alloc ? *opts.alloc : default_allocator();
  io::ModelConfig config = io::ModelConfig::load(dir);
  std::optional<io::Checkpoint> ckpt;
  if (opts.format == LoadFormat::kAuto) {
    ckpt = io::Checkpoint::open(dir);
    if (config.quant.fp8) ckpt->set_fp8_block_size(config.quant.block_n, config.quant.block_k);
  }
  ModelWeights w = load_weights(config, opts.parallel, ckpt ? &*ckpt : nullptr, opts.format, alloc,
                                opts.progress, opts.mtp);
  return std::make_unique<Model>(std::move(config), std::move(w), opts.parallel, alloc,
                                 opts.topk_tie_order, opts.batch_invariant);
}

Model::Model(io::ModelConfig config, ModelWeights weights, const ParallelContext& par,
             Allocator& alloc, ops::TopkTieOrder topk_tie_order, bool batch_invariant)
    : config_(std::move(config)),
      w_(std::move(weights)),
      par_(par),
      alloc_(&alloc),
      k_(ModelConstants::make(config_, par_, alloc.device(), topk_tie_order, batch_invariant)) {
  if (par_.tp_size > 1 && !par_.comm)
    raise<InternalError>("tensor parallelism of {} without a communicator", par_.tp_size);
  // Absorbed decode needs W_UKᵀ per local head: [rkv, dn] from kv_b_proj's k rows.
  const int64_t nh = k_.local_heads, dn = config_.qk_nope_head_dim, dv = config_.v_head_dim;
  const int64_t rkv = config_.kv_lora_rank;
  auto absorb = [&](LayerWeights& l) {
    l.w_uk_t = Tensor::empty({nh, rkv, dn}, l.kv_b_proj.dtype(), MemTag::kWeights, alloc);
    ops::copy(l.kv_b_proj.view({nh, dn + dv, rkv}).narrow(1, 0, dn).transpose(1, 2), l.w_uk_t);
  };
  for (LayerWeights& l : w_.layers) absorb(l);
  for (MtpWeights& m : w_.mtp) absorb(m.block);
}

Tensor Model::forward(const ForwardBatch& batch, KvCache& kv, const ForwardObserver& observer,
                      Tensor* hidden) const {
  const ops::Bf16LinearsByStepSize by_size(config_.quant.fp8);  // see ops/linear.h
  Allocator& a = *alloc_;
  const auto act = MemTag::kActivation;
  const int64_t N = batch.num_tokens(), H = config_.hidden_size;
  check_token_ids(batch);

  // The residual stream's layout for this step; the profiling pass takes this same path.
  const TokenLayout layout = par_.sequence_parallel && par_.tp_size > 1
                                 ? TokenLayout::sharded(N, par_.tp_size, par_.rank)
                                 : TokenLayout::replicated(N);
  const int64_t L = layout.local_rows();
  // This rank's rows of the token ids are staged with the step; padding rows embed to zeros.
  StepContext step(batch, kv.block_size, {kv.table_rows, kv.table_cols}, layout.first_row(), L, a);
  step.observer = observer;
  Tensor x = Tensor::empty({L, H}, k_.act, act, a);
  ops::embedding(w_.embed, step.local_ids, 0, x);

  auto observe = [&](std::string_view name, const Tensor& t) {
    if (!observer) return;
    observer(name, layout.is_sharded() ? all_gather_trim(t, layout, N, *par_.comm, a) : t);
  };
  observe("embed", x);
  Tensor chosen;
  PendingAdd pending;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    decoder_layer_forward(config_, k_, par_, layout, l, w_.layers[l], step, kv, x, pending, chosen);
    if (observer) {
      settle(x, pending);
      observe(fmt::format("layer.{}", l), x);
    }
  }
  norm_with_pending(x, pending, w_.final_norm, static_cast<float>(config_.rms_norm_eps), x);
  observe("final_norm", x);
  const Tensor normed = layout.is_sharded() ? all_gather_trim(x, layout, N, *par_.comm, a) : x;
  if (hidden) *hidden = normed;

  // Only the rows that produce logits go through lm_head.
  Tensor rows = Tensor::empty({batch.num_logit_rows(), H}, k_.act, act, a);
  ops::gather_rows(normed, step.logit_rows, rows);
  return lm_head(rows);
}

Tensor Model::forward_mtp(const ForwardBatch& batch, const Tensor& prev_hidden, KvCache& kv,
                          Tensor& hidden, int64_t j) const {
  const ops::Bf16LinearsByStepSize by_size(config_.quant.fp8);  // see ops/linear.h
  if (j < 0 || j >= num_mtp_layers())
    raise<InvalidArgument>("MTP layer {} requested; {} loaded", j, num_mtp_layers());
  if (par_.sequence_parallel && par_.tp_size > 1)
    raise<Unsupported>(
        "the MTP layer runs with a replicated residual stream, not under "
        "sequence parallelism");
  Allocator& a = *alloc_;
  const auto act = MemTag::kActivation;
  const int64_t N = batch.num_tokens(), H = config_.hidden_size;
  const int64_t layer = config_.num_hidden_layers + j;
  if (static_cast<int64_t>(kv.latent.size()) <= layer)
    raise<InvalidArgument>(
        "the KV cache holds {} layers; MTP layer {} needs it allocated with "
        "its MTP layers",
        kv.latent.size(), layer);
  if (prev_hidden.dim(0) != N || prev_hidden.dim(1) != H)
    raise<ShapeError>("MTP input hidden states {} for {} tokens of width {}",
                      prev_hidden.shape().str(), N, H);
  check_token_ids(batch);
  const MtpWeights& m = w_.mtp[static_cast<size_t>(j)];
  const TokenLayout layout = TokenLayout::replicated(N);
  StepContext step(batch, kv.block_size, {kv.table_rows, kv.table_cols}, 0, N, a);
  const auto eps = static_cast<float>(config_.rms_norm_eps);

  Tensor e = Tensor::empty({N, H}, k_.act, act, a);
  ops::embedding(w_.embed, step.local_ids, 0, e);
  ops::rms_norm(e, m.enorm, eps, e);
  // vLLM zeroes the embedding at position 0, where no hidden state precedes the token.
  int64_t row = 0;
  for (const SequenceChunk& sc : batch.seqs) {
    if (sc.num_cached == 0 && sc.num_new > 0) {
      Tensor first = e.narrow(0, row, 1);
      ops::scale(first, 0.0f, first);
    }
    row += sc.num_new;
  }
  Tensor g = Tensor::empty({N, H}, k_.act, act, a);
  ops::rms_norm(prev_hidden, m.hnorm, eps, g);
  // eh_proj · [e ; g], as its two column halves.
  hidden = Tensor::empty({N, H}, k_.act, act, a);
  ops::linear(e, m.eh_proj_e, hidden);
  ops::linear(g, m.eh_proj_h, hidden, /*accumulate=*/true);
  Tensor chosen;
  PendingAdd pending;
  decoder_layer_forward(config_, k_, par_, layout, layer, m.block, step, kv, hidden, pending,
                        chosen);
  settle(hidden, pending);

  Tensor rows = Tensor::empty({batch.num_logit_rows(), H}, k_.act, act, a);
  ops::gather_rows(hidden, step.logit_rows, rows);
  ops::rms_norm(rows, m.head_norm, eps, rows);
  return lm_head(rows);
}

std::string Model::decode_host_sync() const {
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l)
    if (config_.is_moe(l) && !w_.layers[static_cast<size_t>(l)].expert_table.defined())
      return fmt::format(
          "layer {}'s routed experts are not block-FP8 on the GPU, and their path reads the "
          "expert counts on the host",
          l);
  return "";
}

void Model::check_token_ids(const ForwardBatch& batch) const {
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= config_.vocab_size)
      raise<InvalidArgument>("token id {} outside the vocabulary of {}", id, config_.vocab_size);
}

Tensor Model::lm_head(const Tensor& rows) const {
  Allocator& a = *alloc_;
  const auto act = MemTag::kActivation;
  const int64_t R = rows.dim(0);
  Tensor local = Tensor::empty({R, k_.local_vocab}, DType::kF32, act, a);
  ops::linear(rows, w_.lm_head, local);
  if (par_.tp_size == 1) return local;
  // Vocab-parallel lm_head: gather the shards, then drop the padding past the vocabulary.
  Tensor gathered = Tensor::empty({par_.tp_size * R, k_.local_vocab}, DType::kF32, act, a);
  par_.comm->all_gather(local, gathered);
  Tensor logits = Tensor::empty({R, config_.vocab_size}, DType::kF32, act, a);
  for (int rk = 0; rk < par_.tp_size; ++rk) {
    const int64_t start = rk * k_.local_vocab;
    const int64_t n = std::min(k_.local_vocab, config_.vocab_size - start);
    if (n <= 0) continue;
    Tensor dst = logits.narrow(1, start, n);
    ops::copy(gathered.narrow(0, rk * R, R).narrow(1, 0, n), dst);
  }
  return logits;
}

}  // namespace mls
