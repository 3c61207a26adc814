#include "server/chat_completions.h"

#include <fmt/format.h>

#include "core/error.h"
#include "server/errors.h"
#include "server/logprobs_format.h"
#include "server/reply_from_driver.h"
#include "server/request_driver.h"
#include "server/sse.h"
#include "server/structured_output.h"

namespace mls::server {

using json = nlohmann::json;

struct ChatResponder::Choice {
  int index = 0;
  std::unique_ptr<ChatDeltaParser> parser;
  bool opened = false;  // streaming: the role chunk went out
  FinishReason finish = FinishReason::kNone;
  std::string error;
  // Non-streaming accumulation.
  std::string reasoning;
  std::string content;
  std::vector<chat::ToolCall> calls;
  std::vector<Logprobs> logprobs;
  std::vector<Logprobs> prompt_logprobs;
  nlohmann::json stop_reason = nullptr;
};

ChatDeltaParser::ChatDeltaParser(const ChatOutputConfig& cfg)
    : include_reasoning_(cfg.include_reasoning), parallel_tool_calls_(cfg.parallel_tool_calls) {
  if (!cfg.reasoning_parser.empty())
    reasoning_parser_ = std::make_unique<chat::ReasoningParser>(cfg.starts_in_reasoning);
  if (!cfg.tool_parser.empty() && cfg.tool_choice != ToolChoice::kNone)
    tool_parser_ =
        std::make_unique<chat::ToolParser>(chat::tool_call_format(cfg.tool_parser, cfg.tools));
}

ChatDelta ChatDeltaParser::feed(const std::string& text, bool last) {
  ChatDelta d;
  std::string content = text;
  if (reasoning_parser_) {
    chat::ReasoningDelta r = reasoning_parser_->feed(text);
    if (last) {
      chat::ReasoningDelta tail = reasoning_parser_->finish();
      r.reasoning += tail.reasoning;
      r.content += tail.content;
    }
    if (include_reasoning_) d.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  if (tool_parser_) {
    std::vector<chat::ToolEvent> events = tool_parser_->feed(content);
    if (last)
      for (chat::ToolEvent& e : tool_parser_->finish()) events.push_back(std::move(e));
    // Content events are folded into the content delta; the rest stay tool-call events
    // (without parallel_tool_calls, those of the first call only).
    for (chat::ToolEvent& e : events) {
      if (e.kind == chat::ToolEvent::kContent)
        d.content += e.text;
      else if (parallel_tool_calls_ || e.index == 0)
        d.tool_events.push_back(std::move(e));
    }
  } else {
    d.content = std::move(content);
  }
  return d;
}

ChatResponder::ChatResponder(ChatOutputConfig cfg, const tok::Tokenizer& tokenizer)
    : cfg_(std::move(cfg)), tok_(tokenizer) {}

ChatResponder::~ChatResponder() = default;

ChatResponder::Choice& ChatResponder::choice(int index) {
  while (static_cast<int>(choices_.size()) <= index) {
    auto c = std::make_unique<Choice>();
    c->index = static_cast<int>(choices_.size());
    c->parser = std::make_unique<ChatDeltaParser>(cfg_);
    choices_.push_back(std::move(c));
  }
  return *choices_[static_cast<size_t>(index)];
}

ChatDelta ChatResponder::process(Choice& c, const OutputEvent& ev) {
  completion_tokens_ += static_cast<int64_t>(ev.token_ids.size());
  ChatDelta d = c.parser->feed(ev.text, ev.finish != FinishReason::kNone);
  if (ev.finish != FinishReason::kNone) {
    c.finish = ev.finish;
    c.error = ev.error;
    c.stop_reason = stop_reason_json(ev);
  }
  if (!ev.prompt_logprobs.empty()) c.prompt_logprobs = ev.prompt_logprobs;
  return d;
}

const char* ChatResponder::finish_reason(const Choice& c) const {
  const bool has_calls = !c.calls.empty();
  // A named tool_choice is an answer the client asked for: OpenAI reports "stop".
  if (has_calls && c.finish == FinishReason::kStop && cfg_.tool_choice != ToolChoice::kNamed)
    return "tool_calls";
  return finish_reason_name(c.finish);
}

json ChatResponder::usage(int64_t prompt_tokens) const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens + completion_tokens_}};
}

