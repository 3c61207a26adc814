// The HTTP/1.1 transport on Boost.Beast/Asio: TCP, TLS (OpenSSL) or a Unix socket. A small fixed
// pool of io threads runs every connection as callbacks on its own strand, so a connection that
// waits (for bytes, for the engine) costs no thread; handler work that may block runs on a
// worker pool; replies are pulled from their ReplySource as the engine produces them. Limits,
// timeouts and connection caps are HttpLimits. Keep-alive and pipelining (answered in order).
// Knows nothing of routes: a Handler turns each HttpRequest into a Dispatch.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/http_limits.h"
#include "server/http_request.h"

namespace mls::server {

struct TransportOptions {
  std::string host = "0.0.0.0";
  int port = 8000;           // 0: any free port
  std::string uds;           // a Unix socket path: replaces host and port
  std::string ssl_certfile;  // both set: TLS
  std::string ssl_keyfile;
  HttpLimits limits;
  int io_threads = 2;      // sockets, parsing, SSE shaping: never blocked
  int worker_threads = 4;  // Dispatch::work
};

class HttpTransport {
 public:
  // Runs on an io thread for every complete request; must not block (put blocking work in
  // Dispatch::work).
  using Handler = std::function<Dispatch(HttpRequest)>;

  HttpTransport(TransportOptions opts, Handler handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds (IoError when the address is taken, ConfigError for TLS files) and serves; returns
  // the TCP port (0 on a Unix socket).
  int start();
  // Stops accepting and closes idle connections; requests in flight run on until `grace` has
  // passed, then are aborted (a stream ends with an error event, a waiting request gets 500)
  // and every connection is closed. Returns once all are gone.
  void stop(std::chrono::milliseconds grace);

  size_t open_connections() const;

  struct Impl;  // the io_context, acceptors and connection registry (http_transport.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mls::server
