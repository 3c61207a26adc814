// A set of token ids over one vocabulary, stored in whichever form is smaller: the sorted ids or
// a bitset of the vocabulary's mask layout. Immutable once built; `add_to` ORs it into a mask,
// `copy_to` makes a mask of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "grammar/vocabulary.h"

namespace mls::grammar {

class TokenSet {
 public:
  TokenSet() = default;
  // `ids`: distinct tokens of `v`, in any order.
  TokenSet(std::vector<int32_t> ids, const Vocabulary& v);
  // The tokens of `mask` (v.mask_words() words).
  static TokenSet from_mask(std::vector<uint32_t> mask, const Vocabulary& v);

  void add_to(std::span<uint32_t> mask) const;
  void copy_to(std::span<uint32_t> mask) const;
  size_t size() const { return size_; }
  size_t bytes() const { return data_.size() * sizeof(uint32_t); }

 private:
  bool bits_ = false;
  size_t size_ = 0;
  std::vector<uint32_t> data_;  // sorted ids, or mask words
};

}  // namespace mls::grammar
