// Added tokens (special like "<|user|>" and plain like "<think>") are matched in the raw text
// before pre-tokenization, so that BPE never splits them: leftmost match first, the longest one
// when several start at the same byte, as Hugging Face tokenizers' Aho-Corasick pass does.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace mls::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;  // only match when not inside a word
  bool lstrip = false;       // also swallow white space on the left
  bool rstrip = false;       // also swallow white space on the right
};

// A stretch of input: plain text for the pre-tokenizer, or one added token.
struct Segment {
  std::string_view text;
  int32_t added_id = -1;  // >= 0 when this segment is an added token
};

class AddedVocabulary {
 public:
  // Reads tokenizer.json's "added_tokens" array.
  static AddedVocabulary from_json(const nlohmann::json& added_tokens);

  // Cuts `text` into plain-text segments and added-token segments, in order.
  std::vector<Segment> split(std::string_view text) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // The token matching at `pos` (longest first), or nullptr.
  const AddedToken* match_at(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  // For each first byte, indices into tokens_ ordered longest first.
  std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);
};

}  // namespace mls::tok
