#include "server/http_server.h"

#include <httplib.h>

#include <fmt/format.h>

#include "core/error.h"
#include "core/logging.h"
#include "server/chat_completions.h"
#include "server/completions.h"
#include "server/errors.h"
#include "server/info_routes.h"
#include "server/sse.h"

namespace mls::server {
namespace {

using json = nlohmann::json;

struct Route {
  const char* method;
  const char* path;
};
constexpr Route kRoutes[] = {
    {"GET", "/health"},    {"GET", "/version"},         {"GET", "/metrics"},
    {"GET", "/v1/models"}, {"POST", "/v1/completions"}, {"POST", "/v1/chat/completions"},
    {"POST", "/tokenize"}, {"POST", "/detokenize"},     {"GET", "/"},
    {"GET", "/load"},      {"GET", "/v1/models/{id}"},
};

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& param = {}) {
  res.status = status;
  res.set_content(dump_json(error_body(status, message, param)), "application/json");
}

void send(httplib::Response& res, Reply reply) {
  res.status = reply.status;
  if (!reply.stream) {
    res.set_content(std::move(reply.body), reply.content_type.c_str());
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto stream = std::move(reply.stream);
  res.set_chunked_content_provider(reply.content_type, [stream](size_t, httplib::DataSink& sink) {
    stream([&sink](std::string_view s) { return sink.write(s.data(), s.size()); });
    sink.done();
    return true;
  });
}

Reply json_reply(const json& j) {
  Reply r;
  r.body = dump_json(j);
  return r;
}

Reply models(const ServingContext& ctx) {
  json data = json::array();
  for (const std::string& name : ctx.opts.served_model_names)
    data.push_back({{"id", name},
                    {"object", "model"},
                    {"created", unix_time()},
                    {"owned_by", "mlaserve"},
                    {"root", ctx.opts.model_path},
                    {"parent", nullptr},
                    {"max_model_len", ctx.max_model_len()},
                    {"permission", json::array()}});
  return json_reply({{"object", "list"}, {"data", std::move(data)}});
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
    ids = ctx.tokenizer.encode(text, add_special);
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), "prompt");
  }
  json out = {{"count", ids.size()}, {"max_model_len", ctx.max_model_len()}, {"tokens", ids}};
  if (flag("return_token_strs", false)) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(ctx.tokenizer.id_to_token(id));
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
  if (!req.contains("tokens") || !req["tokens"].is_array())
    bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const auto& t : req["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= ctx.tokenizer.vocab_size())
      bad_request(fmt::format("'tokens' must hold ids in [0, {})", ctx.tokenizer.vocab_size()),
                  "tokens");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  try {
    return json_reply({{"prompt", ctx.tokenizer.decode(ids, false)}});
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), "tokens");
  }
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
    : opts_(std::move(opts)), svr_(std::make_unique<httplib::Server>()) {
  const int threads = opts_.num_threads;
  svr_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  svr_->set_payload_max_length(opts_.max_body_bytes);
  svr_->set_keep_alive_timeout(2);  // bounds how long shutdown waits on idle connections
  svr_->set_tcp_nodelay(true);      // stream chunks are small; Nagle would hold them back
  // One access line per request, as uvicorn prints under vLLM.
  svr_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
    MLS_LOG_INFO("{}:{} - \"{} {} {}\" {}", req.remote_addr, req.remote_port, req.method, req.path,
                 req.version, res.status);
  });
  add_routes();
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::add_routes() {
  // Every request passes here first: authentication for /v1, then readiness.
  svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!opts_.api_key.empty() && req.path.rfind("/v1/", 0) == 0) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      const std::string key = auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : "";
      if (!constant_time_equal(key, opts_.api_key)) {
        send_error(res, 401, "Unauthorized: a valid API key is required (Authorization: Bearer)");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (!ctx_.load() && req.path != "/version") {
      send_error(res, 503, "the model is still loading");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Unknown routes and oversized bodies reach here with an empty body.
  svr_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, 404, fmt::format("no route for {} {}", req.method, req.path));
    else if (res.status == 413)
      send_error(res, 413, "the request body is larger than the server accepts");
    else
      send_error(res, res.status,
                 fmt::format("HTTP {} for {} {}", res.status, req.method, req.path));
  });
  svr_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          send_error(res, 500, e.what());
        } catch (...) {
          send_error(res, 500, "unknown internal error");
        }
      });

  // Runs a handler, mapping its exceptions to OpenAI-shaped errors.
  const auto wrap = [this](auto fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      ServingContext* ctx = ctx_.load();
      try {
        send(res, fn(*ctx, req));
      } catch (const ApiError& e) {
        send_error(res, e.status(), e.what(), e.param());
      } catch (const InvalidArgument& e) {
        send_error(res, 400, e.what());
      } catch (const std::exception& e) {
        MLS_LOG_ERROR("{} {}: {}", req.method, req.path, e.what());
        send_error(res, 500, e.what());
      }
    };
  };
  svr_->Get("/health", wrap([](ServingContext& ctx, const httplib::Request&) {
              if (!ctx.loop.alive())
                throw ApiError(503, "the engine stopped: " + ctx.loop.failure());
              return Reply{};
            }));
  svr_->Get("/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json({{"version", version()}}), "application/json");
  });
  svr_->Get("/metrics", wrap([](ServingContext& ctx, const httplib::Request&) {
              Reply r;
              r.body = ctx.metrics.render(ctx.loop.stats());
              r.content_type = "text/plain; version=0.0.4; charset=utf-8";
              return r;
            }));
  svr_->Get("/v1/models",
            wrap([](ServingContext& ctx, const httplib::Request&) { return models(ctx); }));
  svr_->Post("/v1/completions", wrap([](ServingContext& ctx, const httplib::Request& req) {
               return handle_completions(ctx, req.body);
             }));
  svr_->Post("/v1/chat/completions", wrap([](ServingContext& ctx, const httplib::Request& req) {
               return handle_chat_completions(ctx, req.body);
             }));
  svr_->Post("/tokenize", wrap([](ServingContext& ctx, const httplib::Request& req) {
               return tokenize(ctx, req.body);
             }));
  svr_->Post("/detokenize", wrap([](ServingContext& ctx, const httplib::Request& req) {
               return detokenize(ctx, req.body);
             }));
  svr_->Get("/", wrap([](ServingContext& ctx, const httplib::Request&) {
              return handle_chat_page(ctx);
            }));
  svr_->Get("/load",
            wrap([](ServingContext& ctx, const httplib::Request&) { return handle_load(ctx); }));
  svr_->Get(R"(/v1/models/(.+))", wrap([](ServingContext& ctx, const httplib::Request& req) {
              return handle_model(ctx, req.matches[1]);
            }));
}

int HttpServer::start() {
  const int port = opts_.port == 0 ? svr_->bind_to_any_port(opts_.host)
                                   : (svr_->bind_to_port(opts_.host, opts_.port) ? opts_.port : -1);
  if (port < 0) raise<IoError>("cannot listen on {}:{} (address in use?)", opts_.host, opts_.port);
  thread_ = std::thread([this] { svr_->listen_after_bind(); });
  return port;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  svr_->stop();
  thread_.join();
}

void HttpServer::log_routes() const {
  for (const Route& r : kRoutes) MLS_LOG_INFO("Route: {}, Methods: {}", r.path, r.method);
}

}  // namespace mls::server
