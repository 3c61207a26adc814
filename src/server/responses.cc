#include "server/responses.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>

#include "core/error.h"
#include "server/errors.h"
#include "server/reply_from_driver.h"
#include "server/request_driver.h"
#include "server/sse.h"

namespace mls::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

// Fields that mean the same on /v1/responses as on chat (the chat parser checks them).
constexpr std::string_view kFieldsAsOnChat[] = {"model",
                                                "stream",
                                                "temperature",
                                                "top_p",
                                                "top_k",
                                                "min_p",
                                                "seed",
                                                "stop",
                                                "presence_penalty",
                                                "frequency_penalty",
                                                "repetition_penalty",
                                                "min_tokens",
                                                "ignore_eos",
                                                "stop_token_ids",
                                                "logit_bias",
                                                "allowed_token_ids",
                                                "bad_words",
                                                "include_stop_str_in_output",
                                                "skip_special_tokens",
                                                "chat_template_kwargs",
                                                "include_reasoning",
                                                "parallel_tool_calls"};

// Responses fields read here; with kFieldsAsOnChat, everything else is ignored and logged.
constexpr std::string_view kResponsesFields[] = {
    "input",      "instructions", "previous_response_id",
    "store",      "metadata",     "max_output_tokens",
    "tools",      "tool_choice",  "text",
    "reasoning",  "include",      "top_logprobs",
    "truncation", "background",   "max_tool_calls",
    "prompt",     "conversation"};

std::string string_field(const ojson& obj, const char* key, const std::string& param) {
  const ojson* v = present_field(obj, key);
  if (!v || !v->is_string()) bad_request(fmt::format("{}.{} must be a string", param, key), param);
  return v->get<std::string>();
}

// Text of a content list (input_text / output_text / text parts, joined with newlines).
std::string content_text(const ojson& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param + " must be a string or a list of text parts", param);
  std::string text;
  for (const ojson& part : content) {
    const ojson* type = part.is_object() ? present_field(part, "type") : nullptr;
    if (!type || !type->is_string())
      bad_request(param + ": each part must be an object with a 'type'", param);
    const std::string t = type->get<std::string>();
    if (t != "input_text" && t != "output_text" && t != "text")
      bad_request(fmt::format("{}: content part type '{}' is not supported (text only)", param, t),
                  param);
    if (!text.empty()) text += "\n";
    text += string_field(part, "text", param);
  }
  return text;
}

// The input items as chat messages (the chat parser normalises roles and content later).
ojson input_messages(const ojson& input) {
  ojson out = ojson::array();
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input.get<std::string>()}});
    return out;
  }
  if (!input.is_array() || input.empty())
    bad_request("'input' must be a string or a non-empty list of items", "input");
  std::string reasoning;  // a reasoning item belongs to the assistant turn that follows it
  const auto assistant = [&]() -> ojson& {
    if (out.empty() || out.back()["role"] != "assistant" || !reasoning.empty())
      out.push_back({{"role", "assistant"}, {"content", nullptr}});
    if (!reasoning.empty()) out.back()["reasoning_content"] = std::exchange(reasoning, {});
    return out.back();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const ojson& item = input[i];
    const std::string param = fmt::format("input[{}]", i);
    if (!item.is_object()) bad_request(param + " must be an object", param);
    const ojson* type_field = present_field(item, "type");
    if (type_field && !type_field->is_string())
      bad_request(param + ".type must be a string", param + ".type");
    const std::string type = type_field ? type_field->get<std::string>() : "message";
    if (type == "message") {
      const std::string role = string_field(item, "role", param);
      const ojson* content = present_field(item, "content");
      if (!content) bad_request(param + ".content is required", param + ".content");
      std::string text = content_text(*content, param + ".content");
      if (role == "assistant") {
        ojson& m = assistant();
        m["content"] = m["content"].is_string() ? m["content"].get<std::string>() + text : text;
      } else {
        out.push_back({{"role", role}, {"content", std::move(text)}});
      }
    } else if (type == "function_call") {
      const ojson* args = present_field(item, "arguments");
      if (args && !args->is_string())
        bad_request(param + ".arguments must be a JSON string", param + ".arguments");
      ojson& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = ojson::array();
      m["tool_calls"].push_back(
          {{"id", string_field(item, "call_id", param)},
           {"type", "function"},
           {"function",
            {{"name", string_field(item, "name", param)},
             {"arguments", args ? args->get<std::string>() : std::string("{}")}}}});
    } else if (type == "function_call_output") {
      const ojson* output = present_field(item, "output");
      if (!output) bad_request(param + ".output is required", param + ".output");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", string_field(item, "call_id", param)},
                     {"content", content_text(*output, param + ".output")}});
    } else if (type == "reasoning") {
      for (const char* key : {"content", "summary"})
        if (const ojson* parts = present_field(item, key)) {
          if (!parts->is_array())
            bad_request(fmt::format("{}.{} must be a list", param, key), param);
          for (const ojson& part : *parts) reasoning += string_field(part, "text", param);
          if (!parts->empty()) break;  // content when present, else the summary
        }
    } else {
      bad_request(fmt::format("{}.type '{}' is not supported (message, function_call, "
                              "function_call_output, reasoning)",
                              param, type),
                  param + ".type");
    }
  }
  if (!reasoning.empty()) assistant();
  return out;
}

