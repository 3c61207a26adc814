// POST /v1/chat/completions: the request goes through the chat template and tokenizer to the
// engine; each choice's text goes through the reasoning parser, then the tool-call parser, and
// comes back as a chat.completion or as chat.completion.chunk events.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_parser.h"
#include "server/openai_protocol.h"
#include "server/output_stream.h"
#include "server/serving_context.h"

namespace mls::server {

struct ChatOutputConfig {
  std::string id;
  std::string model;
  int64_t created = 0;
  std::string reasoning_parser;  // "" : no reasoning split
  bool starts_in_reasoning = false;
  bool include_reasoning = true;
  std::string tool_parser;  // "" : tool calls are not parsed
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice = ToolChoice::kNone;
  bool parallel_tool_calls = true;  // false: only the first call is reported
  bool logprobs = false;
  bool include_usage = false;
};

// Shapes one chat request's output events, streaming or not. Handler thread only.
class ChatResponder {
 public:
  ChatResponder(ChatOutputConfig cfg, const tok::Tokenizer& tokenizer);
  ~ChatResponder();

  // Streaming: the chunks these events produce (a role chunk opens each choice).
  std::vector<nlohmann::json> stream_chunks(const std::vector<OutputEvent>& events);
  // Streaming: the usage chunk (choices: []) when include_usage was asked.
  std::optional<nlohmann::json> usage_chunk(int64_t prompt_tokens) const;

  // Non-streaming: folds events in; response() gives the chat.completion.
  void absorb(const std::vector<OutputEvent>& events);
  nlohmann::json response(int64_t prompt_tokens) const;

 private:
  struct Choice;
  struct Delta;
  Choice& choice(int index);
  Delta process(Choice& c, const OutputEvent& ev);
  const char* finish_reason(const Choice& c) const;
  nlohmann::json usage(int64_t prompt_tokens) const;

  ChatOutputConfig cfg_;
  const tok::Tokenizer& tok_;
  std::vector<std::unique_ptr<Choice>> choices_;
  int64_t completion_tokens_ = 0;
};

// A ChatRequest's prompt as the template renders it.
std::string render_chat_prompt(const ServingContext& ctx, const ChatRequest& req);

Reply handle_chat_completions(ServingContext& ctx, const std::string& body);

}  // namespace mls::server
