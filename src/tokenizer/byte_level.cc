#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace mls::tok {
namespace {

struct Tables {
  std::array<std::string, 256> symbol;
  // Every code point of the alphabet is below 324 (256 + 68 remapped bytes).
  std::array<int16_t, 324> byte_of;

  Tables() {
    byte_of.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes stand for themselves; the rest are shifted past 255 in order.
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int cp = printable ? b : next++;
      append_utf8(symbol[b], static_cast<char32_t>(cp));
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_symbol(unsigned char byte) {
  return tables().symbol[byte];
}

std::optional<unsigned char> symbol_to_byte(char32_t cp) {
  if (cp >= tables().byte_of.size() || tables().byte_of[cp] < 0) return std::nullopt;
  return static_cast<unsigned char>(tables().byte_of[cp]);
}

std::string byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char32_t cp : utf8_to_u32(token)) {
    const auto b = symbol_to_byte(cp);
    if (!b) return std::string(token);
    out += static_cast<char>(*b);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += byte_to_symbol(b);
  return out;
}

}  // namespace mls::tok
