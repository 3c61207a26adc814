// Turns a running request into a Reply. DriverSource is what every API's source shares (the
// transport pulls it, see ReplySource; dropping it aborts what still runs); DriverReplySource
// serves any responder that shapes events into an OpenAI completion (chat or text): one answer
// once every choice has finished, or SSE chunks as events arrive, an optional usage chunk and
// [DONE], an error after the headers travelling as a data chunk with an `error` object, as
// OpenAI streams report them.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/errors.h"
#include "server/request_driver.h"
#include "server/serving_context.h"
#include "server/sse.h"

namespace mls::server {

// What every source fed by a RequestDriver shares: polling it, the end of the body, and an error
// after the headers (a stream ends with its format's error event; a whole answer throws, for the
// transport's error reply).
class DriverSource : public ReplySource {
 public:
  void set_notify(std::function<void()> notify) final { driver_->set_notify(std::move(notify)); }

  bool pull(std::string& out) final {
    if (done_) return true;
    try {
      return done_ = produce(out);
    } catch (const std::exception& e) {
      if (!stream_) throw;
      out += abort(e.what());
      return true;
    }
  }

  std::string abort(const std::string& reason) final {
    driver_->abort();
    if (done_) return {};
    done_ = true;
    if (!stream_) return {};
    return stream_error(reason);
  }

 protected:
  DriverSource(std::shared_ptr<RequestDriver> driver, bool stream)
      : driver_(std::move(driver)), stream_(stream) {}

  // Appends what is ready to `out`; true once the body is complete.
  virtual bool produce(std::string& out) = 0;
  // The bytes that end a stream with an error naming `reason`.
  virtual std::string stream_error(const std::string& reason) = 0;

  // The request's new events into events(); false once it has finished.
  bool poll() {
    events_.clear();
    return driver_->poll(events_);
  }
  const std::vector<OutputEvent>& events() const { return events_; }

  const std::shared_ptr<RequestDriver> driver_;
  const bool stream_;

 private:
  bool done_ = false;
  std::vector<OutputEvent> events_;
};

template <class Responder>
class DriverReplySource final : public DriverSource {
 public:
  DriverReplySource(std::shared_ptr<RequestDriver> driver, std::shared_ptr<Responder> responder,
                    bool stream)
      : DriverSource(std::move(driver), stream), responder_(std::move(responder)) {}

 private:
  bool produce(std::string& out) override {
    const bool more = poll();
    if (!stream_) {
      responder_->absorb(events());
      if (more) return false;
      nlohmann::json body = responder_->response(driver_->prompt_tokens());
      if (nlohmann::json t = driver_->timings(); !t.is_null()) body["timings"] = std::move(t);
      out += dump_json(body);
      return true;
    }
    for (const nlohmann::json& chunk :
         responder_->stream_chunks(events(), driver_->prompt_tokens()))
      out += sse_event(chunk);
    if (more) return false;
    if (auto usage = responder_->usage_chunk(driver_->prompt_tokens())) {
      if (nlohmann::json t = driver_->timings(); !t.is_null()) (*usage)["timings"] = std::move(t);
      out += sse_event(*usage);
    }
    out += sse_done();
    return true;
  }

  std::string stream_error(const std::string& reason) override {
    return sse_event({{"error", error_body(500, reason)["error"]}}) + sse_done();
  }

  std::shared_ptr<Responder> responder_;
};

template <class Responder>
Reply reply_from_driver(std::shared_ptr<RequestDriver> driver, std::shared_ptr<Responder> responder,
                        bool stream) {
  Reply reply;
  if (stream) reply.content_type = "text/event-stream";
  reply.streaming = stream;
  reply.source = std::make_shared<DriverReplySource<Responder>>(std::move(driver),
                                                                std::move(responder), stream);
  return reply;
}

}  // namespace mls::server
