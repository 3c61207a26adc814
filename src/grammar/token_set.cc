#include "grammar/token_set.h"

#include <algorithm>
#include <bit>

namespace mls::grammar {

TokenSet::TokenSet(std::vector<int32_t> ids, const Vocabulary& v) : size_(ids.size()) {
  const std::vector<uint32_t>& matchable = v.matchable_mask();
  const size_t words = matchable.size();
  const size_t outside = static_cast<size_t>(v.num_matchable()) - ids.size();
  if (ids.size() <= words && ids.size() <= outside) {
    form_ = Form::kIds;
    std::sort(ids.begin(), ids.end());
    data_.assign(ids.begin(), ids.end());
    return;
  }
  std::vector<uint32_t> bits(words, 0u);
  for (int32_t t : ids) bits[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
  if (outside > words) {
    form_ = Form::kBits;
    data_ = std::move(bits);
    return;
  }
  form_ = Form::kComplement;
  data_.reserve(outside);
  for (size_t w = 0; w < words; ++w)
    for (uint32_t b = matchable[w] & ~bits[w]; b; b &= b - 1)
      data_.push_back(static_cast<uint32_t>(w * 32 + static_cast<size_t>(std::countr_zero(b))));
}

void TokenSet::add_to(std::span<uint32_t> mask, std::span<const uint32_t> matchable) const {
  switch (form_) {
    case Form::kIds:
      for (uint32_t t : data_) mask[t >> 5] |= 1u << (t & 31);
      return;
    case Form::kBits:
      for (size_t w = 0; w < data_.size(); ++w) mask[w] |= data_[w];
      return;
    case Form::kComplement: {
      // The matchable words in runs (vectorised), each listed id's word with its bits cleared.
      size_t w = 0;
      for (size_t k = 0; k < data_.size();) {
        const size_t cw = data_[k] >> 5;
        for (; w < cw; ++w) mask[w] |= matchable[w];
        uint32_t clear = 0;
        for (; k < data_.size() && (data_[k] >> 5) == cw; ++k) clear |= 1u << (data_[k] & 31);
        mask[cw] |= matchable[cw] & ~clear;
        w = cw + 1;
      }
      for (; w < matchable.size(); ++w) mask[w] |= matchable[w];
      return;
    }
  }
}

}  // namespace mls::grammar
