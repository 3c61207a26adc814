// Per-forward facts shared by every layer: token positions, cache slots and per-sequence
// offsets, plus the constants derived once from the config (RoPE tables, scales, local sizes).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"
#include "model/forward_batch.h"
#include "ops/rope.h"
#include "parallel/communicator.h"

namespace mls {

struct ModelConstants {
  ops::RopeTable rope;  // shared by MLA and the indexer (same rotary dim and scaling)
  ops::RopeStyle mla_rope_style = ops::RopeStyle::kInterleaved;
  ops::RopeStyle indexer_rope_style = ops::RopeStyle::kHalfSplit;
  float softmax_scale = 1.0f;
  int64_t local_heads = 0;
  int64_t vocab_start = 0, local_vocab = 0;

  static ModelConstants make(const io::ModelConfig& c, const ParallelContext& p);
};

struct StepContext {
  const ForwardBatch* batch = nullptr;
  Tensor positions;                // i32 [N]
  std::vector<int64_t> slots;      // cache slot of each new token
  std::vector<int64_t> seq_start;  // first token row of each sequence
  int64_t block_size = 0;
  Allocator* alloc = nullptr;

  StepContext(const ForwardBatch& b, int64_t block_size, Allocator& alloc);
  // Cache slot of position p of sequence s.
  int64_t slot(size_t s, int64_t p) const {
    const auto& bt = batch->seqs[s].block_table;
    return static_cast<int64_t>(bt[p / block_size]) * block_size + p % block_size;
  }
  // Rows of this sequence's new tokens in a [N, ...] tensor.
  Tensor seq_rows(size_t s, const Tensor& x) const {
    return x.narrow(0, seq_start[s], batch->seqs[s].num_new);
  }
};

}  // namespace mls
