#include "server/completions.h"

#include "core/error.h"
#include "server/errors.h"
#include "server/logprobs_format.h"
#include "server/reply_from_driver.h"
#include "server/request_driver.h"
#include "server/sse.h"
#include "server/structured_output.h"

namespace mls::server {

using json = nlohmann::json;

CompletionResponder::CompletionResponder(CompletionOutputConfig cfg,
                                         const tok::Tokenizer* tokenizer)
    : cfg_(std::move(cfg)), tok_(tokenizer) {}

CompletionResponder::Choice& CompletionResponder::choice(int index) {
  if (static_cast<int>(choices_.size()) <= index) choices_.resize(static_cast<size_t>(index) + 1);
  Choice& c = choices_[static_cast<size_t>(index)];
  if (!c.echoed) {
    c.echoed = true;
    if (static_cast<size_t>(index) < cfg_.echo.size())
      c.text = cfg_.echo[static_cast<size_t>(index)];
    // With echoed prompt logprobs the offsets count from the prompt's first token.
    const bool prompt_lps = static_cast<size_t>(index) < cfg_.echo_ids.size() &&
                            !cfg_.echo_ids[static_cast<size_t>(index)].empty();
    c.offset = prompt_lps ? 0 : static_cast<int64_t>(c.text.size());
  }
  return c;
}

void CompletionResponder::add_logprobs(int index, Choice& c, const OutputEvent& ev, json& obj) {
  const auto i = static_cast<size_t>(index);
  const bool first = !c.scored;
  c.scored = true;
  if (first) c.prompt_lps = ev.prompt_logprobs;
  if (!cfg_.logprobs) return;
  if (first && i < cfg_.echo_ids.size() && !cfg_.echo_ids[i].empty())
    append_completion_prompt_logprobs(*tok_, cfg_.echo_ids[i], ev.prompt_logprobs, obj, c.offset);
  if (!ev.logprobs.empty()) append_completion_logprobs(*tok_, ev.logprobs, obj, c.offset);
}

json CompletionResponder::usage(int64_t prompt_tokens) const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens + completion_tokens_}};
}

std::vector<json> CompletionResponder::stream_chunks(const std::vector<OutputEvent>& events,
                                                     int64_t prompt_tokens) {
  std::vector<json> out;
  for (const OutputEvent& ev : events) {
    if (!ev.error.empty()) {
      out.push_back({{"error", error_body(500, ev.error)["error"]}});
      continue;
    }
    const bool first = static_cast<int>(choices_.size()) <= ev.choice ||
                       !choices_[static_cast<size_t>(ev.choice)].echoed;
    Choice& c = choice(ev.choice);
    completion_tokens_ += static_cast<int64_t>(ev.token_ids.size());
    // The echoed prompt rides on the choice's first chunk.
    std::string text = first ? c.text + ev.text : ev.text;
    json logprobs = nullptr;
    add_logprobs(ev.choice, c, ev, logprobs);
    const bool done = ev.finish != FinishReason::kNone;
    const bool ids = cfg_.return_token_ids && !ev.token_ids.empty();
    if (text.empty() && logprobs.is_null() && !done && !ids) continue;
    json choice = {{"index", ev.choice},
                   {"text", std::move(text)},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", done ? json(finish_reason_name(ev.finish)) : json(nullptr)}};
    if (done) choice["stop_reason"] = stop_reason_json(ev);
    if (cfg_.return_token_ids) {
      if (first) choice["prompt_token_ids"] = cfg_.prompt_ids.at(static_cast<size_t>(ev.choice));
      choice["token_ids"] = ev.token_ids;
    }
    json chunk = {{"id", cfg_.id},
                  {"object", "text_completion"},
                  {"created", cfg_.created},
                  {"model", cfg_.model},
                  {"choices", json::array({std::move(choice)})}};
    if (cfg_.continuous_usage) chunk["usage"] = usage(prompt_tokens);
    out.push_back(std::move(chunk));
  }
  return out;
}

std::optional<json> CompletionResponder::usage_chunk(int64_t prompt_tokens) const {
  if (!cfg_.include_usage) return std::nullopt;
  return json{
      {"id", cfg_.id},       {"object", "text_completion"}, {"created", cfg_.created},
      {"model", cfg_.model}, {"choices", json::array()},    {"usage", usage(prompt_tokens)}};
}

void CompletionResponder::absorb(const std::vector<OutputEvent>& events) {
  for (const OutputEvent& ev : events) {
    if (!ev.error.empty()) throw InternalError(ev.error);
    Choice& c = choice(ev.choice);
    completion_tokens_ += static_cast<int64_t>(ev.token_ids.size());
    c.text += ev.text;
    if (cfg_.return_token_ids)
      c.token_ids.insert(c.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    add_logprobs(ev.choice, c, ev, c.logprobs);
    if (ev.finish != FinishReason::kNone) {
      c.finish = ev.finish;
      c.stop_reason = stop_reason_json(ev);
    }
  }
}

json CompletionResponder::response(int64_t prompt_tokens) const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json logprobs = cfg_.logprobs && c.logprobs.is_null() ? json{{"tokens", json::array()},
                                                                 {"token_logprobs", json::array()},
                                                                 {"top_logprobs", json::array()},
                                                                 {"text_offset", json::array()}}
                                                          : c.logprobs;
    json choice = {{"index", i},
                   {"text", c.text},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", finish_reason_name(c.finish)},
                   {"stop_reason", c.stop_reason}};
    if (cfg_.prompt_logprobs)
      choice["prompt_logprobs"] =
          prompt_logprob_entries(*tok_, cfg_.prompt_ids.at(i), c.prompt_lps);
    if (cfg_.return_token_ids) {
      choice["prompt_token_ids"] = cfg_.prompt_ids.at(i);
      choice["token_ids"] = c.token_ids;
    }
    choices.push_back(std::move(choice));
  }
  return {{"id", cfg_.id},       {"object", "text_completion"},   {"created", cfg_.created},
          {"model", cfg_.model}, {"choices", std::move(choices)}, {"usage", usage(prompt_tokens)}};
}

