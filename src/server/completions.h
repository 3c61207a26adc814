// POST /v1/completions: prompts (text or token ids, one or many) straight to the engine; each
// prompt's n samples become consecutive choices, returned as a text_completion or streamed.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/output_stream.h"
#include "server/serving_context.h"

namespace mls::server {

struct CompletionOutputConfig {
  std::string id;
  std::string model;
  int64_t created = 0;
  std::vector<std::string> echo;  // per choice: the prompt text to prepend (echo), else empty
  // Per choice: the prompt's ids when its logprobs lead the choice's (echo with logprobs).
  std::vector<std::vector<int32_t>> echo_ids = {};
  bool logprobs = false;
  bool prompt_logprobs = false;                       // each choice carries vLLM's prompt_logprobs
  std::vector<std::vector<int32_t>> prompt_ids = {};  // per choice (prompt_logprobs, token ids)
  // Each choice carries prompt_token_ids (a stream: on its first chunk) and token_ids (a stream:
  // each chunk's new ones), as vLLM's return_token_ids.
  bool return_token_ids = false;
  bool include_usage = false;
  bool continuous_usage = false;  // every chunk carries the usage so far
};

class CompletionResponder {
 public:
  // `tokenizer` null (--skip-tokenizer-init): the handler has refused logprobs.
  CompletionResponder(CompletionOutputConfig cfg, const tok::Tokenizer* tokenizer);

  std::vector<nlohmann::json> stream_chunks(const std::vector<OutputEvent>& events,
                                            int64_t prompt_tokens);
  std::optional<nlohmann::json> usage_chunk(int64_t prompt_tokens) const;

  void absorb(const std::vector<OutputEvent>& events);
  nlohmann::json response(int64_t prompt_tokens) const;

 private:
  struct Choice {
    std::string text;
    nlohmann::json logprobs;  // null until the first token with logprobs
    int64_t offset = 0;
    bool echoed = false;
    FinishReason finish = FinishReason::kNone;
    nlohmann::json stop_reason = nullptr;
    bool scored = false;  // the first event (which carries the prompt's logprobs) came
    std::vector<Logprobs> prompt_lps;
    std::vector<int32_t> token_ids;  // return_token_ids
  };
  Choice& choice(int index);
  // The event's logprobs (the echoed prompt's first) appended to `obj`.
  void add_logprobs(int index, Choice& c, const OutputEvent& ev, nlohmann::json& obj);
  nlohmann::json usage(int64_t prompt_tokens) const;

  CompletionOutputConfig cfg_;
  const tok::Tokenizer* tok_;
  std::vector<Choice> choices_;
  int64_t completion_tokens_ = 0;
};

Reply handle_completions(ServingContext& ctx, const std::string& body);

}  // namespace mls::server
