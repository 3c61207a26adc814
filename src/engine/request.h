// A generation request as the engine receives it, and what the engine reports back for each
// token. The engine works on token ids only: the text layer above (detokenizer, stop strings)
// observes tokens through the callback and may finish a sample early by returning kStop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/token_constraint.h"

namespace mls {

using Clock = std::chrono::steady_clock;

enum class FinishReason { kNone, kStop, kLength, kAbort };
const char* finish_reason_name(FinishReason r);  // "", "stop", "length", "abort"

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct Logprobs {
  TokenLogprob sampled;
  int64_t rank = 0;               // 1 + how many tokens are strictly more likely
  std::vector<TokenLogprob> top;  // the `logprobs` most likely, descending
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // over all samples of the request
};

struct Timings {
  Clock::time_point arrival;
  Clock::time_point scheduled;    // first scheduled in a step; default-constructed until then
  Clock::time_point first_token;  // of any sample; default-constructed until then
  Clock::time_point finish;       // of this sample; default-constructed until then
};

struct TokenEvent {
  const std::string* request_id = nullptr;
  int sample_index = 0;
  // -1: no new token (the notice that ends a sample after abort_request or a kStop verdict).
  int32_t token_id = -1;
  const Logprobs* logprobs = nullptr;  // set when the request asked for logprobs
  // On a sample's first token when the request asked for prompt_logprobs: one entry per prompt
  // position from 1 on (the first token has no context to be scored in).
  const std::vector<Logprobs>* prompt_logprobs = nullptr;
  FinishReason finish = FinishReason::kNone;
  // Set (finish kAbort) when the step that ran this sample failed: the request ends with an
  // error, the engine goes on.
  const std::string* error = nullptr;
  Usage usage;
  Timings timings;
};

// What the request's owner wants after seeing a token (e.g. kStop when a stop string matched).
enum class Verdict { kContinue, kStop };

// Called on the engine's loop thread; must not call back into the engine's step(). A token
// that ends nothing may arrive while the next step's forward runs (Engine::emit).
using TokenCallback = std::function<Verdict(const TokenEvent&)>;

struct Request {
  std::string id;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  TokenCallback on_token;
  // Structured output: the constraint at the start of the output, cloned for each sample.
  std::shared_ptr<const TokenConstraint> constraint = nullptr;
};

}  // namespace mls