Reply handle_completions(ServingContext& ctx, const std::string& body) {
  const CompletionRequest req = parse_completion_request(parse_json_body(body), ctx.opts.defaults);
  ctx.check_model(req.model);
  // Fields that turn text into ids or ids into text: a 400 naming the field without a tokenizer.
  for (const PromptInput& p : req.prompts)
    if (p.text) ctx.text_tokenizer("prompt");
  if (req.echo) ctx.text_tokenizer("echo");
  if (req.sampling.params.logprobs >= 0) ctx.text_tokenizer("logprobs");
  if (req.prompt_logprobs) ctx.text_tokenizer("prompt_logprobs");
  if (!req.sampling.stop.empty()) ctx.text_tokenizer("stop");
  if (req.sampling.structured.kind != StructuredOutput::Kind::kNone)
    ctx.text_tokenizer(req.sampling.structured.field);
  const bool echo_logprobs = req.echo && req.sampling.params.logprobs >= 0;
  CompletionOutputConfig cfg{.id = random_id("cmpl"),
                             .model = ctx.model_name(),
                             .created = unix_time(),
                             .echo = {},
                             .echo_ids = {},
                             .logprobs = req.sampling.params.logprobs >= 0,
                             .prompt_logprobs = req.prompt_logprobs,
                             .prompt_ids = {},
                             .return_token_ids = req.return_token_ids.value_or(!ctx.tokenizer),
                             .include_usage = req.sampling.include_usage,
                             .continuous_usage = req.sampling.continuous_usage};
  SamplingOptions sampling = req.sampling;
  sampling.constraint = structured_constraint(ctx, req.sampling.structured, "");
  auto driver = std::make_shared<RequestDriver>(ctx, cfg.id);
  for (const PromptInput& p : req.prompts) {
    std::vector<int32_t> ids = p.ids;
    std::string text;
    try {
      if (p.text) ids = ctx.text_tokenizer("prompt").encode(*p.text, req.add_special_tokens);
      if (req.echo) text = p.text ? *p.text : ctx.text_tokenizer("echo").decode(ids, false);
    } catch (const InvalidArgument& e) {
      bad_request(e.what(), "prompt");
    }
    for (int i = 0; i < req.sampling.params.n; ++i) {
      cfg.echo.push_back(text);
      cfg.echo_ids.push_back(echo_logprobs ? ids : std::vector<int32_t>{});
      cfg.prompt_ids.push_back(
          req.prompt_logprobs || cfg.return_token_ids ? ids : std::vector<int32_t>{});
    }
    driver->submit(std::move(ids), sampling, "prompt");
  }
  auto responder = std::make_shared<CompletionResponder>(std::move(cfg), ctx.tokenizer);

  return reply_from_driver(driver, responder, req.sampling.stream);
}

}  // namespace mls::server
