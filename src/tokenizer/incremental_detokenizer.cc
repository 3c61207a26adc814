#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace mls::tok {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  const std::string& bytes = tokenizer_->token_bytes(id);
  if (skip_special_ && tokenizer_->is_special(id)) return "";
  pending_ += bytes;
  const size_t settled = utf8_settled_prefix(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, settled));
  pending_.erase(0, settled);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace mls::tok
