// A Hugging Face byte-level BPE tokenizer loaded from tokenizer.json (+ tokenizer_config.json):
// added tokens, pre-tokenizer, BPE model, post-processor and ByteLevel decoder, reproducing
// `tokenizers` ids and decoded text exactly for the GLM-5 and DeepSeek-V3 families.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace mls::tok {

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json and
  // DIR/chat_template.jinja.
  static Tokenizer from_dir(const std::filesystem::path& dir);
  // Builds from a parsed tokenizer.json and an optional tokenizer_config.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json,
                             const TokenizerConfig& config = {});

  // `text` must be valid UTF-8 (InvalidArgument otherwise). add_special_tokens applies the
  // post-processor (BOS for DeepSeek), as transformers' encode() does by default.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  // Concatenated token text, invalid UTF-8 replaced by U+FFFD. skip_special drops only tokens
  // marked special (so "<think>" survives). Unknown ids throw InvalidArgument.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;

  // Raw bytes that one token contributes to decoded text (possibly a partial code point).
  const std::string& token_bytes(int32_t id) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary spelling ("Ġhello"); throws InvalidArgument for an unknown id.
  const std::string& id_to_token(int32_t id) const;
  // One past the largest id (model vocabulary plus added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const TokenizerConfig& config() const { return config_; }
  const std::string& bos_token() const { return config_.bos_token; }
  const std::string& eos_token() const { return config_.eos_token; }
  const std::string& chat_template() const { return config_.chat_template; }

 private:
  Tokenizer(BpeModel model, PreTokenizer pre, AddedVocabulary added, PostProcessor post,
            TokenizerConfig config);
  void check_id(int32_t id) const;

  BpeModel model_;
  PreTokenizer pre_;
  AddedVocabulary added_;
  PostProcessor post_;
  TokenizerConfig config_;
  std::unordered_map<std::string, int32_t> added_ids_;
  std::vector<std::string> id_to_token_;  // "" for holes in the id space
  std::vector<std::string> id_bytes_;     // decoded bytes per id
  std::vector<bool> special_;
  std::optional<int32_t> bos_id_, eos_id_;
};

}  // namespace mls::tok
