// POST /v1/chat/completions: the request goes through the chat template and tokenizer to the
// engine; each choice's text goes through the reasoning parser, then the tool-call parser, and
// comes back as a chat.completion or as chat.completion.chunk events.
#pragma once

#include <memory>
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
  std::string id = {};
  std::string model = {};
  int64_t created = 0;
  std::string role = "assistant";  // of the generated message (--response-role)
  std::string reasoning_parser;    // "" : no reasoning split
  bool starts_in_reasoning = false;
  bool include_reasoning = true;
  std::string tool_parser;  // "" : tool calls are not parsed
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  ToolChoice tool_choice = ToolChoice::kNone;
  bool parallel_tool_calls = true;  // false: only the first call is reported
  bool logprobs = false;
  bool include_usage = false;
  bool continuous_usage = false;  // every chunk carries the usage so far
  bool prompt_logprobs = false;   // the response carries vLLM's prompt_logprobs
  std::vector<int32_t> prompt_ids = {};
};

// What one output event adds to a choice once reasoning and tool calls are split out.
struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<chat::ToolEvent> tool_events;  // tool-call starts and argument fragments
};

// One choice's text through the reasoning parser, then the tool-call parser (either may be
// off, as `cfg` says). /v1/responses shapes its output items from the same deltas.
class ChatDeltaParser {
 public:
  explicit ChatDeltaParser(const ChatOutputConfig& cfg);
  // `text` is the event's final text; `last` ends the choice (held-back text is released).
  ChatDelta feed(const std::string& text, bool last);

 private:
  bool include_reasoning_;
  bool parallel_tool_calls_;
  std::unique_ptr<chat::ReasoningParser> reasoning_parser_;
  std::unique_ptr<chat::ToolParser> tool_parser_;
};

// Shapes one chat request's output events, streaming or not. Handler thread only.
class ChatResponder {
 public:
  ChatResponder(ChatOutputConfig cfg, const tok::Tokenizer& tokenizer);
  ~ChatResponder();

  // Streaming: the chunks these events produce (a role chunk opens each choice).
  std::vector<nlohmann::json> stream_chunks(const std::vector<OutputEvent>& events,
                                            int64_t prompt_tokens);
  // Streaming: the usage chunk (choices: []) when include_usage was asked.
  std::optional<nlohmann::json> usage_chunk(int64_t prompt_tokens) const;

  // Non-streaming: folds events in; response() gives the chat.completion.
  void absorb(const std::vector<OutputEvent>& events);
  nlohmann::json response(int64_t prompt_tokens) const;

 private:
  struct Choice;
  Choice& choice(int index);
  ChatDelta process(Choice& c, const OutputEvent& ev);
  const char* finish_reason(const Choice& c) const;
  nlohmann::json usage(int64_t prompt_tokens) const;

  ChatOutputConfig cfg_;
  const tok::Tokenizer& tok_;
  std::vector<std::unique_ptr<Choice>> choices_;
  int64_t completion_tokens_ = 0;
};

// A ChatRequest's prompt as the template renders it.
std::string render_chat_prompt(const ServingContext& ctx, const ChatRequest& req);
// Templates that open <think> in the prompt (GLM-5, DeepSeek with thinking on) make the model
// start inside reasoning.
bool prompt_opens_reasoning(const std::string& prompt);
// 400 unless the server can parse the tool calls the request's tool_choice allows.
void check_tool_choice(const ServingContext& ctx, const ChatRequest& req);
// The request's sampling with its output constraint: the structured output it asks for, the
// tool call that tool_choice required/named forces (400 when both are asked), or under "auto"
// without a structured output the tool-call grammar once a call starts.
SamplingOptions constrained_sampling(ServingContext& ctx, const ChatRequest& req,
                                     bool starts_in_reasoning);
// The prompt's ids (400 naming `what` when the tokenizer refuses the text).
std::vector<int32_t> encode_prompt(const ServingContext& ctx, const std::string& prompt,
                                   bool add_special_tokens, const char* what);

Reply handle_chat_completions(ServingContext& ctx, const std::string& body);

}  // namespace mls::server
