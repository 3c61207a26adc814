#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "core/json.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace mls::tok {

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const auto path = dir / "tokenizer.json";
  return from_json(parse_json<ConfigError, nlohmann::json>(read_text_file(path), path.string()),
                   TokenizerConfig::from_dir(dir));
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const TokenizerConfig& config) {
  try {
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      raise<Unsupported>("tokenizer.json: normalizers are not supported (byte-level BPE only)");
    if (j.contains("decoder") && !j["decoder"].is_null() &&
        j["decoder"].value("type", "") != "ByteLevel")
      raise<Unsupported>("tokenizer.json: decoder type '{}' is not supported (ByteLevel only)",
                         j["decoder"].value("type", ""));
    return Tokenizer(BpeModel::from_json(j.at("model")),
                     PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json())),
                     AddedVocabulary::from_json(j.value("added_tokens", nlohmann::json())),
                     PostProcessor::from_json(j.value("post_processor", nlohmann::json())), config);
  } catch (const nlohmann::json::exception& e) {
    raise<ConfigError>("tokenizer.json: {}", e.what());
  }
}

Tokenizer::Tokenizer(BpeModel model, PreTokenizer pre, AddedVocabulary added, PostProcessor post,
                     TokenizerConfig config)
    : model_(std::move(model)),
      pre_(std::move(pre)),
      added_(std::move(added)),
      post_(std::move(post)),
      config_(std::move(config)) {
  int32_t n = 0;
  for (const auto& [tok, id] : model_.vocab()) n = std::max(n, id + 1);
  for (const auto& t : added_.tokens()) n = std::max(n, t.id + 1);
  id_to_token_.resize(n);
  special_.resize(n, false);
  for (const auto& [tok, id] : model_.vocab()) id_to_token_[id] = tok;
  for (const auto& t : added_.tokens()) {
    id_to_token_[t.id] = t.content;
    special_[t.id] = t.special;
    added_ids_[t.content] = t.id;
  }
  id_bytes_.reserve(n);
  for (const auto& tok : id_to_token_) id_bytes_.push_back(byte_level_decode(tok));

  if (!config_.bos_token.empty()) bos_id_ = token_to_id(config_.bos_token);
  if (!config_.eos_token.empty()) eos_id_ = token_to_id(config_.eos_token);
  // transformers' Llama-style fast tokenizers rebuild the post-processor from these switches.
  if (config_.add_bos_token) {
    post_.prefix.clear();
    if (*config_.add_bos_token && bos_id_) post_.prefix.push_back(*bos_id_);
  }
  if (config_.add_eos_token) {
    post_.suffix.clear();
    if (*config_.add_eos_token && eos_id_) post_.suffix.push_back(*eos_id_);
  }
  // encode emits these ids as they are, so each must name a token decode knows.
  for (const auto* ids : {&post_.prefix, &post_.suffix})
    for (int32_t id : *ids)
      if (id >= n || id_to_token_[id].empty())
        raise<ConfigError>(
            "tokenizer.json: post_processor: special token id {} is not in the vocabulary (size "
            "{})",
            id, n);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (!is_valid_utf8(text)) raise<InvalidArgument>("text to tokenize is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  if (add_special_tokens) ids.insert(ids.end(), post_.prefix.begin(), post_.prefix.end());
  std::vector<std::string_view> pieces;
  std::string prefixed;
  for (const Segment& seg : added_.split(text)) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
      continue;
    }
    pieces.clear();
    pre_.split(seg.text, pieces);
    for (std::string_view piece : pieces) {
      if (pre_.add_prefix_space() && !piece.empty() && piece[0] != ' ') {
        prefixed.clear();
        prefixed.push_back(' ');
        prefixed.append(piece.data(), piece.size());
        model_.encode_word(prefixed, ids);
      } else {
        model_.encode_word(piece, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post_.suffix.begin(), post_.suffix.end());
  return ids;
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size() || id_to_token_[id].empty())
    raise<InvalidArgument>("token id {} is not in the vocabulary (size {})", id, vocab_size());
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && special_[id]) continue;
    bytes += id_bytes_[id];
  }
  return utf8_lossy(bytes);
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  return id_bytes_[id];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = model_.vocab().find(key); it != model_.vocab().end()) return it->second;
  return std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return id_to_token_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  check_id(id);
  return special_[id];
}

}  // namespace mls::tok
