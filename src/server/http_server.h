// The HTTP front: routes, API-key check, body limit, OpenAI-shaped errors, and the hand-off of
// streaming replies to httplib's chunked writer. It listens before the model is loaded so that
// /health can answer 503 while loading; set_context() makes it ready.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "server/serving_context.h"

namespace httplib {
class Server;
}

namespace mls::server {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int port = 8000;      // 0: any free port
  std::string api_key;  // "" : no authentication
  size_t max_body_bytes = size_t{32} << 20;
  int num_threads = 256;  // concurrent connections (streams hold one each)
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (IoError when the address is taken) and serves on a background thread; returns the
  // bound port.
  int start();
  // From now on requests are served with `ctx` (which must outlive stop()).
  void set_context(ServingContext* ctx) { ctx_.store(ctx); }
  // Stops accepting and waits for the requests in flight to finish.
  void stop();

  void log_routes() const;

 private:
  void add_routes();

  HttpOptions opts_;
  std::unique_ptr<httplib::Server> svr_;
  std::atomic<ServingContext*> ctx_{nullptr};
  std::thread thread_;
};

// The mlaserve version (/version and the start-up line).
const char* version();

// API keys compared without an early exit, so timing does not reveal a matching prefix.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace mls::server