std::vector<json> ChatResponder::stream_chunks(const std::vector<OutputEvent>& events,
                                               int64_t prompt_tokens) {
  std::vector<json> out;
  const auto chunk = [&](int index, json delta, const json& logprobs, const json& finish,
                         const json& stop_reason = nullptr) {
    json choice = {{"index", index},
                   {"delta", std::move(delta)},
                   {"logprobs", logprobs},
                   {"finish_reason", finish}};
    if (!finish.is_null()) choice["stop_reason"] = stop_reason;
    json c = {{"id", cfg_.id},
              {"object", "chat.completion.chunk"},
              {"created", cfg_.created},
              {"model", cfg_.model},
              {"choices", json::array({std::move(choice)})}};
    if (cfg_.continuous_usage) c["usage"] = usage(prompt_tokens);
    return c;
  };
  for (const OutputEvent& ev : events) {
    Choice& c = choice(ev.choice);
    if (!c.opened) {
      c.opened = true;
      out.push_back(chunk(c.index, {{"role", cfg_.role}, {"content", ""}}, nullptr, nullptr));
    }
    if (!ev.error.empty()) {
      out.push_back({{"error", error_body(500, ev.error)["error"]}});
      c.finish = ev.finish;
      continue;
    }
    ChatDelta d = process(c, ev);
    json logprobs = nullptr;
    if (cfg_.logprobs && !ev.logprobs.empty())
      logprobs = {{"content", chat_logprob_entries(tok_, ev.logprobs)}};
    json delta = json::object();
    if (!d.reasoning.empty()) {
      delta["reasoning"] = d.reasoning;
      delta["reasoning_content"] = d.reasoning;
    }
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_events.empty()) {
      json calls = json::array();
      for (const chat::ToolEvent& e : d.tool_events) {
        if (e.kind == chat::ToolEvent::kToolCallStart) {
          c.calls.push_back({e.id, e.name, ""});
          calls.push_back({{"index", e.index},
                           {"id", e.id},
                           {"type", "function"},
                           {"function", {{"name", e.name}, {"arguments", ""}}}});
        } else {
          calls.push_back({{"index", e.index}, {"function", {{"arguments", e.text}}}});
        }
      }
      delta["tool_calls"] = std::move(calls);
    }
    const bool done = ev.finish != FinishReason::kNone;
    if (delta.empty() && logprobs.is_null() && !done) continue;
    out.push_back(chunk(c.index, std::move(delta), logprobs,
                        done ? json(finish_reason(c)) : json(nullptr), c.stop_reason));
  }
  return out;
}

std::optional<json> ChatResponder::usage_chunk(int64_t prompt_tokens) const {
  if (!cfg_.include_usage) return std::nullopt;
  return json{
      {"id", cfg_.id},       {"object", "chat.completion.chunk"}, {"created", cfg_.created},
      {"model", cfg_.model}, {"choices", json::array()},          {"usage", usage(prompt_tokens)}};
}

void ChatResponder::absorb(const std::vector<OutputEvent>& events) {
  for (const OutputEvent& ev : events) {
    Choice& c = choice(ev.choice);
    if (!ev.error.empty()) throw InternalError(ev.error);
    ChatDelta d = process(c, ev);
    c.reasoning += d.reasoning;
    c.content += d.content;
    for (const chat::ToolEvent& e : d.tool_events) {
      if (e.kind == chat::ToolEvent::kToolCallStart)
        c.calls.push_back({e.id, e.name, ""});
      else
        c.calls.at(static_cast<size_t>(e.index)).arguments += e.text;
    }
    c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  }
}

