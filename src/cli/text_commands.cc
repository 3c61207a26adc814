#include "cli/text_commands.h"

#include "cli/id_list.h"

#include <climits>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/json.h"
#include "tokenizer/tokenizer.h"

namespace mls::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string text_file;
  bool add_special_tokens = false;
  bool json = false;
};

struct DetokenizeOptions {
  std::string model;
  std::string ids;
  bool skip_special_tokens = false;
  bool json = false;
};

struct ChatTemplateOptions {
  std::string model;
  std::string request_file;
  std::string chat_template;
};

void run_tokenize(const TokenizeOptions& o) {
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(o.model);
  const auto ids = tokenizer.encode(tok::read_text_file(o.text_file), o.add_special_tokens);
  if (o.json) {
    std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
}

void run_detokenize(const DetokenizeOptions& o) {
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(o.model);
  const std::string text = tokenizer.decode(parse_id_list(o.ids, "--ids"), o.skip_special_tokens);
  if (o.json)
    std::cout << nlohmann::json{{"text", text}}.dump() << "\n";
  else
    std::cout << text;
}

void run_chat_template(const ChatTemplateOptions& o) {
  const auto request =
      parse_json<InvalidArgument>(tok::read_text_file(o.request_file), o.request_file);
  std::optional<std::filesystem::path> override_file;
  if (!o.chat_template.empty()) override_file = o.chat_template;
  const auto tmpl = chat::ChatTemplate::from_dir(o.model, override_file);
  std::cout << chat::render_chat(tmpl, request) << std::flush;
}

}  // namespace

void add_text_commands(CLI::App& app) {
  auto tokenize = std::make_shared<TokenizeOptions>();
  CLI::App* t = app.add_subcommand("tokenize", "Encode a text file with the model's tokenizer");
  t->add_option("--model", tokenize->model, "Model or tokenizer directory")->required();
  t->add_option("--text-file", tokenize->text_file, "UTF-8 text to encode")->required();
  t->add_flag("--add-special-tokens", tokenize->add_special_tokens,
              "Apply the post-processor (BOS for DeepSeek)");
  t->add_flag("--json", tokenize->json, "Print {\"ids\": [...]}");
  t->callback([tokenize] { run_tokenize(*tokenize); });

  auto detokenize = std::make_shared<DetokenizeOptions>();
  CLI::App* d = app.add_subcommand("detokenize", "Decode token ids to text");
  d->add_option("--model", detokenize->model, "Model or tokenizer directory")->required();
  d->add_option("--ids", detokenize->ids, "Comma-separated token ids")->required();
  d->add_flag("--skip-special-tokens", detokenize->skip_special_tokens,
              "Drop tokens marked special");
  d->add_flag("--json", detokenize->json, "Print {\"text\": \"...\"}");
  d->callback([detokenize] { run_detokenize(*detokenize); });

  auto chat = std::make_shared<ChatTemplateOptions>();
  CLI::App* c = app.add_subcommand("chat-template",
                                   "Render an OpenAI chat request with the model's chat template");
  c->add_option("--model", chat->model, "Model or tokenizer directory")->required();
  c->add_option("--request-file", chat->request_file,
                "JSON with messages, tools, add_generation_prompt, chat_template_kwargs")
      ->required();
  c->add_option("--chat-template", chat->chat_template,
                "Jinja file replacing the model's template");
  c->callback([chat] { run_chat_template(*chat); });
}

}  // namespace mls::cli
