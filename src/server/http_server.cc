#include "server/http_server.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/logging.h"
#include "server/chat_completions.h"
#include "server/completions.h"
#include "server/errors.h"
#include "server/info_routes.h"
#include "server/responses.h"
#include "server/sse.h"

namespace mls::server {
namespace {

using json = nlohmann::json;

Reply json_reply(const json& j) {
  Reply r;
  r.body = dump_json(j);
  return r;
}

Reply tokenize(const ServingContext& ctx, const std::string& body) {
  const nlohmann::ordered_json req = parse_json_body(body);
  const auto flag = [&](const char* k, bool def) {
    if (!req.contains(k) || req[k].is_null()) return def;
    if (!req[k].is_boolean()) bad_request(fmt::format("'{}' must be a boolean", k), k);
    return req[k].get<bool>();
  };
  if (req.contains("model") && req["model"].is_string())
    ctx.check_model(req["model"].get<std::string>());
  const tok::Tokenizer& tokenizer =
      ctx.text_tokenizer(req.contains("messages") ? "messages" : "prompt");
  std::string text;
  bool add_special;
  if (req.contains("messages")) {
    const ChatRequest chat = parse_chat_request(req, ctx.opts.defaults);
    text = render_chat_prompt(ctx, chat);
    add_special = flag("add_special_tokens", false);
  } else {
    if (!req.contains("prompt") || !req["prompt"].is_string())
      bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    text = req["prompt"].get<std::string>();
    add_special = flag("add_special_tokens", true);
  }
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.encode(text, add_special);
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), "prompt");
  }
  json out = {{"count", ids.size()}, {"max_model_len", ctx.max_model_len()}, {"tokens", ids}};
  if (flag("return_token_strs", false)) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(tokenizer.id_to_token(id));
    out["token_strs"] = std::move(strs);
  } else {
    out["token_strs"] = nullptr;
  }
  return json_reply(out);
}

Reply detokenize(const ServingContext& ctx, const std::string& body) {
  const nlohmann::ordered_json req = parse_json_body(body);
  if (req.contains("model") && req["model"].is_string())
    ctx.check_model(req["model"].get<std::string>());
  const tok::Tokenizer& tokenizer = ctx.text_tokenizer("tokens");
  if (!req.contains("tokens") || !req["tokens"].is_array())
    bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : req["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= tokenizer.vocab_size())
      bad_request(fmt::format("'tokens' must hold ids in [0, {})", tokenizer.vocab_size()),
                  "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  try {
    return json_reply({{"prompt", tokenizer.decode(ids, false)}});
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), "tokens");
  }
}

Reply health(ServingContext& ctx, const std::string&) {
  if (!ctx.loop.alive()) throw ApiError(503, "the engine stopped: " + ctx.loop.failure());
  return Reply{};
}

