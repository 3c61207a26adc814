#include "server/cors.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace mls::server {
namespace {

// What "*" means for methods, and the headers a browser may always send (Starlette's sets).
const std::vector<std::string> kAllMethods = {"DELETE", "GET",  "HEAD", "OPTIONS",
                                              "PATCH",  "POST", "PUT"};
const std::vector<std::string> kSafelistedHeaders = {"Accept", "Accept-Language",
                                                     "Content-Language", "Content-Type"};
// How long a browser may cache a preflight answer, in seconds (Starlette's default).
constexpr int kMaxAgeSeconds = 600;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(" \t") - b + 1));
}

bool contains(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string join(const std::vector<std::string>& v) {
  return fmt::format("{}", fmt::join(v, ", "));
}

std::vector<std::string> split_commas(std::string_view value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    if (std::string item = trim(value.substr(start, comma - start)); !item.empty())
      out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> parse_cors_list(const std::string& flag, const std::string& value) {
  if (!trim(value).empty() && trim(value)[0] == '[') {
    std::vector<std::string> out;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(value, nullptr, true, false);
    } catch (const nlohmann::json::exception& e) {
      raise<InvalidArgument>("{}: not a JSON list ({})", flag, e.what());
    }
    if (!j.is_array()) raise<InvalidArgument>("{}: expected a JSON list of strings", flag);
    for (const auto& item : j) {
      if (!item.is_string()) raise<InvalidArgument>("{}: list items must be strings", flag);
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  return split_commas(value);
}

CorsPolicy::CorsPolicy(CorsOptions opts)
    : opts_(std::move(opts)),
      any_origin_(contains(opts_.allowed_origins, "*")),
      any_header_(contains(opts_.allowed_headers, "*")) {
  methods_ = contains(opts_.allowed_methods, "*") ? kAllMethods : opts_.allowed_methods;
  std::set<std::string> headers;
  for (const std::string& h : kSafelistedHeaders) headers.insert(lower(h));
  for (const std::string& h : opts_.allowed_headers) headers.insert(lower(h));
  headers_lower_.assign(headers.begin(), headers.end());
}

bool CorsPolicy::is_preflight(std::string_view method, std::string_view origin,
                              std::string_view request_method) {
  return method == "OPTIONS" && !origin.empty() && !request_method.empty();
}

bool CorsPolicy::origin_allowed(std::string_view origin) const {
  return any_origin_ || contains(opts_.allowed_origins, origin);
}

CorsPreflight CorsPolicy::preflight(std::string_view origin, std::string_view request_method,
                                    std::string_view request_headers) const {
  CorsPreflight out{200, {}, "OK"};
  if (any_origin_ && !opts_.allow_credentials) {
    out.headers.emplace_back("Access-Control-Allow-Origin", "*");
  } else {
    out.headers.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    out.headers.emplace_back("Vary", "Origin");
  }
  out.headers.emplace_back("Access-Control-Allow-Methods", join(methods_));
  out.headers.emplace_back("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
  if (opts_.allow_credentials) out.headers.emplace_back("Access-Control-Allow-Credentials", "true");

  std::vector<std::string> failures;
  if (!origin_allowed(origin)) failures.push_back("origin");
  if (!contains(methods_, request_method)) failures.push_back("method");
  if (any_header_) {
    if (!request_headers.empty())
      out.headers.emplace_back("Access-Control-Allow-Headers", std::string(request_headers));
  } else {
    std::vector<std::string> listed;
    for (const std::string& h : opts_.allowed_headers) listed.push_back(h);
    for (const std::string& h : kSafelistedHeaders)
      if (!contains(listed, h)) listed.push_back(h);
    std::sort(listed.begin(), listed.end());
    out.headers.emplace_back("Access-Control-Allow-Headers", join(listed));
    for (const std::string& h : split_commas(request_headers))
      if (!contains(headers_lower_, lower(h))) {
        failures.push_back("headers");
        break;
      }
  }
  if (!failures.empty()) {
    out.status = 400;
    out.body = "Disallowed CORS " + join(failures);
  }
  return out;
}

HeaderList CorsPolicy::response_headers(std::string_view origin, bool has_cookie) const {
  HeaderList out;
  if (origin.empty()) return out;
  if (opts_.allow_credentials) out.emplace_back("Access-Control-Allow-Credentials", "true");
  // A credentialed request (cookies) must see its own origin, never "*".
  if (any_origin_ && !opts_.allow_credentials && !has_cookie) {
    out.emplace_back("Access-Control-Allow-Origin", "*");
  } else if (origin_allowed(origin)) {
    out.emplace_back("Access-Control-Allow-Origin", std::string(origin));
    out.emplace_back("Vary", "Origin");
  }
  return out;
}

}  // namespace mls::server
