// Everything a request handler needs once the model is loaded, and the reply it produces. Kept
// free of HTTP types so that handlers are unit-testable without sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "grammar/grammar_compiler.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
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
};

struct ServingContext {
  ServingOptions opts;
  const tok::Tokenizer& tokenizer;
  const chat::ChatTemplate* chat_template;  // null when the model ships none
  EngineLoop& loop;
  Metrics& metrics;
  grammar::GrammarCompiler* grammars = nullptr;  // structured outputs (null: not offered)

  int64_t max_model_len() const { return loop.config().max_model_len; }
  // 404 unless `model` is empty or one of the served names.
  void check_model(const std::string& model) const;
  const std::string& model_name() const { return opts.served_model_names.front(); }
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  // Set for streaming replies: runs on the handler thread, writing chunks until done; `write`
  // returns false once the client has gone.
  std::function<void(const std::function<bool(std::string_view)>& write)> stream;
};

// "<prefix>-<32 hex digits>".
std::string random_id(std::string_view prefix);
int64_t unix_time();

}  // namespace mls::server
