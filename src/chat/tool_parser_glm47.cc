// GLM-4.5 / GLM-4.7 / GLM-5 tool calls:
//   <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
// (GLM-4.5 puts newlines between the parts). Values are bare text; the tool's JSON schema says
// whether a value is a string or JSON (integer, number, boolean, object, array).
#include <nlohmann/json.hpp>

#include "chat/tool_parser.h"
#include "core/json.h"

namespace mls::chat {
namespace {

constexpr std::string_view kKeyBegin = "<arg_key>", kKeyEnd = "</arg_key>";
constexpr std::string_view kValueBegin = "<arg_value>", kValueEnd = "</arg_value>";

// The JSON-schema type of `param` of tool `name`, or "" when unknown.
std::string param_type(const nlohmann::ordered_json& tools, std::string_view name,
                       const std::string& param) {
  if (!tools.is_array()) return "";
  for (const auto& t : tools) {
    const auto fn = t.contains("function") ? t["function"] : t;
    if (!fn.is_object() || !fn.contains("name") || fn["name"] != std::string(name)) continue;
    const auto props = fn.contains("parameters") && fn["parameters"].is_object()
                           ? fn["parameters"].value("properties", nlohmann::ordered_json())
                           : nlohmann::ordered_json();
    if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return "";
    const auto& type = props[param].value("type", nlohmann::ordered_json());
    if (type.is_string()) return type.get<std::string>();
    if (type.is_array())  // ["integer", "null"]: the first non-null type decides
      for (const auto& t2 : type)
        if (t2.is_string() && t2 != "null") return t2.get<std::string>();
    return "";
  }
  return "";
}

// JSON text of one argument value.
std::string typed_value(const std::string& raw, const std::string& type) {
  if (type == "integer" || type == "number" || type == "boolean" || type == "object" ||
      type == "array") {
    if (const auto parsed = try_parse_json(trim_space(raw))) return python_json(*parsed);
  }
  return python_json(raw);
}

}  // namespace

ToolCallFormat glm47_format(const nlohmann::ordered_json& tools) {
  ToolCallFormat f;
  f.call_begin = "<tool_call>";
  f.call_end = "</tool_call>";
  f.parse_call = [tools](std::string_view body) -> std::optional<ParsedCall> {
    const size_t first_key = body.find(kKeyBegin);
    const std::string_view name = trim_space(body.substr(0, first_key));
    if (name.empty() || name.find_first_of("<>\n") != std::string_view::npos) return std::nullopt;
    std::vector<std::pair<std::string, std::string>> members;
    std::string_view rest = first_key == std::string_view::npos ? "" : body.substr(first_key);
    while (!(rest = trim_space(rest)).empty()) {
      if (rest.substr(0, kKeyBegin.size()) != kKeyBegin) return std::nullopt;
      const size_t key_end = rest.find(kKeyEnd);
      if (key_end == std::string_view::npos) return std::nullopt;
      const std::string key(trim_space(rest.substr(kKeyBegin.size(), key_end - kKeyBegin.size())));
      rest = trim_space(rest.substr(key_end + kKeyEnd.size()));
      if (rest.substr(0, kValueBegin.size()) != kValueBegin) return std::nullopt;
      const size_t value_end = rest.find(kValueEnd);
      if (value_end == std::string_view::npos) return std::nullopt;
      const std::string value(rest.substr(kValueBegin.size(), value_end - kValueBegin.size()));
      rest = rest.substr(value_end + kValueEnd.size());
      members.emplace_back(key, typed_value(value, param_type(tools, name, key)));
    }
    return ParsedCall{std::string(name), object_fragments(members)};
  };
  return f;
}

}  // namespace mls::chat
