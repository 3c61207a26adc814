// Cross-origin resource sharing as vLLM does it (Starlette's CORSMiddleware behind
// --allowed-origins/--allowed-methods/--allowed-headers/--allow-credentials): preflight answers
// and the headers an ordinary response carries. Transport-free: headers in, headers out.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mls::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct CorsOptions {
  std::vector<std::string> allowed_origins{"*"};
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
};

// A list flag's value as vLLM takes it: a JSON list ('["https://a.example", "https://b"]'), or
// else a comma-separated list. InvalidArgument naming `flag` on a malformed JSON list.
std::vector<std::string> parse_cors_list(const std::string& flag, const std::string& value);

struct CorsPreflight {
  int status;  // 200, or 400 when the origin, method or headers are not allowed
  HeaderList headers;
  std::string body;  // text/plain
};

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions opts);

  // A preflight is OPTIONS with Origin and Access-Control-Request-Method; it is answered here and
  // never reaches a route (nor the API-key check, as in vLLM).
  static bool is_preflight(std::string_view method, std::string_view origin,
                           std::string_view request_method);
  CorsPreflight preflight(std::string_view origin, std::string_view request_method,
                          std::string_view request_headers) const;
  // Headers for the response to an ordinary request carrying `origin` ("" when it has none).
  HeaderList response_headers(std::string_view origin, bool has_cookie) const;

 private:
  bool origin_allowed(std::string_view origin) const;

  CorsOptions opts_;
  bool any_origin_;
  bool any_header_;
  std::vector<std::string> methods_;        // "*" expanded
  std::vector<std::string> headers_lower_;  // allowed request headers, lower case
};

}  // namespace mls::server