// Responses function tools ({type, name, parameters}) as chat tools.
ojson chat_tools(const ojson& tools) {
  if (!tools.is_array()) bad_request("'tools' must be a list", "tools");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad_request(param + " must be an object", param);
    const ojson* type = present_field(t, "type");
    if (!type || *type != "function")
      bad_request(fmt::format("{}: only tools of type 'function' are supported", param), param);
    if (t.contains("function")) {  // the chat shape, which some clients send here too
      out.push_back(t);
      continue;
    }
    ojson fn = {{"name", string_field(t, "name", param)}};
    if (const ojson* d = present_field(t, "description")) fn["description"] = *d;
    if (const ojson* p = present_field(t, "parameters")) fn["parameters"] = *p;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

ojson chat_tool_choice(const ojson& choice) {
  if (choice.is_string()) return choice;
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name"))
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  bad_request(
      "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}",
      "tool_choice");
}

// Fields whose non-default values this server cannot honour.
void reject_unsupported(const ojson& body) {
  const auto reject = [](const char* name, const char* why) {
    bad_request(fmt::format("'{}' {}", name, why), name);
  };
  if (const ojson* v = present_field(body, "include"); v && !(v->is_array() && v->empty()))
    reject("include", "is not supported (no encrypted reasoning, logprobs or tool sources)");
  if (const ojson* v = present_field(body, "top_logprobs"); v && *v != 0)
    reject("top_logprobs", "is not supported on /v1/responses (use /v1/chat/completions)");
  if (const ojson* v = present_field(body, "truncation"); v && *v != "disabled")
    reject("truncation", "only 'disabled' is supported");
  if (const ojson* v = present_field(body, "background"); v && *v != false)
    reject("background", "background responses are not supported");
  if (const ojson* v = present_field(body, "reasoning"); v && !(v->is_object() && v->empty()))
    reject("reasoning", "is not supported: thinking is the chat template's (chat_template_kwargs)");
  for (const char* name : {"max_tool_calls", "prompt", "conversation"})
    if (present_field(body, name)) reject(name, "is not supported");
}

// text.format as chat's response_format (structured outputs: docs/structured-outputs.md).
void text_format(const ojson& text, ojson& chat) {
  if (!text.is_object()) bad_request("'text' must be an object", "text");
  if (const ojson* v = present_field(text, "verbosity"); v && *v != "medium")
    bad_request("'text.verbosity' other than 'medium' is not supported", "text.verbosity");
  const ojson* format = present_field(text, "format");
  if (!format) return;
  const std::string type = format->is_object() ? format->value("type", "") : "";
  if (type == "text") return;
  if (type == "json_object") {
    chat["response_format"] = {{"type", "json_object"}};
  } else if (type == "json_schema") {
    ojson schema = *format;
    schema.erase("type");
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else {
    bad_request("'text.format.type' must be text, json_object or json_schema", "text.format");
  }
}

// Responses ids join prefix and hex with an underscore (resp_..., msg_...), as OpenAI's do.
std::string item_id(std::string_view prefix) {
  std::string id = random_id(prefix);
  id[prefix.size()] = '_';
  return id;
}

json output_text_part(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", json::array()},
          {"logprobs", json::array()}};
}

json reasoning_part(const std::string& text) {
  return {{"type", "reasoning_text"}, {"text", text}};
}

}  // namespace

ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body,
                                         const GenerationDefaults& defaults, ResponseStore& store) {
  ResponsesRequest r;
  reject_unsupported(body);
  std::vector<std::string_view> known(std::begin(kFieldsAsOnChat), std::end(kFieldsAsOnChat));
  known.insert(known.end(), std::begin(kResponsesFields), std::end(kResponsesFields));
  log_ignored_fields(body, known);

  ojson chat = ojson::object();
  for (std::string_view k : kFieldsAsOnChat)
    if (const auto it = body.find(std::string(k)); it != body.end()) chat[std::string(k)] = *it;
  if (const ojson* v = present_field(body, "max_output_tokens")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1)
      bad_request("'max_output_tokens' must be an integer of at least 1", "max_output_tokens");
    chat["max_tokens"] = *v;
  }
  if (const ojson* v = present_field(body, "store")) {
    if (!v->is_boolean()) bad_request("'store' must be a boolean", "store");
    r.store = v->get<bool>();
  }
  if (const ojson* v = present_field(body, "metadata"); v && !v->is_object())
    bad_request("'metadata' must be an object of strings", "metadata");
  if (const ojson* v = present_field(body, "previous_response_id")) {
    if (!v->is_string())
      bad_request("'previous_response_id' must be a string", "previous_response_id");
    r.previous_response_id = v->get<std::string>();
    std::optional<ojson> previous = store.get(r.previous_response_id);
    if (!previous)
      throw ApiError(404,
                     fmt::format("Previous response with id '{}' not found (it was made with "
                                 "store: false, or the server no longer keeps it)",
                                 r.previous_response_id),
                     "previous_response_id");
    r.conversation = std::move(*previous);
  }
  const ojson* input = present_field(body, "input");
  if (!input) bad_request("'input' is required", "input");
  for (ojson& m : input_messages(*input)) r.conversation.push_back(std::move(m));

  ojson messages = ojson::array();
  const ojson* instructions = present_field(body, "instructions");
  if (instructions && !instructions->is_string())
    bad_request("'instructions' must be a string", "instructions");
  if (instructions) messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const ojson& m : r.conversation) messages.push_back(m);
  chat["messages"] = std::move(messages);
  if (const ojson* tools = present_field(body, "tools")) chat["tools"] = chat_tools(*tools);
  if (const ojson* choice = present_field(body, "tool_choice"))
    chat["tool_choice"] = chat_tool_choice(*choice);
  if (const ojson* text = present_field(body, "text")) text_format(*text, chat);
  r.chat = parse_chat_request(chat, defaults);

  const SamplingParams& p = r.chat.sampling.params;
  const auto given = [&](const char* key, json fallback) {
    const ojson* v = present_field(body, key);
    return v ? json::parse(v->dump()) : std::move(fallback);
  };
  r.echo = {{"instructions", given("instructions", nullptr)},
            {"max_output_tokens", given("max_output_tokens", nullptr)},
            {"metadata", given("metadata", json::object())},
            {"parallel_tool_calls", given("parallel_tool_calls", true)},
            {"previous_response_id", given("previous_response_id", nullptr)},
            {"reasoning", nullptr},
            {"store", r.store},
            {"temperature", p.temperature},
            {"text", given("text", {{"format", {{"type", "text"}}}})},
            {"tool_choice", given("tool_choice", r.chat.tools.empty() ? "none" : "auto")},
            {"tools", given("tools", json::array())},
            {"top_p", p.top_p},
            {"truncation", "disabled"}};
  return r;
}

