// The HTTP front: routes, API keys, CORS, root path, readiness, OpenAI-shaped errors, over the
// asynchronous transport (http_transport.h). It listens before the model is loaded so that
// /health can answer 503 while loading; set_context() makes it ready.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/cors.h"
#include "server/http_request.h"
#include "server/http_transport.h"
#include "server/serving_context.h"

namespace mls::server {

struct HttpOptions {
  TransportOptions transport;
  // Bearer keys accepted on /v1/*, /tokenize and /detokenize; empty: no authentication.
  std::vector<std::string> api_keys;
  CorsOptions cors;
  // A prefix a proxy may leave in front of every route (--root-path): stripped when present.
  std::string root_path;
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (IoError when the address is taken) and serves; returns the bound TCP port (0 on a
  // Unix socket).
  int start();
  // From now on requests are served with `ctx` (which must outlive stop()).
  void set_context(ServingContext* ctx) { ctx_.store(ctx); }
  // Stops accepting; requests in flight may finish within `grace`, then are aborted.
  void stop(std::chrono::milliseconds grace);

  void log_routes() const;
  // Where it listens, for log lines: "http://host:port", "https://...", "unix:PATH".
  std::string url(int port) const;

  // The routing of one request (transport-free; the transport calls it on an io thread).
  Dispatch dispatch(HttpRequest req) const;

 private:
  bool authorized(const HttpRequest& req) const;

  HttpOptions opts_;
  CorsPolicy cors_;
  std::atomic<ServingContext*> ctx_{nullptr};
  HttpTransport transport_;
};

// The mlaserve version (/version and the start-up line).
const char* version();

// API keys compared without an early exit, so timing does not reveal a matching prefix.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace mls::server
