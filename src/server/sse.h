// Server-sent events framing as OpenAI streams use it: one `data: <json>` event per chunk, a
// blank line after each, and a final `data: [DONE]`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mls::server {

std::string sse_event(const nlohmann::json& payload);
std::string sse_done();
// `event: <name>` then the data line: the Responses API's framing (no [DONE] after it).
std::string sse_named_event(const std::string& name, const nlohmann::json& payload);

// JSON text for the wire: invalid UTF-8 (never expected, but model output is untrusted) is
// replaced rather than thrown on.
std::string dump_json(const nlohmann::json& j);

}  // namespace mls::server
