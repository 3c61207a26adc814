// Pre-tokenization: cuts text into the pieces that BPE encodes independently. Supports the
// shapes byte-level BPE checkpoints ship: a `Split` regex (or a `Sequence` of them) followed by
// `ByteLevel`, or `ByteLevel` alone (with or without its built-in GPT-2 regex).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

namespace mls::tok {

class RegexSplitter;

class PreTokenizer {
 public:
  // Builds from tokenizer.json's "pre_tokenizer" object; throws ConfigError/Unsupported.
  static PreTokenizer from_json(const nlohmann::json& config);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the pieces of `text` (views into it, in order, covering it except for removed
  // matches) to `out`. `text` must be valid UTF-8.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  // ByteLevel's add_prefix_space: a space is prepended to every piece that lacks one.
  bool add_prefix_space() const { return add_prefix_space_; }

 private:
  PreTokenizer();
  void add_json(const nlohmann::json& config, bool& saw_byte_level);

  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  bool add_prefix_space_ = false;
};

}  // namespace mls::tok
