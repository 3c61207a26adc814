#include "grammar/vocabulary.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace mls::grammar {

Vocabulary::Vocabulary(std::vector<Token> tokens) : tokens_(std::move(tokens)) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].bytes.empty()) tokens_[i].matchable = false;
    if (tokens_[i].matchable) ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return tokens_[a].bytes < tokens_[b].bytes || (tokens_[a].bytes == tokens_[b].bytes && a < b);
  });
  // Sorted tokens give the trie's depth-first order: a token adds nodes for the bytes past its
  // common prefix with the previous one.
  std::vector<int32_t> path;  // node index at each depth - 1
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& b = tokens_[id].bytes;
    if (b.size() > std::numeric_limits<uint16_t>::max())
      raise<InvalidArgument>("token {} is {} bytes long", id, b.size());
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < b.size() && (*prev)[common] == b[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < b.size(); ++d) {
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back({static_cast<uint8_t>(b[d]), static_cast<uint16_t>(d + 1), 0,
                       static_cast<int32_t>(trie_tokens_.size()),
                       static_cast<int32_t>(trie_tokens_.size())});
    }
    Node& leaf = trie_[path.back()];
    if (leaf.tokens_end != static_cast<int32_t>(trie_tokens_.size()))
      raise<InvalidArgument>("vocabulary trie: tokens of one node are not contiguous");
    trie_tokens_.push_back(id);
    leaf.tokens_end = static_cast<int32_t>(trie_tokens_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(b.size()));
    prev = &b;
  }
  // subtree_end: the next node at the same or a lower depth.
  std::vector<int32_t> open;
  for (size_t i = 0; i < trie_.size(); ++i) {
    while (!open.empty() && trie_[open.back()].depth >= trie_[i].depth) {
      trie_[open.back()].subtree_end = static_cast<int32_t>(i);
      open.pop_back();
    }
    open.push_back(static_cast<int32_t>(i));
  }
  for (int32_t i : open) trie_[i].subtree_end = static_cast<int32_t>(trie_.size());
  rank_.assign(tokens_.size(), -1);
  for (size_t i = 0; i < trie_tokens_.size(); ++i) rank_[trie_tokens_[i]] = static_cast<int32_t>(i);
}

Vocabulary Vocabulary::from_tokenizer(const tok::Tokenizer& tokenizer, int64_t model_vocab_size) {
  std::vector<Token> tokens(static_cast<size_t>(model_vocab_size));
  for (int32_t id = 0; id < model_vocab_size && id < tokenizer.vocab_size(); ++id) {
    try {
      tokens[id].bytes = tokenizer.token_bytes(id);
      tokens[id].matchable = !tokenizer.is_special(id);
    } catch (const InvalidArgument&) {
      // A hole in the tokenizer's id space: never produced.
    }
  }
  return Vocabulary(std::move(tokens));
}

}  // namespace mls::grammar
