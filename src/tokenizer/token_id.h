// Token ids read from tokenizer.json. The tokenizer indexes tables by id, so an id is checked
// before it is used: a negative, fractional, non-numeric or absurdly large one is a ConfigError
// naming where it was found, never an out-of-bounds write or a multi-gigabyte table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/error.h"

namespace mls::tok {

// Ids must lie below this: 32 times the largest vocabulary in use (~130k-260k).
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;

inline int32_t token_id(const nlohmann::json& v, std::string_view where) {
  if (!v.is_number_integer() ||
      (v.is_number_unsigned() && v.get<uint64_t>() >= static_cast<uint64_t>(kMaxVocabSize)) ||
      v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxVocabSize)
    raise<ConfigError>("tokenizer.json: {}: token id {} is not an integer in [0, {})", where,
                       v.dump(), kMaxVocabSize);
  return static_cast<int32_t>(v.get<int64_t>());
}

}  // namespace mls::tok
