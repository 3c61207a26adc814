// Turns a running request into a Reply, for any responder that shapes events into an OpenAI
// response (chat or text completions): one answer once every choice has finished, or SSE
// chunks as events arrive, an optional usage chunk and [DONE]. Errors after the headers are out
// travel as a data chunk with an `error` object, as OpenAI streams report them. The transport
// pulls (ReplySource); dropping the source aborts what still runs.
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

template <class Responder>
class DriverReplySource : public ReplySource {
 public:
  DriverReplySource(std::shared_ptr<RequestDriver> driver, std::shared_ptr<Responder> responder,
                    bool stream)
      : driver_(std::move(driver)), responder_(std::move(responder)), stream_(stream) {}

  void set_notify(std::function<void()> notify) override { driver_->set_notify(std::move(notify)); }

  bool pull(std::string& out) override {
    if (done_) return true;
    events_.clear();
    try {
      const bool more = driver_->poll(events_);
      if (!stream_) {
        responder_->absorb(events_);
        if (more) return false;
        nlohmann::json body = responder_->response(driver_->prompt_tokens());
        if (nlohmann::json t = driver_->timings(); !t.is_null()) body["timings"] = std::move(t);
        out += dump_json(body);
        return done_ = true;
      }
      for (const nlohmann::json& chunk :
           responder_->stream_chunks(events_, driver_->prompt_tokens()))
        out += sse_event(chunk);
      if (more) return false;
      if (auto usage = responder_->usage_chunk(driver_->prompt_tokens())) {
        if (nlohmann::json t = driver_->timings(); !t.is_null()) (*usage)["timings"] = std::move(t);
        out += sse_event(*usage);
      }
      out += sse_done();
      return done_ = true;
    } catch (const std::exception& e) {
      if (!stream_) throw;
      out += abort(e.what());
      return true;
    }
  }

  std::string abort(const std::string& reason) override {
    driver_->abort();
    if (done_) return {};
    done_ = true;
    if (!stream_) return {};
    return sse_event({{"error", error_body(500, reason)["error"]}}) + sse_done();
  }

 private:
  std::shared_ptr<RequestDriver> driver_;
  std::shared_ptr<Responder> responder_;
  bool stream_;
  bool done_ = false;
  std::vector<OutputEvent> events_;
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