Reply metrics(ServingContext& ctx, const std::string&) {
  Reply r;
  r.body = ctx.metrics.render(ctx.loop.stats());
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

struct Route {
  const char* method;
  const char* path;
  Reply (*handler)(ServingContext&, const std::string& body);
  bool blocking;  // may block (templates, tokenizing): runs on the transport's worker pool
};
const Route kRoutes[] = {
    {"GET", "/health", health, false},
    {"GET", "/ping", health, false},
    {"POST", "/ping", health, false},
    {"GET", "/version", nullptr, false},
    {"GET", "/metrics", metrics, false},
    {"GET", "/v1/models",
     [](ServingContext& ctx, const std::string&) { return handle_models(ctx); }, false},
    {"POST", "/v1/completions", handle_completions, true},
    {"POST", "/v1/chat/completions", handle_chat_completions, true},
    {"POST", "/v1/responses", handle_responses, true},
    {"POST", "/tokenize",
     [](ServingContext& ctx, const std::string& b) { return tokenize(ctx, b); }, true},
    {"POST", "/detokenize",
     [](ServingContext& ctx, const std::string& b) { return detokenize(ctx, b); }, true},
    {"GET", "/", [](ServingContext& ctx, const std::string&) { return handle_chat_page(ctx); },
     false},
    {"GET", "/load", [](ServingContext& ctx, const std::string&) { return handle_load(ctx); },
     false},
    // A path ending in {id} matches any non-empty rest, which the handler receives.
    {"GET", "/v1/models/{id}",
     [](ServingContext& ctx, const std::string& id) { return handle_model(ctx, id); }, false},
};

constexpr std::string_view kIdParam = "{id}";

// vLLM protects /v1/*; /tokenize and /detokenize render templates and tokenize untrusted input
// too, so a key protects them here as well.
bool needs_key(std::string_view path) {
  return path.starts_with("/v1/") || path == "/v1" || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

const char* version() {
  return MLASERVE_VERSION;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

HttpServer::HttpServer(HttpOptions opts)
    : opts_(std::move(opts)),
      cors_(opts_.cors),
      transport_(opts_.transport, [this](HttpRequest req) { return dispatch(std::move(req)); }) {}

HttpServer::~HttpServer() {
  stop(std::chrono::milliseconds(0));
}

int HttpServer::start() {
  const TransportOptions& t = opts_.transport;
  if (t.uds.empty() && (t.host == "0.0.0.0" || t.host == "::"))
    MLS_LOG_WARN(
        "listening on {}: every network interface; pass --host 127.0.0.1 to keep the "
        "server local{}",
        t.host, opts_.api_keys.empty() ? " (no --api-key is set)" : "");
  return transport_.start();
}

void HttpServer::stop(std::chrono::milliseconds grace) {
  transport_.stop(grace);
}

std::string HttpServer::url(int port) const {
  const TransportOptions& t = opts_.transport;
  if (!t.uds.empty()) return "unix:" + t.uds;
  return fmt::format("{}://{}:{}{}", t.ssl_certfile.empty() ? "http" : "https", t.host, port,
                     opts_.root_path);
}

bool HttpServer::authorized(const HttpRequest& req) const {
  const std::string_view auth = req.header("Authorization");
  const size_t space = auth.find(' ');
  const std::string scheme(auth.substr(0, space));
  const std::string key(space == std::string_view::npos ? "" : auth.substr(space + 1));
  bool ok = false;
  // Every key is compared, whatever matched before: no timing difference between keys.
  for (const std::string& k : opts_.api_keys)
    ok |= constant_time_equal(key, k) && (scheme == "Bearer" || scheme == "bearer");
  return ok;
}

Dispatch HttpServer::dispatch(HttpRequest req) const {
  Dispatch d;
  const std::string_view origin = req.header("Origin");
  const std::string_view preflight_method = req.header("Access-Control-Request-Method");
  if (CorsPolicy::is_preflight(req.method, origin, preflight_method)) {
    CorsPreflight p =
        cors_.preflight(origin, preflight_method, req.header("Access-Control-Request-Headers"));
    d.reply.status = p.status;
    d.reply.body = std::move(p.body);
    d.reply.content_type = "text/plain; charset=utf-8";
    d.headers = std::move(p.headers);
    return d;
  }
  d.headers = cors_.response_headers(origin, !req.header("Cookie").empty());

  std::string path = req.target.substr(0, req.target.find('?'));
  const std::string& root = opts_.root_path;
  if (!root.empty() && path.starts_with(root) &&
      (path.size() == root.size() || path[root.size()] == '/'))
    path = path.size() == root.size() ? "/" : path.substr(root.size());

  const Route* route = nullptr;
  bool path_known = false;
  for (const Route& r : kRoutes) {
    const std::string_view rp = r.path;
    if (rp.ends_with(kIdParam)) {
      const std::string_view prefix = rp.substr(0, rp.size() - kIdParam.size());
      if (!path.starts_with(prefix) || path.size() == prefix.size()) continue;
      if (req.method == r.method) req.body = path.substr(prefix.size());
    } else if (path != rp) {
      continue;
    }
    path_known = true;
    if (req.method == r.method) route = &r;
  }
  if (!route) {
    d.reply = path_known
                  ? error_reply(405, fmt::format("{} is not allowed on {}", req.method, path))
                  : error_reply(404, fmt::format("no route for {} {}", req.method, path));
    return d;
  }
  if (!opts_.api_keys.empty() && needs_key(path) && !authorized(req)) {
    d.reply = error_reply(401, "Unauthorized: a valid API key is required (Authorization: Bearer)");
    return d;
  }
  if (!route->handler) {
    d.reply.body = dump_json({{"version", version()}});
    return d;
  }
  ServingContext* ctx = ctx_.load();
  if (!ctx) {
    d.reply = error_reply(503, "the model is still loading");
    return d;
  }
  if (route->blocking) {
    d.work = [ctx, fn = route->handler, body = std::move(req.body)] { return fn(*ctx, body); };
    return d;
  }
  try {
    d.reply = route->handler(*ctx, req.body);
  } catch (...) {
    d.reply = current_exception_reply();
  }
  return d;
}

void HttpServer::log_routes() const {
  for (const Route& r : kRoutes) MLS_LOG_INFO("Route: {}, Methods: {}", r.path, r.method);
}

}  // namespace mls::server
