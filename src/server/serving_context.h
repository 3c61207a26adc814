// Everything a request handler needs once the model is loaded, and the reply it produces. Kept
// free of HTTP types so that handlers are unit-testable without sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "grammar/grammar_compiler.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/reply_source.h"
#include "server/response_store.h"
#include "tokenizer/tokenizer.h"

namespace mls::server {

struct ServingOptions {
  std::vector<std::string> served_model_names;  // the first is reported in responses
  std::string model_path;
  std::string tool_call_parser;  // "" when tool calls are not parsed
  std::string reasoning_parser;  // "" when reasoning is not split out
  bool enable_auto_tool_choice = false;
  GenerationDefaults defaults;
  std::shared_ptr<const std::vector<int32_t>> test_script;  // see StreamSpec::script
  std::string response_role = "assistant";                  // --response-role
  bool exclude_tools_when_tool_choice_none = false;
  // Template variables a chat request gets unless it sets them (--default-chat-template-kwargs).
  nlohmann::ordered_json default_chat_template_kwargs = nlohmann::ordered_json::object();
  bool log_requests = false;  // --enable-log-requests
  int64_t max_log_len = -1;   // characters of a logged prompt; -1: all
  // The effective configuration, as GET /load and GET /v1/models/{id} report it.
  nlohmann::ordered_json server_info = nlohmann::ordered_json::object();
  bool enable_ui = true;        // the chat page at GET / (--disable-ui)
  bool enable_timings = false;  // llama-server's `timings` in responses
};

struct ServingContext {
  ServingOptions opts;
  const tok::Tokenizer* tokenizer;          // null with --skip-tokenizer-init
  const chat::ChatTemplate* chat_template;  // null when the model ships none
  EngineLoop& loop;
  Metrics& metrics;
  // /v1/responses kept for previous_response_id (shared: handlers copy the context pointer).
  std::shared_ptr<ResponseStore> responses = std::make_shared<ResponseStore>();
  grammar::GrammarCompiler* grammars = nullptr;  // structured outputs (null: not offered)

  int64_t max_model_len() const { return loop.config().limits.max_model_len; }
  // 404 unless `model` is empty or one of the served names.
  void check_model(const std::string& model) const;
  // The tokenizer; without one (--skip-tokenizer-init) a 400 naming `param`.
  const tok::Tokenizer& text_tokenizer(const std::string& param) const;
  const std::string& model_name() const { return opts.served_model_names.front(); }
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Set when the body comes from a running request: sent once complete, or as it comes
  // (chunked, e.g. SSE) when `streaming`.
  std::shared_ptr<ReplySource> source;
  bool streaming = false;
};

// "<prefix>-<32 hex digits>".
std::string random_id(std::string_view prefix);
int64_t unix_time();

}  // namespace mls::server
