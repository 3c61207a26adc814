// A loaded model shard on one rank: config, weights and derived constants, with forward() over
// a batch of sequence chunks and the paged KV cache. The three supported families are
// configurations of this one implementation.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
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
  WeightLoadProgress progress = nullptr;  // optional
  bool mtp = false;                       // also load the MTP layers (speculative decoding)
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::filesystem::path& dir, const LoadOptions& opts);
  Model(io::ModelConfig config, ModelWeights weights, const ParallelContext& par, Allocator& alloc,
        ops::TopkTieOrder topk_tie_order);

  const io::ModelConfig& config() const { return config_; }
  const ParallelContext& parallel() const { return par_; }
  Allocator& allocator() const { return *alloc_; }
  ops::TopkTieOrder topk_tie_order() const { return k_.topk_tie_order; }

  // Logits [num_logit_rows, vocab_size] for the rows the batch asks for, in batch order.
  Tensor forward(const ForwardBatch& batch, KvCache& kv,
                 const ForwardObserver& observer = nullptr) const;

 private:
  io::ModelConfig config_;
  ModelWeights w_;
  ParallelContext par_;
  Allocator* alloc_;
  ModelConstants k_;
};

}  // namespace mls
