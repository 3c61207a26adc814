// GPT-2's reversible byte <-> printable-character mapping. Byte-level BPE vocabularies spell
// every byte as one visible code point (space is "Ġ", newline "Ċ"), so that merges never see
// raw whitespace or control bytes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mls::tok {

// UTF-8 spelling of the code point that stands for `byte`.
const std::string& byte_to_symbol(unsigned char byte);

// The byte that code point `cp` stands for, or nullopt when `cp` is outside the alphabet.
std::optional<unsigned char> symbol_to_byte(char32_t cp);

// Decodes one vocabulary token as the ByteLevel decoder does: when every code point belongs to
// the alphabet the token becomes those bytes, otherwise (added tokens such as "<｜User｜>") its
// UTF-8 text is kept unchanged.
std::string byte_level_decode(std::string_view token);

// Spells raw bytes in the byte-level alphabet (the vocabulary form of a pre-token).
std::string byte_level_encode(std::string_view bytes);

}  // namespace mls::tok
