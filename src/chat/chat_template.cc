#include "chat/chat_template.h"

#include <algorithm>

#include "chat/jinja_template.h"
#include "core/error.h"
#include "core/json.h"

namespace mls::chat {

ChatTemplate::ChatTemplate(std::string source,
                           std::vector<std::pair<std::string, std::string>> special_tokens)
    : source_(std::move(source)),
      special_tokens_(std::move(special_tokens)),
      compiled_(std::make_unique<jinja::Template>(source_)) {}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::from_config(const tok::TokenizerConfig& config) {
  if (config.chat_template.empty())
    raise<ConfigError>(
        "the model has no chat template (tokenizer_config.json 'chat_template' or "
        "chat_template.jinja); pass --chat-template");
  std::vector<std::pair<std::string, std::string>> special;
  const std::pair<const char*, const std::string*> named[] = {{"bos_token", &config.bos_token},
                                                              {"eos_token", &config.eos_token},
                                                              {"pad_token", &config.pad_token},
                                                              {"unk_token", &config.unk_token}};
  for (const auto& [name, value] : named)
    if (!value->empty()) special.emplace_back(name, *value);
  return ChatTemplate(config.chat_template, std::move(special));
}

ChatTemplate ChatTemplate::from_dir(const std::filesystem::path& dir,
                                    const std::optional<std::filesystem::path>& override_file) {
  tok::TokenizerConfig config = tok::TokenizerConfig::from_dir(dir);
  if (override_file) config.chat_template = tok::read_text_file(*override_file);
  return from_config(config);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  std::vector<std::pair<std::string, jinja::Value>> vars;
  for (const auto& [k, v] : special_tokens_) vars.emplace_back(k, jinja::Value(v));
  for (const auto& [k, v] : variables.items()) vars.emplace_back(k, jinja::Value::from_json(v));
  return compiled_->render(vars);
}

bool is_reserved_template_variable(std::string_view name) {
  static constexpr std::string_view kReserved[] = {
      "messages",    "tools",     "documents", "add_generation_prompt",
      "bos_token",   "eos_token", "pad_token", "unk_token",
      "range",       "namespace", "dict",      "raise_exception",
      "strftime_now"};
  return std::find(std::begin(kReserved), std::end(kReserved), name) != std::end(kReserved);
}

std::string reserved_kwarg_message(std::string_view name) {
  return fmt::format(
      "chat_template_kwargs may not set '{}': it is reserved for the request's own messages, "
      "tools, documents and add_generation_prompt, the special tokens and the template's "
      "functions",
      name);
}

nlohmann::ordered_json chat_variables(const nlohmann::ordered_json& request) {
  if (!request.is_object()) raise<InvalidArgument>("chat request must be a JSON object");
  if (!request.contains("messages") || !request["messages"].is_array())
    raise<InvalidArgument>("chat request needs a 'messages' array");
  nlohmann::ordered_json messages = request["messages"];
  for (auto& m : messages) {
    if (!m.is_object()) raise<InvalidArgument>("each message must be an object");
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function")) continue;
      auto& fn = call["function"];
      if (!fn.is_object() || !fn.contains("arguments") || !fn["arguments"].is_string()) continue;
      const bool named = fn.contains("name") && fn["name"].is_string();
      fn["arguments"] = parse_json<InvalidArgument>(
          fn["arguments"].get<std::string>(),
          fmt::format("tool call arguments of '{}'",
                      named ? fn["name"].get<std::string>() : std::string("?")));
    }
  }
  nlohmann::ordered_json vars;
  vars["messages"] = std::move(messages);
  vars["tools"] = request.contains("tools") ? request["tools"] : nlohmann::ordered_json();
  if (request.contains("documents")) vars["documents"] = request["documents"];
  if (request.contains("add_generation_prompt") && !request["add_generation_prompt"].is_boolean())
    raise<InvalidArgument>("'add_generation_prompt' must be a boolean");
  vars["add_generation_prompt"] = request.value("add_generation_prompt", true);
  if (request.contains("chat_template_kwargs")) {
    const auto& kwargs = request["chat_template_kwargs"];
    if (!kwargs.is_object() && !kwargs.is_null())
      raise<InvalidArgument>("'chat_template_kwargs' must be an object");
    if (kwargs.is_object())
      for (const auto& [k, v] : kwargs.items()) {
        if (is_reserved_template_variable(k))
          raise<InvalidArgument>("{}", reserved_kwarg_message(k));
        vars[k] = v;
      }
  }
  return vars;
}

std::string render_chat(const ChatTemplate& tmpl, const nlohmann::ordered_json& request) {
  return tmpl.render(chat_variables(request));
}

}  // namespace mls::chat
