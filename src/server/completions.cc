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
                                         const tok::Tokenizer& tokenizer)
    : cfg_(std::move(cfg)), tok_(tokenizer) {}

CompletionResponder::Choice& CompletionResponder::choice(int index) {
  if (static_cast<int>(choices_.size()) <= index) choices_.resize(static_cast<size_t>(index) + 1);
  Choice& c = choices_[static_cast<size_t>(index)];
  if (!c.echoed) {
    c.echoed = true;
    if (static_cast<size_t>(index) < cfg_.echo.size())
      c.text = cfg_.echo[static_cast<size_t>(index)];
    c.offset = static_cast<int64_t>(c.text.size());
  }
  return c;
}

json CompletionResponder::usage(int64_t prompt_tokens) const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens + completion_tokens_}};
}

std::vector<json> CompletionResponder::stream_chunks(const std::vector<OutputEvent>& events) {
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
    if (cfg_.logprobs && !ev.logprobs.empty())
      append_completion_logprobs(tok_, ev.logprobs, logprobs, c.offset);
    const bool done = ev.finish != FinishReason::kNone;
    if (text.empty() && logprobs.is_null() && !done) continue;
    out.push_back(
        {{"id", cfg_.id},
         {"object", "text_completion"},
         {"created", cfg_.created},
         {"model", cfg_.model},
         {"choices", json::array({{{"index", ev.choice},
                                   {"text", std::move(text)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", done ? json(finish_reason_name(ev.finish))
                                                          : json(nullptr)}}})}});
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
    if (cfg_.logprobs && !ev.logprobs.empty())
      append_completion_logprobs(tok_, ev.logprobs, c.logprobs, c.offset);
    if (ev.finish != FinishReason::kNone) c.finish = ev.finish;
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
    choices.push_back({{"index", i},
                       {"text", c.text},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", finish_reason_name(c.finish)}});
  }
  return {{"id", cfg_.id},       {"object", "text_completion"},   {"created", cfg_.created},
          {"model", cfg_.model}, {"choices", std::move(choices)}, {"usage", usage(prompt_tokens)}};
}

Reply handle_completions(ServingContext& ctx, const std::string& body) {
  const CompletionRequest req = parse_completion_request(parse_json_body(body), ctx.opts.defaults);
  ctx.check_model(req.model);
  if (req.echo && req.sampling.params.logprobs >= 0)
    bad_request("'echo' together with 'logprobs' (prompt logprobs) is not supported", "echo");

  CompletionOutputConfig cfg{.id = random_id("cmpl"),
                             .model = ctx.model_name(),
                             .created = unix_time(),
                             .echo = {},
                             .logprobs = req.sampling.params.logprobs >= 0,
                             .include_usage = req.sampling.include_usage};
  SamplingOptions sampling = req.sampling;
  sampling.constraint = structured_constraint(ctx, req.sampling.structured, "");
  auto driver = std::make_shared<RequestDriver>(ctx, cfg.id);
  for (const PromptInput& p : req.prompts) {
    std::vector<int32_t> ids = p.ids;
    std::string text;
    try {
      if (p.text) ids = ctx.tokenizer.encode(*p.text, req.add_special_tokens);
      if (req.echo) text = p.text ? *p.text : ctx.tokenizer.decode(ids, false);
    } catch (const InvalidArgument& e) {
      bad_request(e.what(), "prompt");
    }
    for (int i = 0; i < req.sampling.params.n; ++i) cfg.echo.push_back(text);
    driver->submit(std::move(ids), sampling, "prompt");
  }
  auto responder = std::make_shared<CompletionResponder>(std::move(cfg), ctx.tokenizer);

  return reply_from_driver(driver, responder, req.sampling.stream);
}

}  // namespace mls::server
