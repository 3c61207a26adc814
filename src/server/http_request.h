// What the transport hands the routes and what they hand back, free of any HTTP library's types:
// a request (method, target, headers, body, peer) and a dispatch result (a Reply now, or work
// for the worker pool, plus response headers such as CORS).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/cors.h"
#include "server/serving_context.h"

namespace mls::server {

struct HttpRequest {
  std::string method;
  std::string target;  // as received: path and query
  HeaderList headers;
  std::string body;
  std::string peer;  // "address:port", or the socket path for a Unix socket

  // The first header named `name` (case-insensitive), "" when absent.
  std::string_view header(std::string_view name) const;
};

struct Dispatch {
  Reply reply;                  // the answer, unless `work` is set
  std::function<Reply()> work;  // handler work that may block (template rendering, tokenizing)
  HeaderList headers;           // added to whatever response results
};

// An OpenAI-shaped error reply.
Reply error_reply(int status, const std::string& message, const std::string& param = {});
// The reply for the exception being handled (call inside a catch block): ApiError's status,
// 400 for InvalidArgument, else 500.
Reply current_exception_reply();

}  // namespace mls::server