json ChatResponder::response(int64_t prompt_tokens) const {
  json choices = json::array();
  for (const auto& cp : choices_) {
    const Choice& c = *cp;
    json msg = {{"role", cfg_.role}};
    msg["content"] = c.content.empty() && !c.calls.empty() ? json(nullptr) : json(c.content);
    if (!c.reasoning.empty()) {
      msg["reasoning"] = c.reasoning;
      msg["reasoning_content"] = c.reasoning;
    }
    if (!c.calls.empty()) {
      json calls = json::array();
      for (const chat::ToolCall& tc : c.calls)
        calls.push_back({{"id", tc.id},
                         {"type", "function"},
                         {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
      msg["tool_calls"] = std::move(calls);
    }
    json logprobs = nullptr;
    if (cfg_.logprobs) logprobs = {{"content", chat_logprob_entries(tok_, c.logprobs)}};
    choices.push_back({{"index", c.index},
                       {"message", std::move(msg)},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", finish_reason(c)},
                       {"stop_reason", c.stop_reason}});
  }
  json out = {
      {"id", cfg_.id},       {"object", "chat.completion"},   {"created", cfg_.created},
      {"model", cfg_.model}, {"choices", std::move(choices)}, {"usage", usage(prompt_tokens)}};
  // vLLM reports the prompt's logprobs once per response (they are the same for every choice).
  if (cfg_.prompt_logprobs && !choices_.empty())
    out["prompt_logprobs"] =
        prompt_logprob_entries(tok_, cfg_.prompt_ids, choices_[0]->prompt_logprobs);
  return out;
}

std::string render_chat_prompt(const ServingContext& ctx, const ChatRequest& req) {
  if (!ctx.chat_template)
    bad_request("this model has no chat template; pass --chat-template or use /v1/completions",
                "messages");
  nlohmann::ordered_json t = req.template_request;
  if (!ctx.opts.default_chat_template_kwargs.empty()) {
    nlohmann::ordered_json kwargs = ctx.opts.default_chat_template_kwargs;
    if (t.contains("chat_template_kwargs")) kwargs.update(t["chat_template_kwargs"]);
    t["chat_template_kwargs"] = std::move(kwargs);
  }
  if (ctx.opts.exclude_tools_when_tool_choice_none && req.tool_choice == ToolChoice::kNone)
    t.erase("tools");
  try {
    return chat::render_chat(*ctx.chat_template, t);
  } catch (const InvalidArgument& e) {
    bad_request(fmt::format("chat template: {}", e.what()), "messages");
  }
}

bool prompt_opens_reasoning(const std::string& prompt) {
  const size_t end = prompt.find_last_not_of(" \n");
  return end != std::string::npos && end + 1 >= 7 && prompt.compare(end + 1 - 7, 7, "<think>") == 0;
}

void check_tool_choice(const ServingContext& ctx, const ChatRequest& req) {
  if (req.tool_choice != ToolChoice::kNone && ctx.opts.tool_call_parser.empty())
    bad_request("tool calls need the server started with --tool-call-parser", "tool_choice");
  if (req.tool_choice == ToolChoice::kAuto && !ctx.opts.enable_auto_tool_choice)
    bad_request(
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
        "tool_choice");
}

std::vector<int32_t> encode_prompt(const ServingContext& ctx, const std::string& prompt,
                                   bool add_special_tokens, const char* what) {
  try {
    return ctx.text_tokenizer(what).encode(prompt, add_special_tokens);
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), what);
  }
}

SamplingOptions constrained_sampling(ServingContext& ctx, const ChatRequest& req,
                                     bool starts_in_reasoning) {
  const bool forced_call =
      req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed;
  if (forced_call && req.sampling.structured.kind != StructuredOutput::Kind::kNone)
    bad_request(
        fmt::format("'{}' cannot be combined with tool_choice '{}'", req.sampling.structured.field,
                    req.tool_choice == ToolChoice::kNamed ? req.tool_name : "required"),
        req.sampling.structured.field);
  // With a reasoning parser, a section the prompt opens stays free until its end marker, as
  // vLLM does.
  const std::string gate = !ctx.opts.reasoning_parser.empty() && starts_in_reasoning
                               ? std::string(chat::kReasoningEnd)
                               : std::string();
  SamplingOptions sampling = req.sampling;
  if (forced_call)
    sampling.constraint = tool_call_constraint(
        ctx, req.tools, req.tool_choice == ToolChoice::kNamed ? req.tool_name : "",
        req.parallel_tool_calls, gate);
  else if (req.sampling.structured.kind != StructuredOutput::Kind::kNone)
    // Under tool_choice "auto" too: the structured output constrains the content.
    sampling.constraint = structured_constraint(ctx, req.sampling.structured, gate);
  else if (req.tool_choice == ToolChoice::kAuto && !req.tools.empty())
    sampling.constraint = auto_tool_call_constraint(ctx, req.tools, req.parallel_tool_calls, gate);
  return sampling;
}

Reply handle_chat_completions(ServingContext& ctx, const std::string& body) {
  const ChatRequest req = parse_chat_request(parse_json_body(body), ctx.opts.defaults);
  ctx.check_model(req.model);
  const tok::Tokenizer& tokenizer = ctx.text_tokenizer("messages");
  check_tool_choice(ctx, req);
  const bool parse_tools = req.tool_choice != ToolChoice::kNone;
  const std::string prompt = render_chat_prompt(ctx, req);
  std::vector<int32_t> ids = encode_prompt(ctx, prompt, req.add_special_tokens, "messages");

  const bool starts_in_reasoning = prompt_opens_reasoning(prompt);
  const SamplingOptions sampling = constrained_sampling(ctx, req, starts_in_reasoning);

  ChatOutputConfig cfg{.id = random_id("chatcmpl"),
                       .model = ctx.model_name(),
                       .created = unix_time(),
                       .role = ctx.opts.response_role,
                       .reasoning_parser = ctx.opts.reasoning_parser,
                       .starts_in_reasoning = starts_in_reasoning,
                       .include_reasoning = req.include_reasoning,
                       .tool_parser = parse_tools ? ctx.opts.tool_call_parser : "",
                       .tools = req.tools,
                       .tool_choice = req.tool_choice,
                       .parallel_tool_calls = req.parallel_tool_calls,
                       .logprobs = req.logprobs,
                       .include_usage = req.sampling.include_usage,
                       .continuous_usage = req.sampling.continuous_usage,
                       .prompt_logprobs = req.sampling.params.prompt_logprobs >= 0,
                       .prompt_ids = ids};
  auto driver = std::make_shared<RequestDriver>(ctx, cfg.id);
  driver->submit(std::move(ids), sampling, "messages");
  auto responder = std::make_shared<ChatResponder>(std::move(cfg), tokenizer);

  return reply_from_driver(driver, responder, req.sampling.stream);
}

}  // namespace mls::server
