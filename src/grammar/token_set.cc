#include "grammar/token_set.h"

#include <algorithm>
#include <cstring>

namespace mls::grammar {

TokenSet::TokenSet(std::vector<int32_t> ids, const Vocabulary& v) : size_(ids.size()) {
  const auto words = static_cast<size_t>(v.mask_words());
  if (ids.size() <= words) {
    std::sort(ids.begin(), ids.end());
    data_.assign(ids.begin(), ids.end());
    return;
  }
  bits_ = true;
  data_.assign(words, 0u);
  for (int32_t t : ids) data_[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
}

void TokenSet::add_to(std::span<uint32_t> mask) const {
  if (bits_) {
    for (size_t w = 0; w < data_.size(); ++w) mask[w] |= data_[w];
  } else {
    for (uint32_t t : data_) mask[t >> 5] |= 1u << (t & 31);
  }
}

void TokenSet::copy_to(std::span<uint32_t> mask) const {
  if (bits_) {
    std::memcpy(mask.data(), data_.data(), data_.size() * sizeof(uint32_t));
    return;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  add_to(mask);
}

}  // namespace mls::grammar
