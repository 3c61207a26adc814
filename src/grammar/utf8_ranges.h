// Unicode code point ranges as sequences of byte ranges (the UTF-8 encodings of exactly those
// code points, surrogates excluded), so that character classes match raw bytes and a token
// that ends inside a character (a partial UTF-8 sequence) is matched byte by byte.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mls::grammar {

struct ByteRange {
  uint8_t lo, hi;
};
using ByteSequence = std::vector<ByteRange>;

// Sorted, merged, surrogate-free ranges; `negated` takes the complement in [0, 0x10FFFF].
std::vector<std::pair<char32_t, char32_t>> normalise_ranges(
    std::vector<std::pair<char32_t, char32_t>> ranges, bool negated);

// The byte sequences of [lo, hi] (no surrogates inside), each position a byte range.
std::vector<ByteSequence> utf8_sequences(char32_t lo, char32_t hi);

}  // namespace mls::grammar
