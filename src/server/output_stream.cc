#include "server/output_stream.h"

#include <algorithm>

#include "core/error.h"
#include "server/metrics.h"

namespace mls::server {

nlohmann::json stop_reason_json(const OutputEvent& ev) {
  if (ev.stop_token) return *ev.stop_token;
  if (ev.stop_string) return *ev.stop_string;
  return nullptr;
}

void EventChannel::push(OutputEvent ev) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(ev));
    notify = notify_;
  }
  cv_.notify_one();
  if (notify) notify();
}

bool EventChannel::take(std::vector<OutputEvent>& out) {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return false;
  for (OutputEvent& ev : queue_) out.push_back(std::move(ev));
  queue_.clear();
  return true;
}

void EventChannel::set_notify(std::function<void()> notify) {
  std::lock_guard lock(mu_);
  notify_ = std::move(notify);
}

bool EventChannel::wait(std::vector<OutputEvent>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return false;
  for (OutputEvent& ev : queue_) out.push_back(std::move(ev));
  queue_.clear();
  return true;
}

OutputStream::OutputStream(const tok::Tokenizer* tokenizer, StreamSpec spec,
                           std::shared_ptr<EventChannel> channel, Metrics* metrics)
    : tok_(tokenizer),
      spec_(std::move(spec)),
      channel_(std::move(channel)),
      metrics_(metrics),
      stops_(spec_.stop) {
  for (int i = 0; i < spec_.n; ++i)
    samples_.emplace_back(
        tok_ ? std::optional(tok::IncrementalDetokenizer(*tok_, spec_.skip_special_tokens))
             : std::nullopt);
}

TokenCallback OutputStream::callback(const tok::Tokenizer* tokenizer, StreamSpec spec,
                                     std::shared_ptr<EventChannel> channel, Metrics* metrics) {
  auto stream =
      std::make_shared<OutputStream>(tokenizer, std::move(spec), std::move(channel), metrics);
  return [stream](const TokenEvent& ev) { return stream->on_token(ev); };
}

Verdict OutputStream::on_token(const TokenEvent& ev) {
  try {
    return handle(ev);
  } catch (const std::exception& e) {
    // A failure here must not unwind through the engine's step: end every open choice instead.
    for (size_t i = 0; i < samples_.size(); ++i) {
      if (samples_[i].done) continue;
      samples_[i].done = true;
      OutputEvent ev_error;
      ev_error.choice = spec_.first_choice + static_cast<int>(i);
      ev_error.finish = FinishReason::kAbort;
      ev_error.error = e.what();
      channel_->push(std::move(ev_error));
    }
    return Verdict::kStop;
  }
}

std::string OutputStream::token_text(Sample& s, int32_t id) {
  // The model's vocabulary may be padded past the tokenizer's (1024 vs 1000 ids): such ids
  // have no text.
  if (!s.detok || id < 0 || id >= tok_->vocab_size()) return {};
  try {
    return s.detok->push(id);
  } catch (const InvalidArgument&) {
    return {};  // a hole in the tokenizer's id space
  }
}

bool OutputStream::release(Sample& s, OutputEvent& ev) {
  const std::optional<size_t> match = stops_.scan(s.stop_state, s.held, s.scanned);
  if (match) {
    // Which string matched there: at equal starts the first in the request's list.
    const std::string* matched = nullptr;
    for (const std::string& stop : spec_.stop)
      if (s.held.compare(*match, stop.size(), stop) == 0) {
        matched = &stop;
        break;
      }
    // The stop string itself is output only when asked (vLLM's include_stop_str_in_output).
    const size_t shown = spec_.include_stop_str_in_output && matched ? matched->size() : 0;
    ev.text += s.held.substr(0, *match + shown);
    if (matched) ev.stop_string = *matched;
    s.held.clear();
    s.scanned = 0;
    return true;
  }
  // Keep back what could still grow into a stop string, cut at a character boundary.
  size_t cut = s.held.size() - stops_.pending(s.stop_state);
  while (cut > 0 && cut < s.held.size() && (static_cast<unsigned char>(s.held[cut]) & 0xC0) == 0x80)
    --cut;
  ev.text += s.held.substr(0, cut);
  s.held.erase(0, cut);
  s.scanned = s.held.size();
  return false;
}

