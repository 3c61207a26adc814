// The paged KV pool: fixed-size blocks, reference counts, per-sequence block tables and prefix
// caching (vLLM V1 style). A full block is looked up by a hash chained from its predecessor's
// hash and its own token ids. The hash only finds a candidate: a 64-bit collision must never
// reuse wrong KV, so a hit also needs the block's stored token ids to equal the sequence's and
// its recorded predecessor to be the block this lookup matched just before (every published
// block gets a fresh id; the first block of a sequence has none). A block's KV depends on
// nothing else (the DSA indexer's serving tie order makes a row's selection independent of the
// keys after it), so a cached block serves any continuation. A freed block that holds a hash is
// kept, evictable, in LRU order until another sequence reuses it or the pool needs it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace mls {

// Hash of a full block from its predecessor's hash (kFirstBlockParent for a sequence's first
// block) and its token ids.
using BlockHashFn = uint64_t (*)(uint64_t prev, std::span<const int32_t> tokens);
inline constexpr uint64_t kFirstBlockParent = 0x6d6c6173ULL;
uint64_t chained_block_hash(uint64_t prev, std::span<const int32_t> tokens);

class KvBlockManager {
 public:
  // `hash` is replaceable so that tests can force collisions.
  KvBlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                 BlockHashFn hash = chained_block_hash);

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
  void extend_hashes(std::span<const int32_t> tokens, std::vector<uint64_t>& hashes) const;
  // Takes the longest run of cached blocks holding `tokens`' prefix (found through `hashes`,
  // checked token by token) into the empty `table`, leaving at least one token to compute, and
  // returns the number of tokens they hold. Counts a query of tokens.size() and the hit tokens.
  int64_t take_cached_prefix(std::span<const int32_t> tokens, std::span<const uint64_t> hashes,
                             std::vector<int32_t>& table);
  // Grows `table` to cover num_tokens; false (and no change) when the pool is short.
  bool allocate(std::vector<int32_t>& table, int64_t num_tokens);
  // Shares the first `count` blocks of `src` into the empty `dst` (a reference each).
  void share(std::span<const int32_t> src, int64_t count, std::vector<int32_t>& dst);
  // Drops the table's references and clears it; cached blocks become evictable, newest last.
  void free(std::vector<int32_t>& table);
  // Publishes the table's blocks that `hashes` covers (full, computed blocks of `tokens`) for
  // reuse. Where a published block already holds the same prefix, ours stays private; a stale
  // or colliding entry under the same hash gives way to ours.
  void cache_blocks(std::span<const int32_t> tokens, std::span<const int32_t> table,
                    std::span<const uint64_t> hashes);

  int64_t prefix_queries() const { return queries_; }  // tokens looked up
  int64_t prefix_hits() const { return hits_; }        // tokens found cached

 private:
  struct Meta {
    int refs = 0;
    bool hashed = false;
    uint64_t hash = 0;
    uint64_t id = 0;               // while hashed: unique over the manager's life
    uint64_t parent = 0;           // while hashed: the predecessor's id, 0 for a first block
    int32_t prev = -1, next = -1;  // evictable LRU links
  };
  // Whether published block b holds block i of `tokens` right after the block with id `parent`.
  bool holds(int32_t b, std::span<const int32_t> tokens, int64_t i, uint64_t parent) const;
  void unpublish(int32_t b);
  int32_t pop_block();
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);

  int64_t num_blocks_, block_size_;
  bool prefix_caching_;
  BlockHashFn hash_;
  std::vector<Meta> meta_;
  std::vector<int32_t> block_tokens_;  // [num_blocks, block_size] token ids of published blocks
  uint64_t next_id_ = 1;
  std::vector<int32_t> free_;  // unhashed free blocks (a stack)
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int64_t lru_size_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // hash → block
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace mls
