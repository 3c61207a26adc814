// A reply body that a running request produces, pulled by the transport without blocking: the
// transport pulls when it can take more (after its previous write went out, which gives a
// stream its backpressure) and whenever the notify callback fires. No thread waits on it.
#pragma once

#include <functional>
#include <string>

namespace mls::server {

class ReplySource {
 public:
  virtual ~ReplySource() = default;
  // `notify` runs (on the engine's thread: it must only schedule work) whenever pull() may
  // have more. Set once, before the first pull.
  virtual void set_notify(std::function<void()> notify) = 0;
  // Appends what is ready to `out`; true once the body is complete. A non-streaming source
  // throws (ApiError) when its request failed.
  virtual bool pull(std::string& out) = 0;
  // Aborts the request (its client has gone, or the server is cutting it off). For a stream,
  // returns the bytes that end it with an error event naming `reason`.
  virtual std::string abort(const std::string& reason) = 0;
};

}  // namespace mls::server