ResponsesResponder::ResponsesResponder(ResponsesOutputConfig cfg)
    : cfg_(std::move(cfg)), parser_(cfg_.parsers) {}

json ResponsesResponder::event(const char* type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return fields;
}

json ResponsesResponder::item_json(const Item& item, const char* status, bool with_content) const {
  if (item.type == "reasoning")
    return {{"id", item.id},
            {"type", "reasoning"},
            {"summary", json::array()},
            {"content", with_content ? json::array({reasoning_part(item.text)}) : json::array()},
            {"status", status}};
  if (item.type == "message")
    return {{"id", item.id},
            {"type", "message"},
            {"role", "assistant"},
            {"status", status},
            {"content", with_content ? json::array({output_text_part(item.text)}) : json::array()}};
  return {{"id", item.id},     {"type", "function_call"},     {"call_id", item.call_id},
          {"name", item.name}, {"arguments", item.arguments}, {"status", status}};
}

ResponsesResponder::Item& ResponsesResponder::open(const std::string& type,
                                                   std::vector<json>& out) {
  if (open_ >= 0 && items_[static_cast<size_t>(open_)].type == type && type != "function_call")
    return items_[static_cast<size_t>(open_)];
  close(out);
  Item item;
  item.type = type;
  item.id = item_id(type == "reasoning" ? "rs" : type == "message" ? "msg" : "fc");
  items_.push_back(std::move(item));
  open_ = static_cast<int>(items_.size()) - 1;
  Item& it = items_.back();
  if (type == "function_call") return it;  // announced once its name and call id are set
  out.push_back(event("response.output_item.added",
                      {{"output_index", open_}, {"item", item_json(it, "in_progress", false)}}));
  out.push_back(event("response.content_part.added",
                      {{"item_id", it.id},
                       {"output_index", open_},
                       {"content_index", 0},
                       {"part", type == "reasoning" ? reasoning_part("") : output_text_part("")}}));
  return it;
}

