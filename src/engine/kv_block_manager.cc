#include "engine/kv_block_manager.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"

namespace mls {
namespace {}  // namespace

uint64_t chained_block_hash(uint64_t prev, std::span<const int32_t> tokens) {
  uint64_t h = splitmix64(prev);
  for (int32_t t : tokens) h = splitmix64(h ^ static_cast<uint32_t>(t));
  return h;
}

KvBlockManager::KvBlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                               BlockHashFn hash)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      hash_(hash) {
  if (num_blocks < 1 || block_size < 1)
    raise<InvalidArgument>("the KV pool needs num_blocks >= 1 and block_size >= 1 (got {}, {})",
                           num_blocks, block_size);
  meta_.resize(num_blocks);
  if (prefix_caching_) block_tokens_.resize(num_blocks * block_size);
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t KvBlockManager::num_available() const {
  return static_cast<int64_t>(free_.size()) + lru_size_;
}

double KvBlockManager::usage() const {
  return 1.0 - static_cast<double>(num_available()) / static_cast<double>(num_blocks_);
}

void KvBlockManager::extend_hashes(std::span<const int32_t> tokens,
                                   std::vector<uint64_t>& hashes) const {
  const auto full = static_cast<int64_t>(tokens.size()) / block_size_;
  for (auto b = static_cast<int64_t>(hashes.size()); b < full; ++b)
    hashes.push_back(hash_(b == 0 ? kFirstBlockParent : hashes[b - 1],
                           tokens.subspan(b * block_size_, block_size_)));
}

bool KvBlockManager::holds(int32_t b, std::span<const int32_t> tokens, int64_t i,
                           uint64_t parent) const {
  const Meta& m = meta_[b];
  return m.hashed && m.parent == parent &&
         std::equal(tokens.begin() + i * block_size_, tokens.begin() + (i + 1) * block_size_,
                    block_tokens_.begin() + b * block_size_);
}

int64_t KvBlockManager::take_cached_prefix(std::span<const int32_t> tokens,
                                           std::span<const uint64_t> hashes,
                                           std::vector<int32_t>& table) {
  MLS_CHECK(table.empty(), "a cached prefix goes into an empty table");
  if (!prefix_caching_) return 0;
  const auto num_tokens = static_cast<int64_t>(tokens.size());
  queries_ += num_tokens;
  // At least one token must run so that the step yields logits.
  const int64_t max_blocks =
      std::min<int64_t>(static_cast<int64_t>(hashes.size()), (num_tokens - 1) / block_size_);
  uint64_t parent = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const auto it = cached_.find(hashes[i]);
    if (it == cached_.end() || !holds(it->second, tokens, i, parent)) break;
    const int32_t b = it->second;
    if (meta_[b].refs++ == 0) lru_remove(b);
    table.push_back(b);
    parent = meta_[b].id;
  }
  const int64_t hit = static_cast<int64_t>(table.size()) * block_size_;
  hits_ += hit;
  return hit;
}

int32_t KvBlockManager::pop_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = lru_head_;
    lru_remove(b);
    const auto it = cached_.find(meta_[b].hash);
    if (it != cached_.end() && it->second == b) cached_.erase(it);
    meta_[b].hashed = false;
  }
  meta_[b].refs = 1;
  return b;
}

bool KvBlockManager::allocate(std::vector<int32_t>& table, int64_t num_tokens) {
  const int64_t need = blocks_for(num_tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > num_available()) return false;
  for (int64_t i = 0; i < need; ++i) table.push_back(pop_block());
  return true;
}

void KvBlockManager::share(std::span<const int32_t> src, int64_t count, std::vector<int32_t>& dst) {
  MLS_CHECK(dst.empty() && count <= static_cast<int64_t>(src.size()), "bad share of {} blocks",
            count);
  for (int64_t i = 0; i < count; ++i) {
    ++meta_[src[i]].refs;
    dst.push_back(src[i]);
  }
}

void KvBlockManager::free(std::vector<int32_t>& table) {
  // Release from the tail so that a sequence's later blocks are evicted before its prefix.
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    Meta& m = meta_[*it];
    MLS_CHECK(m.refs > 0, "block {} freed twice", *it);
    if (--m.refs > 0) continue;
    if (m.hashed)
      lru_push_back(*it);
    else
      free_.push_back(*it);
  }
  table.clear();
}

void KvBlockManager::cache_blocks(std::span<const int32_t> tokens, std::span<const int32_t> table,
                                  std::span<const uint64_t> hashes) {
  if (!prefix_caching_) return;
  MLS_CHECK(
      static_cast<int64_t>(hashes.size()) * block_size_ <= static_cast<int64_t>(tokens.size()),
      "{} block hashes for {} tokens", hashes.size(), tokens.size());
  uint64_t parent = 0;  // id of the published block holding the prefix so far
  for (size_t i = 0; i < hashes.size() && i < table.size(); ++i) {
    const int32_t b = table[i];
    Meta& m = meta_[b];
    if (!m.hashed) {
      const auto it = cached_.find(hashes[i]);
      if (it != cached_.end() && holds(it->second, tokens, i, parent)) {
        // Another block already publishes this prefix: ours stays private.
        parent = meta_[it->second].id;
        continue;
      }
      if (it != cached_.end()) unpublish(it->second);  // stale chain or a collision
      cached_[hashes[i]] = b;
      m.hashed = true;
      m.hash = hashes[i];
      m.id = next_id_++;
      m.parent = parent;
      std::copy_n(tokens.begin() + i * block_size_, block_size_,
                  block_tokens_.begin() + b * block_size_);
    }
    parent = m.id;
  }
}

void KvBlockManager::unpublish(int32_t b) {
  Meta& m = meta_[b];
  cached_.erase(m.hash);
  m.hashed = false;
  if (m.refs == 0) {  // evictable until now: plain free
    lru_remove(b);
    free_.push_back(b);
  }
}

void KvBlockManager::lru_push_back(int32_t b) {
  meta_[b].prev = lru_tail_;
  meta_[b].next = -1;
  if (lru_tail_ >= 0)
    meta_[lru_tail_].next = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
  ++lru_size_;
}

void KvBlockManager::lru_remove(int32_t b) {
  Meta& m = meta_[b];
  if (m.prev >= 0)
    meta_[m.prev].next = m.next;
  else
    lru_head_ = m.next;
  if (m.next >= 0)
    meta_[m.next].prev = m.prev;
  else
    lru_tail_ = m.prev;
  m.prev = m.next = -1;
  --lru_size_;
}

}  // namespace mls
