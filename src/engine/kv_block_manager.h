// The paged KV pool: fixed-size blocks, reference counts, per-sequence block tables and prefix
// caching (vLLM V1 style). A full block is identified by a hash chained from its predecessor's
// hash and its own token ids, so equal hashes mean equal prefixes. A freed block that holds a
// hash is kept, evictable, in LRU order until another sequence reuses it or the pool needs it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace mls {

class KvBlockManager {
 public:
  KvBlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks a sequence could take now: never used, freed, or cached but unreferenced.
  int64_t num_available() const;
  // Fraction of the pool referenced by sequences (cached-but-free blocks count as free).
  double usage() const;
  int ref_count(int32_t block) const { return meta_[block].refs; }
  int64_t blocks_for(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // Hashes of the full blocks of `tokens` not yet in `hashes` (the chain grows in place).
  // `salt` separates chains whose KV differs for the same tokens.
  void extend_hashes(std::span<const int32_t> tokens, uint64_t salt,
                     std::vector<uint64_t>& hashes) const;
  // Takes the longest run of cached blocks matching `hashes` into the empty `table`, leaving at
  // least one of `num_tokens` to compute, and returns the number of tokens they hold. Counts a
  // query of num_tokens and the hit tokens.
  int64_t take_cached_prefix(std::span<const uint64_t> hashes, int64_t num_tokens,
                             std::vector<int32_t>& table);
  // Grows `table` to cover num_tokens; false (and no change) when the pool is short.
  bool allocate(std::vector<int32_t>& table, int64_t num_tokens);
  // Shares the first `count` blocks of `src` into the empty `dst` (a reference each).
  void share(std::span<const int32_t> src, int64_t count, std::vector<int32_t>& dst);
  // Drops the table's references and clears it; cached blocks become evictable, newest last.
  void free(std::vector<int32_t>& table);
  // Publishes the table's blocks that `hashes` covers (full, computed blocks) for reuse.
  void cache_blocks(std::span<const int32_t> table, std::span<const uint64_t> hashes);

  int64_t prefix_queries() const { return queries_; }  // tokens looked up
  int64_t prefix_hits() const { return hits_; }        // tokens found cached

 private:
  struct Meta {
    int refs = 0;
    bool hashed = false;
    uint64_t hash = 0;
    int32_t prev = -1, next = -1;  // evictable LRU links
  };
  int32_t pop_block();
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);

  int64_t num_blocks_, block_size_;
  bool prefix_caching_;
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;  // unhashed free blocks (a stack)
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t lru_size_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // hash → block
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace mls
