// UTF-8 helpers shared by the tokenizer and the chat layer. Decoding follows the "maximal
// subpart" rule (one U+FFFD per maximal invalid subsequence), which is what Rust's
// String::from_utf8_lossy does and therefore what Hugging Face tokenizers return.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mls::tok {

// Appends the UTF-8 encoding of code point `cp` to `out`.
void append_utf8(std::string& out, char32_t cp);

// The well-formed code point at the front of `s` and its length in bytes; length 0 when `s`
// does not start with one (or is empty).
struct CodePoint {
  char32_t cp = 0;
  size_t len = 0;
};
CodePoint read_utf8(std::string_view s);

// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// Replaces every maximal invalid subsequence of `bytes` with U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Length of the longest prefix of `bytes` whose lossy decoding can no longer change when more
// bytes are appended: everything except a trailing, still-completable partial code point.
size_t utf8_settled_prefix(std::string_view bytes);

// Code points of well-formed UTF-8 `s` (invalid bytes decode to U+FFFD).
std::u32string utf8_to_u32(std::string_view s);
std::string u32_to_utf8(std::u32string_view s);

}  // namespace mls::tok
