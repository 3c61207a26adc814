// POST /v1/responses: OpenAI's Responses API over the chat path. The input (a string or a list
// of message, function_call, function_call_output and reasoning items), the instructions and
// the conversation of `previous_response_id` become chat messages for the template; the output
// is split by the same reasoning and tool-call parsers as chat and comes back as output items
// (reasoning, message, function_call), whole or as the SDKs' event stream. Conversations are
// kept in the ResponseStore unless `store` is false.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_completions.h"
#include "server/openai_protocol.h"
#include "server/output_stream.h"
#include "server/response_store.h"
#include "server/serving_context.h"

namespace mls::server {

struct ResponsesRequest {
  ChatRequest chat;  // messages: instructions, the previous conversation, the input
  // The conversation so far without the instructions (OpenAI does not carry instructions over
  // to a continuation); this response's output is appended before it is stored.
  nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
  std::string previous_response_id;
  bool store = true;
  // The request's own fields, echoed in the response object.
  nlohmann::json echo = nlohmann::json::object();
};

// 400 naming the field for malformed input; 404 for an unknown previous_response_id.
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body,
                                         const GenerationDefaults& defaults, ResponseStore& store);

struct ResponsesOutputConfig {
  std::string id;
  std::string model;
  int64_t created = 0;
  ChatOutputConfig parsers;  // reasoning and tool-call parsing, as chat does it
  nlohmann::json echo = nlohmann::json::object();
};

// Shapes the output of one response: output items, the streamed events (each with its
// sequence_number) and the response object. Handler thread only.
class ResponsesResponder {
 public:
  explicit ResponsesResponder(ResponsesOutputConfig cfg);

  // response.created and response.in_progress.
  std::vector<nlohmann::json> start_events();
  // The events these output events produce (non-streaming callers drop them).
  std::vector<nlohmann::json> feed(const std::vector<OutputEvent>& events);
  // Closes the open item; then response.completed, .incomplete (max_output_tokens) or .failed.
  std::vector<nlohmann::json> finish_events(int64_t prompt_tokens);
  nlohmann::json response(int64_t prompt_tokens) const;
  // The stream's `error` event (a failure after the stream started).
  nlohmann::json error_event(const std::string& message);
  // The output as one assistant chat message (reasoning_content, content, tool_calls).
  nlohmann::ordered_json assistant_message() const;

 private:
  struct Item {
    std::string type;  // reasoning, message, function_call
    std::string id;
    std::string text;  // reasoning or message text
    std::string call_id, name, arguments;
  };
  nlohmann::json event(const char* type, nlohmann::json fields);
  nlohmann::json item_json(const Item& item, const char* status, bool with_content) const;
  // Makes an item of `type` the open one (closing another), opening a new one when needed.
  Item& open(const std::string& type, std::vector<nlohmann::json>& out);
  void close(std::vector<nlohmann::json>& out);
  const char* status() const;
  nlohmann::json usage(int64_t prompt_tokens) const;

  ResponsesOutputConfig cfg_;
  ChatDeltaParser parser_;
  std::vector<Item> items_;
  int open_ = -1;                // index of the item still receiving deltas
  std::vector<int> call_items_;  // tool-call index -> item index
  int sequence_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  int64_t output_tokens_ = 0;
  int64_t reasoning_tokens_ = 0;
};

Reply handle_responses(ServingContext& ctx, const std::string& body);

}  // namespace mls::server
