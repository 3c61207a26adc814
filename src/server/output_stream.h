// From engine token events to text events. The engine's callback runs on its loop thread, so the
// work done there is kept small and bounded: detokenize the new token incrementally, advance the
// stop-string automaton over the new text (the engine needs the verdict before its next step;
// the automaton is built on the HTTP thread when the request is submitted), copy logprobs, push
// one event and notify. Protocol shaping (reasoning and tool-call parsing, JSON, SSE) happens on
// the HTTP handler thread that drains the channel.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/stop_matcher.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace mls::server {

class Metrics;

// What one event adds to one choice (index over the whole HTTP request).
struct OutputEvent {
  int choice = 0;
  std::string text;                // text that became final (stop strings excluded)
  std::vector<int32_t> token_ids;  // tokens generated since the last event of this choice
  std::vector<Logprobs> logprobs;  // one per token when the request asked for logprobs
  FinishReason finish = FinishReason::kNone;  // set on the choice's last event
  std::string error;                          // an internal failure ends the choice
  // On the choice's first event when prompt_logprobs were asked: prompt positions 1.. .
  std::vector<Logprobs> prompt_logprobs;
  // vLLM's stop_reason, on the last event of a choice that stopped on a stop string (which one)
  // or on one of the request's stop_token_ids (which id); neither for EOS or length.
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token;
  Clock::time_point at{};  // when the engine produced its token (response timings)
};

// vLLM's stop_reason of a choice's last event: the stop token id, the stop string, or null.
nlohmann::json stop_reason_json(const OutputEvent& ev);

// Events of every engine request of one HTTP request, in arrival order. Any thread.
class EventChannel {
 public:
  void push(OutputEvent ev);
  // Waits up to `timeout` for events and appends them to `out`; false when none came.
  bool wait(std::vector<OutputEvent>& out, std::chrono::milliseconds timeout);
  // Appends the events queued now, without waiting; false when there were none.
  bool take(std::vector<OutputEvent>& out);
  // Runs after every push, outside the lock (the transport's wake-up for a pulled reply).
  void set_notify(std::function<void()> notify);

 private:
  std::mutex mu_;
  std::function<void()> notify_;
  std::condition_variable cv_;
  std::deque<OutputEvent> queue_;
};

struct StreamSpec {
  int first_choice = 0;  // choice index of sample 0
  int n = 1;
  int64_t max_tokens = 0;  // the request's limit, for metrics (0: none given)
  bool skip_special_tokens = true;
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;   // the matched stop string or stop token's text
  std::vector<int64_t> stop_token_ids = {};  // the request's (stop_reason reports them)
  // Test-only scripted output (`serve --test-script`): these tokens replace the sampled ones
  // and the sample stops after the last, so tool-call and reasoning paths can be driven end to
  // end by a model with random weights.
  std::shared_ptr<const std::vector<int32_t>> script;
};

// The token callback of one engine request. Never throws into the engine. Without a tokenizer
// (null: --skip-tokenizer-init) events carry token ids and no text.
class OutputStream {
 public:
  OutputStream(const tok::Tokenizer* tokenizer, StreamSpec spec,
               std::shared_ptr<EventChannel> channel, Metrics* metrics);

  Verdict on_token(const TokenEvent& ev);

  // A TokenCallback owning a new OutputStream.
  static TokenCallback callback(const tok::Tokenizer* tokenizer, StreamSpec spec,
                                std::shared_ptr<EventChannel> channel, Metrics* metrics);

 private:
  struct Sample {
    explicit Sample(std::optional<tok::IncrementalDetokenizer> d) : detok(std::move(d)) {}
    std::optional<tok::IncrementalDetokenizer> detok;  // none without a tokenizer
    std::string held;    // final text not yet released: it may start a stop string
    size_t scanned = 0;  // bytes of `held` the stop automaton has seen
    StopMatcher::State stop_state = 0;
    int64_t num_tokens = 0;
    bool done = false;
    Clock::time_point last_token;
  };
  Verdict handle(const TokenEvent& ev);
  std::string token_text(Sample& s, int32_t id);
  // Moves the releasable prefix of s.held into ev.text; true when a stop string matched (it is
  // then in ev.stop_string).
  bool release(Sample& s, OutputEvent& ev);
  void finish(Sample& s, OutputEvent& ev, FinishReason reason, const TokenEvent& src);

  const tok::Tokenizer* tok_;
  StreamSpec spec_;
  std::shared_ptr<EventChannel> channel_;
  Metrics* metrics_;
  StopMatcher stops_;
  std::vector<Sample> samples_;
  int num_done_ = 0;
};

}  // namespace mls::server
