// Renders an OpenAI-style chat request into a prompt with the model's Jinja chat template,
// as transformers' apply_chat_template does (and as vLLM prepares its inputs: each assistant
// tool call's JSON-string `arguments` is parsed into an object first).
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer_config.h"

namespace mls::chat {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // `special_tokens` become template variables (bos_token, eos_token, ...).
  ChatTemplate(std::string source, std::vector<std::pair<std::string, std::string>> special_tokens);
  // From a tokenizer config (its chat_template and special tokens). Throws ConfigError when
  // the model ships no template.
  static ChatTemplate from_config(const tok::TokenizerConfig& config);
  // DIR/tokenizer_config.json (+ DIR/chat_template.jinja); `override_file` replaces the template.
  static ChatTemplate from_dir(const std::filesystem::path& dir,
                               const std::optional<std::filesystem::path>& override_file = {});

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  const std::string& source() const { return source_; }

  // Renders with exactly these variables (plus the special tokens).
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  std::string source_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  std::unique_ptr<jinja::Template> compiled_;
};

// Names chat_template_kwargs may not set: the variables the request's own (validated) fields
// fill, the special tokens and the template's global functions. A key among them is rejected
// rather than ignored, so that a client learns its value was not used.
bool is_reserved_template_variable(std::string_view name);
// The error message for a reserved key.
std::string reserved_kwarg_message(std::string_view name);

// The template variables for an OpenAI chat request: messages (tool-call arguments parsed),
// tools (None when absent), documents, add_generation_prompt (default true) and every key of
// chat_template_kwargs. Throws InvalidArgument on a malformed request, a reserved key in
// chat_template_kwargs, or tool-call arguments that are not JSON (or nest too deep).
nlohmann::ordered_json chat_variables(const nlohmann::ordered_json& request);

// render(chat_variables(request)). Must be ordered_json: tool schemas are printed in the order
// the client sent their keys.
std::string render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& request);

}  // namespace mls::chat
