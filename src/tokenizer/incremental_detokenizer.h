// Streaming detokenization: turns generated ids into text as soon as it is final. A token may
// end in the middle of a multi-byte character (byte-level BPE splits emoji and CJK freely), so
// bytes of a still-completable partial character are held back until the next token settles
// them. The concatenation of every push() and the final flush() equals Tokenizer::decode of all
// ids with the same skip_special setting.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace mls::tok {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special);

  // Text that became final with `id` (often empty while a character is incomplete).
  std::string push(int32_t id);
  // Whatever is held back, with an unfinished character replaced by U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete trailing character
};

}  // namespace mls::tok
