#include "server/info_routes.h"

#include "server/errors.h"
#include "server/sse.h"
#include "server/ui/chat_html.h"

namespace mls::server {

using json = nlohmann::json;

Reply handle_load(const ServingContext& ctx) {
  const EngineStats s = ctx.loop.stats();
  Reply r;
  r.body = dump_json({{"server_load", s.num_running + s.num_waiting},
                      {"num_requests_running", s.num_running},
                      {"num_requests_waiting", s.num_waiting},
                      {"kv_cache_usage_perc", s.kv_usage}});
  return r;
}

namespace {

// OpenAI's model object, as vLLM fills it.
json model_card(const ServingContext& ctx, const std::string& id) {
  return {{"id", id},
          {"object", "model"},
          {"created", unix_time()},
          {"owned_by", "mlaserve"},
          {"root", ctx.opts.model_path},
          {"parent", nullptr},
          {"max_model_len", ctx.max_model_len()},
          {"permission", json::array()}};
}

}  // namespace

Reply handle_models(const ServingContext& ctx) {
  json data = json::array();
  for (const std::string& name : ctx.opts.served_model_names) data.push_back(model_card(ctx, name));
  Reply r;
  r.body = dump_json({{"object", "list"}, {"data", std::move(data)}});
  return r;
}

Reply handle_model(const ServingContext& ctx, const std::string& id) {
  ctx.check_model(id);
  if (id.empty()) throw ApiError(404, "The model `` does not exist.", "model");
  json card = model_card(ctx, id);
  card["config"] = json(ctx.opts.server_info);
  Reply r;
  r.body = dump_json(card);
  return r;
}

Reply handle_chat_page(const ServingContext& ctx) {
  if (!ctx.opts.enable_ui) throw ApiError(404, "the chat page is turned off (--disable-ui)");
  Reply r;
  r.body = kChatPageHtml;
  r.content_type = "text/html; charset=utf-8";
  return r;
}

}  // namespace mls::server
