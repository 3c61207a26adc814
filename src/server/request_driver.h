// Runs the engine requests of one HTTP request (several prompts, n samples each) and collects
// their events from one channel, so that handlers see a single stream of choices.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/output_stream.h"
#include "server/serving_context.h"

namespace mls::server {

class RequestDriver {
 public:
  RequestDriver(ServingContext& ctx, std::string id);
  ~RequestDriver();
  RequestDriver(const RequestDriver&) = delete;
  RequestDriver& operator=(const RequestDriver&) = delete;

  // Checks the length budget (400 with the numbers), then queues one engine request whose n
  // samples become the next n choices. `what` names the prompt in messages ("messages",
  // "prompt").
  void submit(std::vector<int32_t> prompt_ids, const SamplingOptions& sampling, const char* what);

  // Waits briefly for events; false when every choice has finished. Throws ApiError 500 when
  // the engine loop has died.
  bool next(std::vector<OutputEvent>& out);
  // Aborts every request still running (a client that went away).
  void abort();

  int num_choices() const { return num_choices_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  // llama-server's `timings` object (prompt and generation ms, tokens, tokens/s), measured
  // from this driver's creation; null unless the server runs with --enable-response-timings.
  nlohmann::json timings() const;

 private:
  ServingContext& ctx_;
  std::string id_;
  std::shared_ptr<EventChannel> channel_ = std::make_shared<EventChannel>();
  std::vector<std::string> engine_ids_;
  int num_choices_ = 0;
  int num_finished_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  Clock::time_point start_ = Clock::now(), first_token_{}, last_token_{};
};

}  // namespace mls::server
