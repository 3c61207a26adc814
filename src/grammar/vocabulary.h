// The model's vocabulary as the grammar matcher sees it: each token id's bytes (a byte-level
// BPE token may end inside a UTF-8 character), whether the grammar may match it through those
// bytes (special tokens such as EOS and role markers never are: the engine allows stop tokens
// itself when the grammar can end), and a trie of the matchable tokens in depth-first order, so
// that one walk tests every token against a grammar state and skips whole subtrees at the first
// byte that cannot follow.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mls::tok {
class Tokenizer;
}

namespace mls::grammar {

class Vocabulary {
 public:
  struct Token {
    std::string bytes;
    bool matchable = false;
  };
  // One trie node: the byte that leads to it, its depth (1 = first byte), the index one past
  // its subtree, and the range of token ids (in token_ids()) that end exactly here.
  struct Node {
    uint8_t byte;
    uint16_t depth;
    int32_t subtree_end;
    int32_t tokens_begin, tokens_end;
  };

  // `tokens[id]` for every id of the model's logits (size = the model's vocab_size).
  explicit Vocabulary(std::vector<Token> tokens);
  // Ids past the tokenizer's (a padded model vocabulary) and holes have no bytes.
  static Vocabulary from_tokenizer(const tok::Tokenizer& tokenizer, int64_t model_vocab_size);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // Packed mask words per row: bit (t % 32) of word t / 32 is token t.
  int64_t mask_words() const { return (size() + 31) / 32; }
  const Token& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  const std::vector<Node>& trie() const { return trie_; }
  const std::vector<int32_t>& token_ids() const { return trie_tokens_; }
  // A matchable token's index in token_ids(): ranks order tokens by their bytes (ties by id).
  int32_t rank(int32_t id) const { return rank_[static_cast<size_t>(id)]; }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<Token> tokens_;
  std::vector<Node> trie_;
  std::vector<int32_t> trie_tokens_;
  std::vector<int32_t> rank_;  // per id; -1 when not matchable
  int max_depth_ = 0;
};

}  // namespace mls::grammar
