// Every limit of the HTTP transport, with its default: the one place they are written. `serve`
// exposes each as a flag (docs/server.md, "Limits"); vLLM's names where vLLM has one.
#pragma once

#include <chrono>
#include <cstddef>

namespace mls::server {

struct HttpLimits {
  // Request line plus headers, in bytes (--h11-max-incomplete-event-size; 431 beyond).
  size_t max_header_bytes = size_t{64} << 10;
  // Header fields per request (--h11-max-header-count, vLLM's default; 431 beyond).
  size_t max_header_count = 256;
  // Request target, in bytes (--max-uri-length; 414 beyond).
  size_t max_uri_bytes = size_t{8} << 10;
  // Decoded request body under any framing, Content-Length or chunked
  // (--max-request-body-bytes; 413 beyond).
  size_t max_body_bytes = size_t{32} << 20;
  // From a connection's accept, or from a kept-alive connection's first byte, to the end of the
  // headers: a slow sender (slowloris) is cut off here (--max-header-seconds).
  std::chrono::seconds header_timeout{10};
  // Reading the body once the headers are in (--max-body-seconds).
  std::chrono::seconds body_timeout{60};
  // An idle kept-alive connection is closed after this (--max-keep-alive-seconds; uvicorn's 5 s,
  // as vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE).
  std::chrono::seconds keep_alive_timeout{5};
  // One write that makes no progress (a client that stopped reading) ends the connection and
  // aborts its request (--max-send-stall-seconds).
  std::chrono::seconds send_timeout{60};
  // Open connections in all, and from one peer address (--max-connections,
  // --max-connections-per-peer): one more is answered 503 and closed.
  size_t max_connections = 4096;
  size_t max_connections_per_peer = 1024;
};

}  // namespace mls::server
