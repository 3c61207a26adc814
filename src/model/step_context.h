// Per-forward facts shared by every layer: token positions, cache slots, the paged-cache
// addressing of every sequence, and the constants derived once from the config (RoPE tables,
// scales, local sizes, the compute dtype). The per-step index tables are built on the host and
// reach the device in two copies (the tables, and the block tables apart), queued before the
// step's kernels, which never wait on the host.
#pragma once

#include <functional>
#include <string_view>

#include "core/tensor.h"
#include "io/model_config.h"
#include "model/forward_batch.h"
#include "ops/attention.h"
#include "ops/indexer_topk.h"
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
  // Activations and the KV cache: f32 on the CPU, bf16 on the GPU (fp32 accumulation there).
  DType act = DType::kF32;
  ops::TopkTieOrder topk_tie_order = ops::kDefaultTopkTieOrder;  // the DSA indexer's

  static ModelConstants make(const io::ModelConfig& c, const ParallelContext& p, Device device,
                             ops::TopkTieOrder topk_tie_order);
};

// Receives named intermediates ("embed", "layer.L", "final_norm"; on full DSA indexer layers
// "layer.L.index_q", "layer.L.index_k", "layer.L.index_w") for conformance diffs.
using ForwardObserver = std::function<void(std::string_view name, const Tensor& t)>;

// The compute dtype of activations and cache on a device.
DType activation_dtype(Device device);

struct StepContext {
  int64_t block_size = 0;
  Allocator* alloc = nullptr;
  int64_t max_keys = 0;  // longest key range (or DSA prompt row) of any token
  // On the step's device, i32, views into one buffer (block tables apart, tag workspace):
  Tensor positions;      // [N] position of each new token
  Tensor slots;          // [N] cache slot of each new token
  Tensor token_seq;      // [N] sequence of each new token
  Tensor index_row_len;  // [N] DSA top-k row length (prompt length for prompt tokens)
  Tensor block_tables;   // [num_seqs, max_blocks], or the fixed [table rows, cols] (rows in use)
  Tensor local_ids;      // [L] token ids of this rank's rows of the layout (−1: padding)
  Tensor logit_rows;     // [R] rows that produce logits

  // The forward's observer, if any (layers give it replicated tensors only).
  ForwardObserver observer;

  // The block tables' fixed shape (KvCache::table_rows, table_cols); 0 rows: the batch's.
  struct TableShape {
    int64_t rows = 0, cols = 0;
  };
  // `first_row`, `local_rows`: this rank's rows of the residual layout.
  StepContext(const ForwardBatch& b, int64_t block_size, const TableShape& table, int64_t first_row,
              int64_t local_rows, Allocator& alloc);
  ops::PagedKeys pages() const {
    return {.block_tables = &block_tables,
            .token_seq = &token_seq,
            .block_size = block_size,
            .max_keys = max_keys};
  }
  // i32 elements of the step's index buffer, block tables apart (the memory footprint mirrors
  // it).
  static int64_t index_elems(const ForwardBatch& b, int64_t local_rows);
};

}  // namespace mls
