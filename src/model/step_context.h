// Per-forward facts shared by every layer: token positions, cache slots, the paged-cache
// addressing of every sequence, and the constants derived once from the config (RoPE tables,
// scales, local sizes, the compute dtype). The per-step index tables are built on the host, in
// the rank's reused host staging (StepStaging), and reach the device in two copies (the tables,
// and the block tables apart), queued before the step's kernels, which never wait on the host.
#pragma once

#include <functional>
#include <string_view>

#include "core/host_buffer.h"
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
  // A token's results depend on nothing else in its step (--batch-invariant; vLLM's
  // VLLM_BATCH_INVARIANT): attention cuts every step alike (ops/attention.h). The CPU is invariant
  // by construction, and so are a GPU's bf16 GEMMs (cuBLASLt, ops/linear.h); a GPU's block-FP8
  // GEMMs and experts choose kernels by step size, so make() refuses that combination.
  bool batch_invariant = false;

  static ModelConstants make(const io::ModelConfig& c, const ParallelContext& p, Device device,
                             ops::TopkTieOrder topk_tie_order, bool batch_invariant);
};

// Receives named intermediates ("embed", "layer.L", "final_norm"; on full DSA indexer layers
// "layer.L.index_q", "layer.L.index_k", "layer.L.index_w") for conformance diffs.
using ForwardObserver = std::function<void(std::string_view name, const Tensor& t)>;

// The compute dtype of activations and cache on a device.
DType activation_dtype(Device device);

// A rank's host staging of its steps' index tables and block tables (core/host_buffer.h):
// allocated once from the serving limits by the model runner (page-locked on a CUDA rank) and
// bound to the rank's thread, so every step writes the same host memory and uploads it with one
// asynchronous copy per table. A thread with none bound (tools, tests driving a Model directly)
// uses a staging of its own that grows as its steps need.
class StepStaging {
 public:
  // i32 elements of the index tables of steps of up to `tokens` tokens (StepContext::index_elems
  // of any such step: positions, slots, sequences, row lengths, local ids, logit rows).
  static int64_t index_elems_for(int64_t tokens) { return 6 * tokens; }
  // Bytes staging steps of up to `tokens` tokens over block tables of [rows, cols].
  static int64_t bytes_for(int64_t tokens, int64_t table_rows, int64_t table_cols) {
    return 4 * (index_elems_for(tokens) + table_rows * table_cols);
  }
  // Sizes the buffers (page-locked when `pinned`), replacing the old ones.
  void reserve(int64_t tokens, int64_t table_rows, int64_t table_cols, bool pinned);
  // Room for a step of `index` and `table` i32 elements, once the device has read the last one:
  // grows (keeping pinned-ness) only past what reserve sized.
  void make_room(int64_t index, int64_t table);
  int64_t bytes() const { return index.bytes() + tables.bytes(); }
  // The step's copies are queued: the buffers may be rewritten once the device has read them.
  void mark_uploaded();

  HostBuffer index, tables;
  // Graph steps (engine/decode_graphs.h), when > 0: the fixed block tables' rows in use go up
  // whole and attention and the DSA indexer are planned for this many keys (the planned
  // max_model_len), so that the step's launches depend on its batch size only, never on its
  // contexts. Set by the runner around a captured or replayed step.
  int64_t full_reach_keys = 0;

  // The staging this thread's steps use.
  static void bind(StepStaging* staging);
  static StepStaging& current();

 private:
  bool pinned_ = false;
};

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
  // i32 elements of the step's index buffer, block tables apart.
  static int64_t index_elems(const ForwardBatch& b, int64_t local_rows);
  // Writes the step's index and block tables into `staging` (what the constructor uploads) and
  // returns its max_keys; a replayed graph step (engine/decode_graphs.h) does only this.
  static int64_t stage(const ForwardBatch& b, int64_t block_size, const TableShape& table,
                       int64_t first_row, int64_t local_rows, StepStaging& staging);
};

}  // namespace mls
