#include "grammar/hex_escape.h"

#include <cctype>
#include <cstdint>

namespace mls::grammar {

std::optional<char32_t> read_hex_escape(std::string_view s, size_t& pos, int digits) {
  uint64_t v = 0;
  for (int i = 0; i < digits; ++i, ++pos) {
    if (pos >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[pos]))) return std::nullopt;
    const auto c = static_cast<unsigned char>(s[pos]);
    v = v * 16 + static_cast<uint64_t>(std::isdigit(c) ? c - '0' : std::tolower(c) - 'a' + 10);
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return std::nullopt;
  return static_cast<char32_t>(v);
}

}  // namespace mls::grammar
