// The \x, \u and \U escapes of GBNF and regular expressions: a fixed count of hex digits naming
// one Unicode scalar value.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace mls::grammar {

// The code point of the `digits` hex digits at s[pos] (pos advanced past them); nullopt when
// there are fewer, or they name a surrogate or a value past U+10FFFF (no UTF-8 encodes it, so no
// output could ever match it).
std::optional<char32_t> read_hex_escape(std::string_view s, size_t& pos, int digits);

}  // namespace mls::grammar
