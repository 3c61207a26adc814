#include "tokenizer/utf8.h"

namespace mls::tok {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Outcome of reading one code point at the front of a byte string.
struct Step {
  enum Kind { kValid, kInvalid, kTruncated } kind;
  size_t len;       // bytes consumed (the maximal subpart when invalid)
  char32_t cp = 0;  // the code point when valid
};

Step read_one(std::string_view s) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return {Step::kValid, 1, b0};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // excludes surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Step::kInvalid, 1};
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= s.size()) return {Step::kTruncated, k};
    const auto b = static_cast<unsigned char>(s[k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Step::kInvalid, k};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Step::kValid, need, cp};
}

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

CodePoint read_utf8(std::string_view s) {
  if (s.empty()) return {};
  const Step st = read_one(s);
  return st.kind == Step::kValid ? CodePoint{st.cp, st.len} : CodePoint{};
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Step st = read_one(s.substr(i));
    if (st.kind != Step::kValid) return false;
    i += st.len;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Step st = read_one(bytes.substr(i));
    if (st.kind == Step::kValid)
      out.append(bytes.substr(i, st.len));
    else
      out += kReplacement;
    i += st.len;
  }
  return out;
}

size_t utf8_settled_prefix(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Step st = read_one(bytes.substr(i));
    if (st.kind == Step::kTruncated) break;
    i += st.len;
  }
  return i;
}

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Step st = read_one(s.substr(i));
    out += st.kind == Step::kValid ? st.cp : U'\uFFFD';
    i += st.len;
  }
  return out;
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

}  // namespace mls::tok
