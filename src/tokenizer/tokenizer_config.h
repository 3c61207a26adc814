// tokenizer_config.json: what transformers keeps beside tokenizer.json — the special-token
// strings the chat template sees, BOS/EOS switches and the chat template itself.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mls::tok {

struct TokenizerConfig {
  std::string bos_token;
  std::string eos_token;
  std::string pad_token;
  std::string unk_token;
  std::optional<bool> add_bos_token;  // set only when the file says so
  std::optional<bool> add_eos_token;
  // The chat template; "" when the model ships none. A list of named templates resolves to the
  // one named "default".
  std::string chat_template;
  // The named "tool_use" template when the file has a list that includes one.
  std::string tool_use_template;

  static TokenizerConfig from_json(const nlohmann::json& config);
  // Reads DIR/tokenizer_config.json when present and DIR/chat_template.jinja, which takes
  // precedence over the embedded template as in transformers. Missing files give defaults.
  static TokenizerConfig from_dir(const std::filesystem::path& dir);
};

// Reads a whole file; throws IoError naming it.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace mls::tok
