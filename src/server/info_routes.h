// Read-only routes: GET /load (vLLM's server load), GET /v1/models (the served names' model
// cards), GET /v1/models/{id} (one card, with the effective configuration) and GET / (the
// built-in chat page).
#pragma once

#include <string>

#include "server/serving_context.h"

namespace mls::server {

Reply handle_load(const ServingContext& ctx);
Reply handle_models(const ServingContext& ctx);
// 404 naming the model when `id` is not a served name.
Reply handle_model(const ServingContext& ctx, const std::string& id);
// The chat page (src/server/ui/chat.html, embedded at build time); 404 under --disable-ui.
Reply handle_chat_page(const ServingContext& ctx);

}  // namespace mls::server
