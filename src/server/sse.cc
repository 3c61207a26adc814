#include "server/sse.h"

namespace mls::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& payload) {
  return "data: " + dump_json(payload) + "\n\n";
}

std::string sse_named_event(const std::string& name, const nlohmann::json& payload) {
  return "event: " + name + "\n" + sse_event(payload);
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

}  // namespace mls::server
