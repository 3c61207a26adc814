// A loaded model shard on one rank: config, weights and derived constants, with forward() over
// a batch of sequence chunks and the paged KV cache. The three supported families are
// configurations of this one implementation.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "io/model_config.h"
#include "model/forward_batch.h"
#include "model/kv_cache.h"
#include "model/model_weights.h"
#include "model/step_context.h"

namespace mls {

struct LoadOptions {
  LoadFormat format = LoadFormat::kAuto;
  ParallelContext parallel;
  Allocator* alloc = nullptr;  // default_allocator() when null
  ops::TopkTieOrder topk_tie_order = ops::kDefaultTopkTieOrder;
  bool batch_invariant = false;           // ModelConstants::batch_invariant
  WeightLoadProgress progress = nullptr;  // optional
  bool mtp = false;                       // also load the MTP layers (speculative decoding)
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const LoadOptions& opts);
  // Unsupported for batch invariance on a GPU with block-FP8 weights (ModelConstants).
  Model(io::ModelConfig config, ModelWeights weights, const ParallelContext& par, Allocator& alloc,
        ops::TopkTieOrder topk_tie_order, bool batch_invariant);

  const io::ModelConfig& config() const { return config_; }
  const ParallelContext& parallel() const { return par_; }
  Allocator& allocator() const { return *alloc_; }
  ops::TopkTieOrder topk_tie_order() const { return k_.topk_tie_order; }
  bool batch_invariant() const { return k_.batch_invariant; }

  // Logits [num_logit_rows, vocab_size] for the rows the batch asks for, in batch order.
  // `hidden`, when given, receives every token's final hidden state (after model.norm,
  // [num_tokens, H]): what the MTP layer reads.
  Tensor forward(const ForwardBatch& batch, KvCache& kv, const ForwardObserver& observer = nullptr,
                 Tensor* hidden = nullptr) const;

  // MTP layer `j` (loaded with LoadOptions::mtp; docs/reference.md) over a batch whose token at
  // position i is t_{i+1}, the token that followed position i, and `prev_hidden` row i its
  // h_i [num_tokens, H] (the main model's final hidden state, or the previous draft step's
  // `hidden`). Writes the MTP layer's cache (layer num_hidden_layers + j of a KvCache allocated
  // with its MTP layers) at those positions; returns the logits of the batch's logit rows (each
  // predicts t_{i+2}); `hidden` receives every row's block output.
  Tensor forward_mtp(const ForwardBatch& batch, const Tensor& prev_hidden, KvCache& kv,
                     Tensor& hidden, int64_t j = 0) const;
  int64_t num_mtp_layers() const { return static_cast<int64_t>(w_.mtp.size()); }
  // Why a decode step of this model waits on the host ("" when it never does): what keeps it
  // out of a CUDA graph.
  std::string decode_host_sync() const;

 private:
  // InvalidArgument for an id outside the vocabulary (ids index the embedding).
  void check_token_ids(const ForwardBatch& batch) const;
  // Logits of the normed rows [R, H] through the vocab-parallel lm_head.
  Tensor lm_head(const Tensor& rows) const;

  io::ModelConfig config_;
  ModelWeights w_;
  ParallelContext par_;
  Allocator* alloc_;
  ModelConstants k_;
};

}  // namespace mls
