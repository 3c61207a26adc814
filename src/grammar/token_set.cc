#include "grammar/token_set.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace mls::grammar {
namespace {

// Bit counting by halves: std::popcount is a library call per word on the baseline x86-64
// target, this loop vectorises.
size_t bits_set(const std::vector<uint32_t>& words) {
  size_t n = 0;
  for (uint32_t w : words) {
    w = w - ((w >> 1) & 0x55555555u);
    w = (w & 0x33333333u) + ((w >> 2) & 0x33333333u);
    n += (((w + (w >> 4)) & 0x0F0F0F0Fu) * 0x01010101u) >> 24;
  }
  return n;
}

}  // namespace

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

TokenSet TokenSet::from_mask(std::vector<uint32_t> mask, const Vocabulary& v) {
  TokenSet s;
  s.size_ = bits_set(mask);
  if (s.size_ > static_cast<size_t>(v.mask_words())) {
    s.bits_ = true;
    s.data_ = std::move(mask);
    return s;
  }
  s.data_.reserve(s.size_);
  for (size_t i = 0; i < mask.size(); ++i)
    for (uint32_t w = mask[i]; w != 0; w &= w - 1)
      s.data_.push_back(static_cast<uint32_t>(i * 32 + static_cast<size_t>(std::countr_zero(w))));
  return s;
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
