// The tool-call parsers (every format) and the reasoning parser on arbitrary model output, fed
// whole and as a stream cut at fuzzed points. Both ways must agree (the parsers promise it: the
// server streams with one and answers non-streaming requests with the other).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_parser.h"

namespace {

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "precise": {"type": "boolean"},
      "opts": {"type": "object"}, "ratio": {"type": ["number", "null"]}}}}}])");
  return t;
}

// Splits `text` at the cut points encoded in `cuts` (one byte each: the next piece's length).
std::vector<std::string_view> pieces(std::string_view text, std::string_view cuts) {
  std::vector<std::string_view> out;
  size_t i = 0;
  for (const char c : cuts) {
    if (i >= text.size()) break;
    const size_t n = std::min<size_t>(static_cast<unsigned char>(c) % 16 + 1, text.size() - i);
    out.push_back(text.substr(i, n));
    i += n;
  }
  if (i < text.size()) out.push_back(text.substr(i));
  return out;
}

bool same(const mls::chat::ToolParseResult& a, const mls::chat::ToolParseResult& b) {
  if (a.content != b.content || a.tool_calls.size() != b.tool_calls.size()) return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i)
    if (a.tool_calls[i].name != b.tool_calls[i].name ||
        a.tool_calls[i].arguments != b.tool_calls[i].arguments)
      return false;
  return true;
}

}  // namespace

// Input: one byte choosing the parser, one byte N, N bytes of cut points, then the text.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto mode = static_cast<unsigned char>(in[0]);
  const size_t ncuts = std::min<size_t>(static_cast<unsigned char>(in[1]), size - 2);
  const std::string_view cuts = in.substr(2, ncuts), text = in.substr(2 + ncuts);
  const std::vector<std::string_view> parts = pieces(text, cuts);

  const std::vector<std::string> names = mls::chat::tool_parser_names();
  const std::string& name = names[mode % names.size()];
  const auto ids = [](int index) { return "call_" + std::to_string(index); };
  mls::chat::ToolParser whole(mls::chat::tool_call_format(name, tools()), ids);
  mls::chat::ToolParser stream(mls::chat::tool_call_format(name, tools()), ids);
  std::vector<mls::chat::ToolEvent> events;
  for (std::string_view p : parts)
    for (auto& e : stream.feed(p)) events.push_back(std::move(e));
  for (auto& e : stream.finish()) events.push_back(std::move(e));
  if (!same(whole.parse(text), mls::chat::collect_events(events))) __builtin_trap();

  const bool in_reasoning = (mode / names.size()) & 1;
  mls::chat::ReasoningParser rp(in_reasoning);
  mls::chat::ReasoningDelta streamed;
  for (std::string_view p : parts) {
    const auto d = rp.feed(p);
    streamed.reasoning += d.reasoning;
    streamed.content += d.content;
  }
  const auto d = rp.finish();
  streamed.reasoning += d.reasoning;
  streamed.content += d.content;
  const auto full = mls::chat::ReasoningParser(in_reasoning).parse(text);
  if (full.reasoning != streamed.reasoning || full.content != streamed.content) __builtin_trap();
  return 0;
}
