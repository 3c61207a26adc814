// The paged KV cache of one rank: per layer, the post-RoPE MLA latent [c, k_rot]
// (kv_lora_rank + qk_rope_head_dim values per token) and, for layers that own a DSA indexer,
// the indexer key (index_head_dim values per token). Token slot = block · block_size + offset.
// Shared-indexer layers store no indexer keys. The latent is replicated on every TP rank.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"

namespace mls {

struct KvCache {
  int64_t block_size = 0;
  int64_t num_blocks = 0;
  // The steps' block tables at a fixed shape [max_num_seqs, ceil(max_model_len / block_size)]
  // (a serving runner's, from its limits): the same shape, and the step workspace's first
  // allocation (the same address), whatever the batch — what CUDA graph replay needs. 0 rows:
  // each step's tables sized to its batch (tools and tests without serving limits).
  int64_t table_rows = 0, table_cols = 0;
  std::vector<Tensor> latent;     // per layer [num_blocks · block_size, rkv + dr]
  std::vector<Tensor> index_key;  // per layer [num_blocks · block_size, Di], or undefined

  // dtype: the device's activation dtype (f32 on the CPU, bf16 on the GPU). With `mtp`, the
  // MTP layers' caches follow the main layers' (layer num_hidden_layers + j).
  static KvCache allocate(const io::ModelConfig& c, int64_t num_blocks, int64_t block_size,
                          DType dtype, Allocator& alloc, bool mtp = false);
  // Bytes one token occupies across all layers (what the planner divides the budget by).
  static int64_t bytes_per_token(const io::ModelConfig& c, DType dtype, bool mtp = false);
};

}  // namespace mls
