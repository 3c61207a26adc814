#include "model/kv_cache.h"

#include "core/error.h"

namespace mls {

static int64_t num_layers(const io::ModelConfig& c, bool mtp) {
  return c.num_hidden_layers + (mtp ? c.num_nextn_predict_layers : 0);
}

KvCache KvCache::allocate(const io::ModelConfig& c, int64_t num_blocks, int64_t block_size,
                          DType dtype, Allocator& alloc, bool mtp) {
  if (block_size < 1 || num_blocks < 1)
    raise<InvalidArgument>("KV cache needs block_size >= 1 and num_blocks >= 1 (got {} and {})",
                           block_size, num_blocks);
  KvCache kv;
  kv.block_size = block_size;
  kv.num_blocks = num_blocks;
  const int64_t slots = num_blocks * block_size;
  for (int64_t L = 0; L < num_layers(c, mtp); ++L) {
    kv.latent.push_back(
        Tensor::zeros({slots, c.kv_lora_rank + c.qk_rope_head_dim}, dtype, MemTag::kKv, alloc));
    kv.index_key.push_back(c.indexer(L) == io::IndexerKind::kFull
                               ? Tensor::zeros({slots, c.index_head_dim}, dtype, MemTag::kKv, alloc)
                               : Tensor());
  }
  return kv;
}

int64_t KvCache::bytes_per_token(const io::ModelConfig& c, DType dtype, bool mtp) {
  int64_t values = 0;
  for (int64_t L = 0; L < num_layers(c, mtp); ++L) {
    values += c.kv_lora_rank + c.qk_rope_head_dim;
    if (c.indexer(L) == io::IndexerKind::kFull) values += c.index_head_dim;
  }
  return values * static_cast<int64_t>(dtype_size(dtype));
}

}  // namespace mls
