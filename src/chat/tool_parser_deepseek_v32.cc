// DeepSeek-V3.2 "DSML" tool calls:
//   <｜DSML｜function_calls>
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜function_calls>
// string="true" keeps the value as text; string="false" parses it as JSON.
#include <nlohmann/json.hpp>

#include "chat/tool_parser.h"
#include "core/json.h"

namespace mls::chat {
namespace {

constexpr std::string_view kParamBegin = "<｜DSML｜parameter";
constexpr std::string_view kParamEnd = "</｜DSML｜parameter>";

// Reads `attr="value"` at the front of `s` (after white space); advances `s`.
std::optional<std::string> attribute(std::string_view& s, std::string_view attr) {
  s = trim_space(s);
  if (s.substr(0, attr.size()) != attr || s.substr(attr.size(), 2) != "=\"") return std::nullopt;
  s.remove_prefix(attr.size() + 2);
  const size_t close = s.find('"');
  if (close == std::string_view::npos) return std::nullopt;
  std::string value(s.substr(0, close));
  s.remove_prefix(close + 1);
  return value;
}

bool consume(std::string_view& s, std::string_view token) {
  s = trim_space(s);
  if (s.substr(0, token.size()) != token) return false;
  s.remove_prefix(token.size());
  return true;
}

}  // namespace

ToolCallFormat deepseek_v32_format() {
  ToolCallFormat f;
  f.section_begin = "<｜DSML｜function_calls>";
  f.section_end = "</｜DSML｜function_calls>";
  f.call_begin = "<｜DSML｜invoke";
  f.call_end = "</｜DSML｜invoke>";
  f.parse_call = [](std::string_view body) -> std::optional<ParsedCall> {
    const auto name = attribute(body, "name");
    if (!name || name->empty() || !consume(body, ">")) return std::nullopt;
    std::vector<std::pair<std::string, std::string>> members;
    while (!trim_space(body).empty()) {
      if (!consume(body, kParamBegin)) return std::nullopt;
      const auto key = attribute(body, "name");
      if (!key) return std::nullopt;
      const auto is_string = attribute(body, "string");
      if (!consume(body, ">")) return std::nullopt;
      const size_t end = body.find(kParamEnd);
      if (end == std::string_view::npos) return std::nullopt;
      const std::string raw(body.substr(0, end));
      body.remove_prefix(end + kParamEnd.size());
      std::string value = python_json(raw);
      if (is_string && *is_string == "false") {
        if (const auto parsed = try_parse_json(trim_space(raw))) value = python_json(*parsed);
      }
      members.emplace_back(*key, std::move(value));
    }
    return ParsedCall{*name, object_fragments(members)};
  };
  return f;
}

}  // namespace mls::chat