void ResponsesResponder::close(std::vector<json>& out) {
  if (open_ < 0) return;
  const Item& it = items_[static_cast<size_t>(open_)];
  const json where = {{"item_id", it.id}, {"output_index", open_}};
  if (it.type == "reasoning") {
    json done = where;
    done["content_index"] = 0;
    done["text"] = it.text;
    out.push_back(event("response.reasoning_text.done", done));
    done.erase("text");
    done["part"] = reasoning_part(it.text);
    out.push_back(event("response.content_part.done", done));
  } else if (it.type == "message") {
    json done = where;
    done["content_index"] = 0;
    done["text"] = it.text;
    done["logprobs"] = json::array();
    out.push_back(event("response.output_text.done", done));
    done.erase("text");
    done.erase("logprobs");
    done["part"] = output_text_part(it.text);
    out.push_back(event("response.content_part.done", done));
  } else {
    json done = where;
    done["arguments"] = it.arguments;
    done["name"] = it.name;
    out.push_back(event("response.function_call_arguments.done", done));
  }
  out.push_back(event("response.output_item.done",
                      {{"output_index", open_}, {"item", item_json(it, "completed", true)}}));
  open_ = -1;
}

json ResponsesResponder::error_event(const std::string& message) {
  return event("error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}});
}

std::vector<json> ResponsesResponder::start_events() {
  std::vector<json> out;
  json r = response(0);
  r["status"] = "in_progress";
  r["usage"] = nullptr;
  out.push_back(event("response.created", {{"response", r}}));
  out.push_back(event("response.in_progress", {{"response", std::move(r)}}));
  return out;
}

std::vector<json> ResponsesResponder::feed(const std::vector<OutputEvent>& events) {
  std::vector<json> out;
  for (const OutputEvent& ev : events) {
    if (ev.choice != 0) continue;  // /v1/responses has one choice (n is not a Responses field)
    const bool last = ev.finish != FinishReason::kNone;
    if (!ev.error.empty()) {
      finish_ = ev.finish;
      error_ = ev.error;
      continue;
    }
    output_tokens_ += static_cast<int64_t>(ev.token_ids.size());
    ChatDelta d = parser_.feed(ev.text, last);
    if (!d.reasoning.empty() && d.content.empty() && d.tool_events.empty())
      reasoning_tokens_ += static_cast<int64_t>(ev.token_ids.size());
    if (!d.reasoning.empty()) {
      Item& it = open("reasoning", out);
      it.text += d.reasoning;
      out.push_back(event("response.reasoning_text.delta", {{"item_id", it.id},
                                                            {"output_index", open_},
                                                            {"content_index", 0},
                                                            {"delta", d.reasoning}}));
    }
    if (!d.content.empty()) {
      Item& it = open("message", out);
      it.text += d.content;
      out.push_back(event("response.output_text.delta", {{"item_id", it.id},
                                                         {"output_index", open_},
                                                         {"content_index", 0},
                                                         {"delta", d.content},
                                                         {"logprobs", json::array()}}));
    }
    for (const chat::ToolEvent& e : d.tool_events) {
      if (e.kind == chat::ToolEvent::kToolCallStart) {
        Item& it = open("function_call", out);
        it.call_id = e.id;
        it.name = e.name;
        if (static_cast<int>(call_items_.size()) <= e.index) call_items_.resize(e.index + 1, -1);
        call_items_[static_cast<size_t>(e.index)] = open_;
        out.push_back(
            event("response.output_item.added",
                  {{"output_index", open_}, {"item", item_json(it, "in_progress", false)}}));
      } else {
        const int at = call_items_.at(static_cast<size_t>(e.index));
        Item& it = items_[static_cast<size_t>(at)];
        it.arguments += e.text;
        out.push_back(event("response.function_call_arguments.delta",
                            {{"item_id", it.id}, {"output_index", at}, {"delta", e.text}}));
      }
    }
    if (last) finish_ = ev.finish;
  }
  return out;
}

const char* ResponsesResponder::status() const {
  if (!error_.empty() || finish_ == FinishReason::kAbort) return "failed";
  if (finish_ == FinishReason::kLength) return "incomplete";
  return "completed";
}

json ResponsesResponder::usage(int64_t prompt_tokens) const {
  return {{"input_tokens", prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", 0}}},
          {"output_tokens", output_tokens_},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
          {"total_tokens", prompt_tokens + output_tokens_}};
}

std::vector<json> ResponsesResponder::finish_events(int64_t prompt_tokens) {
  std::vector<json> out;
  close(out);
  const std::string s = status();
  const std::string type = s == "completed"    ? "response.completed"
                           : s == "incomplete" ? "response.incomplete"
                                               : "response.failed";
  out.push_back(event(type.c_str(), {{"response", response(prompt_tokens)}}));
  return out;
}

json ResponsesResponder::response(int64_t prompt_tokens) const {
  json output = json::array();
  for (const Item& it : items_) output.push_back(item_json(it, "completed", true));
  json r = {{"id", cfg_.id},
            {"object", "response"},
            {"created_at", cfg_.created},
            {"status", status()},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"model", cfg_.model},
            {"output", std::move(output)},
            {"usage", usage(prompt_tokens)}};
  if (!error_.empty() || finish_ == FinishReason::kAbort)
    r["error"] = {{"code", "server_error"},
                  {"message", error_.empty() ? "the request was aborted" : error_}};
  if (finish_ == FinishReason::kLength) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  for (const auto& [k, v] : cfg_.echo.items()) r[k] = v;
  return r;
}

nlohmann::ordered_json ResponsesResponder::assistant_message() const {
  ojson m = {{"role", "assistant"}, {"content", ""}};
  std::string reasoning, content;
  ojson calls = ojson::array();
  for (const Item& it : items_) {
    if (it.type == "reasoning") reasoning += it.text;
    if (it.type == "message") content += it.text;
    if (it.type == "function_call")
      calls.push_back({{"id", it.call_id},
                       {"type", "function"},
                       {"function", {{"name", it.name}, {"arguments", it.arguments}}}});
  }
  m["content"] = content.empty() && !calls.empty() ? ojson(nullptr) : ojson(content);
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  return m;
}

namespace {

// The transport pulls a response as it is produced: named SSE events while streaming, else one
// JSON answer once the request has finished.
class ResponsesReplySource final : public DriverSource {
 public:
  using Keep = std::function<void(const ResponsesResponder&)>;
  ResponsesReplySource(std::shared_ptr<RequestDriver> driver,
                       std::shared_ptr<ResponsesResponder> responder, bool stream, Keep keep)
      : DriverSource(std::move(driver), stream),
        responder_(std::move(responder)),
        keep_(std::move(keep)) {}

 private:
  bool produce(std::string& out) override {
    if (stream_ && !started_) {
      started_ = true;
      append(out, responder_->start_events());
    }
    const bool more = poll();
    const std::vector<json> fed = responder_->feed(events());
    if (stream_) append(out, fed);
    if (more) return false;
    const std::vector<json> last = responder_->finish_events(driver_->prompt_tokens());
    if (!stream_) {
      const json r = responder_->response(driver_->prompt_tokens());
      if (r["status"] == "failed") throw InternalError(r["error"]["message"].get<std::string>());
      keep_(*responder_);
      out += dump_json(r);
      return true;
    }
    if (last.back()["type"] != "response.failed") keep_(*responder_);
    append(out, last);
    return true;
  }

  std::string stream_error(const std::string& reason) override {
    return sse_named_event("error", responder_->error_event(reason));
  }

  static void append(std::string& out, const std::vector<json>& events) {
    for (const json& e : events) out += sse_named_event(e["type"].get<std::string>(), e);
  }

  std::shared_ptr<ResponsesResponder> responder_;
  Keep keep_;
  bool started_ = false;
};

}  // namespace

Reply handle_responses(ServingContext& ctx, const std::string& body) {
  ResponsesRequest req =
      parse_responses_request(parse_json_body(body), ctx.opts.defaults, *ctx.responses);
  ctx.check_model(req.chat.model);
  ctx.text_tokenizer("input");
  if (req.chat.sampling.params.n != 1) bad_request("'n' must be 1 on /v1/responses", "n");
  check_tool_choice(ctx, req.chat);
  const std::string prompt = render_chat_prompt(ctx, req.chat);
  std::vector<int32_t> ids = encode_prompt(ctx, prompt, false, "input");
  const bool parse_tools = req.chat.tool_choice != ToolChoice::kNone;
  ResponsesOutputConfig cfg{.id = item_id("resp"),
                            .model = ctx.model_name(),
                            .created = unix_time(),
                            .parsers = {.reasoning_parser = ctx.opts.reasoning_parser,
                                        .starts_in_reasoning = prompt_opens_reasoning(prompt),
                                        .include_reasoning = req.chat.include_reasoning,
                                        .tool_parser = parse_tools ? ctx.opts.tool_call_parser : "",
                                        .tools = req.chat.tools,
                                        .tool_choice = req.chat.tool_choice},
                            .echo = std::move(req.echo)};
  const std::string id = cfg.id;
  auto driver = std::make_shared<RequestDriver>(ctx, id);
  driver->submit(std::move(ids),
                 constrained_sampling(ctx, req.chat, cfg.parsers.starts_in_reasoning), "input");
  auto responder = std::make_shared<ResponsesResponder>(std::move(cfg));

  // A finished response joins the store (unless store: false) for previous_response_id.
  auto keep = [store = req.store ? ctx.responses : nullptr, id,
               conversation = std::move(req.conversation)](const ResponsesResponder& r) mutable {
    if (!store) return;
    conversation.push_back(r.assistant_message());
    store->put(id, std::move(conversation));
  };
  Reply reply;
  reply.streaming = req.chat.sampling.stream;
  if (reply.streaming) reply.content_type = "text/event-stream";
  reply.source = std::make_shared<ResponsesReplySource>(std::move(driver), std::move(responder),
                                                        reply.streaming, std::move(keep));
  return reply;
}

}  // namespace mls::server
