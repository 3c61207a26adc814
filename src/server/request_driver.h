// Runs the engine requests of one HTTP request (several prompts, n samples each) and collects
// their events from one channel, so that handlers see a single stream of choices.
#pragma once

#include <functional>
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

  // Appends the events that have arrived, without waiting; false once every choice has
  // finished (its last events included). Throws ApiError 500 when the engine loop has died.
  bool poll(std::vector<OutputEvent>& out);
  // `notify` runs on the engine's thread whenever an event arrives (see ReplySource).
  void set_notify(std::function<void()> notify) { channel_->set_notify(std::move(notify)); }
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
