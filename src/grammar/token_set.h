// A set of token ids over one vocabulary, stored in whichever form is smallest: the sorted ids,
// the sorted ids of the matchable tokens outside the set (a set holding almost every token,
// such as the characters allowed inside a JSON string), or a bitset of the vocabulary's mask
// layout. Immutable once built; `add_to` ORs it into a mask.
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
  // `ids`: distinct matchable tokens of `v`, in any order.
  TokenSet(std::vector<int32_t> ids, const Vocabulary& v);

  // `matchable`: the vocabulary's matchable_mask().
  void add_to(std::span<uint32_t> mask, std::span<const uint32_t> matchable) const;
  size_t size() const { return size_; }
  size_t bytes() const { return data_.size() * sizeof(uint32_t); }

 private:
  enum class Form : uint8_t { kIds, kComplement, kBits };
  Form form_ = Form::kIds;
  size_t size_ = 0;
  std::vector<uint32_t> data_;  // ids, complement ids or mask words
};

}  // namespace mls::grammar
