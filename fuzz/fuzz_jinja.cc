// The Jinja compiler and renderer on arbitrary template source (templates ship in model
// repositories). Every input compiles and renders, or fails with a TemplateSyntaxError or
// TemplateRuntimeError; the step budget is smaller than the server's so that runaway loops end
// quickly here.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/jinja_template.h"
#include "chat/template_error.h"

namespace {

using mls::chat::jinja::Value;

std::vector<std::pair<std::string, Value>> variables() {
  const auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "reasoning_content": "Call the tool.",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"},
    {"role": "user", "content": [1, 2.5, true, {"k": [null]}]}])");
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "description": "Weather by city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}])");
  return {{"messages", Value::from_json(messages)},
          {"tools", Value::from_json(tools)},
          {"add_generation_prompt", Value(true)},
          {"bos_token", Value("<s>")},
          {"eos_token", Value("</s>")}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto vars = variables();
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  try {
    const mls::chat::jinja::Template t(source);
    t.render(vars, /*max_steps=*/200'000);
  } catch (const mls::chat::TemplateSyntaxError&) {
  } catch (const mls::chat::TemplateRuntimeError&) {
  }
  return 0;
}