void OutputStream::finish(Sample& s, OutputEvent& ev, FinishReason reason, const TokenEvent& src) {
  s.done = true;
  ev.finish = reason;
  if (++num_done_ < spec_.n || !metrics_) return;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const Timings& t = src.timings;
  const Clock::time_point none{};
  const Clock::time_point end = t.finish == none ? Clock::now() : t.finish;
  RequestObservation r;
  r.e2e_s = seconds(t.arrival, end);
  if (t.first_token != none) {
    r.ttft_s = seconds(t.arrival, t.first_token);
    r.decode_s = seconds(t.first_token, end);
  }
  if (t.scheduled != none) {
    r.queue_s = seconds(t.arrival, t.scheduled);
    r.inference_s = seconds(t.scheduled, end);
    if (t.first_token != none) r.prefill_s = seconds(t.scheduled, t.first_token);
  }
  r.prompt_tokens = src.usage.prompt_tokens;
  r.generation_tokens = src.usage.completion_tokens;
  for (const Sample& x : samples_)
    r.max_sample_tokens = std::max(r.max_sample_tokens, x.num_tokens);
  r.n = spec_.n;
  r.max_tokens = spec_.max_tokens;
  r.reason = reason;
  metrics_->observe_request(r);
}

Verdict OutputStream::handle(const TokenEvent& ev) {
  if (ev.sample_index < 0 || ev.sample_index >= spec_.n) return Verdict::kContinue;
  Sample& s = samples_[static_cast<size_t>(ev.sample_index)];
  if (s.done) return Verdict::kStop;  // the engine's notice after our own kStop
  OutputEvent out;
  out.choice = spec_.first_choice + ev.sample_index;

  if (ev.finish == FinishReason::kAbort) {
    // An abort before the first token ends only the parent sample in the engine; end them all.
    for (size_t i = 0; i < samples_.size(); ++i) {
      if (samples_[i].done) continue;
      OutputEvent a;
      a.choice = spec_.first_choice + static_cast<int>(i);
      if (ev.error) a.error = *ev.error;  // the engine step failed: a 500 / an error event
      finish(samples_[i], a, FinishReason::kAbort, ev);
      channel_->push(std::move(a));
    }
    return Verdict::kStop;
  }

  FinishReason reason = ev.finish;
  bool stop_now = false;
  if (ev.token_id >= 0) {
    int32_t id = ev.token_id;
    if (spec_.script) {
      const std::vector<int32_t>& script = *spec_.script;
      id = s.num_tokens < static_cast<int64_t>(script.size()) ? script[s.num_tokens] : id;
      stop_now = s.num_tokens + 1 >= static_cast<int64_t>(script.size());
    } else {
      if (ev.logprobs) out.logprobs.push_back(*ev.logprobs);
      if (ev.prompt_logprobs) out.prompt_logprobs = *ev.prompt_logprobs;
    }
    const Clock::time_point now = Clock::now();
    out.at = now;
    if (s.num_tokens > 0 && metrics_)
      metrics_->observe_inter_token(std::chrono::duration<double>(now - s.last_token).count());
    s.last_token = now;
    ++s.num_tokens;
    out.token_ids.push_back(id);
    // A token that ended the sample as a stop id (EOS, stop_token_ids) contributes no text
    // unless include_stop_str_in_output (vLLM); one of the request's ids is the stop_reason.
    const bool stop_token = !spec_.script && ev.finish == FinishReason::kStop;
    if (!stop_token || spec_.include_stop_str_in_output) s.held += token_text(s, id);
    if (stop_token && std::find(spec_.stop_token_ids.begin(), spec_.stop_token_ids.end(), id) !=
                          spec_.stop_token_ids.end())
      out.stop_token = id;
  }
  if (release(s, out)) {
    reason = FinishReason::kStop;
    stop_now = true;
  } else if (reason != FinishReason::kNone || stop_now) {
    if (s.detok) s.held += s.detok->flush();
    if (release(s, out)) {
      reason = FinishReason::kStop;
    } else {
      out.text += s.held;
      s.held.clear();
      s.scanned = 0;
    }
    if (reason == FinishReason::kNone) reason = FinishReason::kStop;
  }
  if (reason != FinishReason::kNone) finish(s, out, reason, ev);
  channel_->push(std::move(out));
  return stop_now ? Verdict::kStop : Verdict::kContinue;
}

}  // namespace mls::server
