// DeepSeek-V3.1 tool calls:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{"json":
//   "args"}<｜tool▁call▁end｜>
//   ...<｜tool▁calls▁end｜>
// The model writes the arguments as JSON itself; they are checked and passed through verbatim.
#include <cctype>
#include <nlohmann/json.hpp>

#include "chat/tool_parser.h"
#include "core/json.h"

namespace mls::chat {

ToolCallFormat deepseek_v31_format() {
  ToolCallFormat f;
  f.section_begin = "<｜tool▁calls▁begin｜>";
  f.section_end = "<｜tool▁calls▁end｜>";
  f.call_begin = "<｜tool▁call▁begin｜>";
  f.call_end = "<｜tool▁call▁end｜>";
  f.parse_call = [](std::string_view body) -> std::optional<ParsedCall> {
    static constexpr std::string_view kSep = "<｜tool▁sep｜>";
    const size_t sep = body.find(kSep);
    if (sep == std::string_view::npos) return std::nullopt;
    const auto trim = [](std::string_view s) {
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
      while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
      return s;
    };
    const std::string_view name = trim(body.substr(0, sep));
    const std::string_view args = trim(body.substr(sep + kSep.size()));
    if (name.empty()) return std::nullopt;
    const auto parsed = try_parse_json<nlohmann::json>(args);
    if (!parsed || !parsed->is_object()) return std::nullopt;
    return ParsedCall{std::string(name), {std::string(args)}};
  };
  return f;
}

}  // namespace mls::chat
