#include "chat/tool_parser.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace mls::chat {
namespace {

const nlohmann::ordered_json kTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "precise": {"type": "boolean"}, "opts": {"type": "object"},
                   "ratio": {"type": ["number", "null"]}, "tags": {"type": "array"}}}}}])");

std::string test_id(int index) {
  return "call_" + std::to_string(index);
}

struct Case {
  std::string format;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

std::vector<Case> cases() {
  return {
      // GLM-4.7 / GLM-5
      {"glm47", "Hello there", "Hello there", {}},
      {"glm47",
       "Let me "
       "check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</"
       "arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
       "Let me check.",
       {{"get_weather", R"({"city": "Paris", "days": 3})"}}},
      {"glm47",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>São \"Paulo\" "
       "🌧</arg_value>\n<arg_key>precise</arg_key>\n<arg_value>true</arg_value>\n</"
       "tool_call>\n<tool_call>get_weather\n<arg_key>opts</"
       "arg_key>\n<arg_value>{\"a\":[1,2],\"b\":\"x\\\"y\"}</arg_value>\n</tool_call>",
       "",
       {{"get_weather", R"({"city": "São \"Paulo\" 🌧", "precise": true})"},
        {"get_weather", R"({"opts": {"a": [1, 2], "b": "x\"y"}})"}}},
      {"glm47",
       "<tool_call>get_weather<arg_key>days</arg_key><arg_value>soon</arg_value><arg_key>ratio</"
       "arg_key><arg_value>0.5</arg_value><arg_key>extra</arg_key><arg_value>42</arg_value></"
       "tool_call>",
       "",
       {{"get_weather", R"({"days": "soon", "ratio": 0.5, "extra": "42"})"}}},
      {"glm47", "<tool_call>unknown_tool</tool_call>after", "after", {{"unknown_tool", "{}"}}},
      {"glm47",
       "text <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris",
       "text <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris",
       {}},
      {"glm47",
       "a<tool_call>get_weather<arg_key>city<arg_value>x</arg_value></tool_call>b",
       "a<tool_call>get_weather<arg_key>city<arg_value>x</arg_value></tool_call>b",
       {}},
      {"glm47",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value></tool_call>\n\nDone.",
       "\n\nDone.",
       {{"get_weather", R"({"city": "A"})"}}},
      {"glm47", "ends with <tool_ca", "ends with <tool_ca", {}},
      {"glm47", "x < y and <tool> is not a call", "x < y and <tool> is not a call", {}},
      // DeepSeek-V3.1
      {"deepseek_v31",
       "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
       "\"Zürich\", \"q\": "
       "\"a\\\"b\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":"
       "\"Bern\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "Sure.",
       {{"get_weather", R"({"city": "Zürich", "q": "a\"b"})"},
        {"get_weather", R"({"city":"Bern"})"}}},
      {"deepseek_v31",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": 1}<｜tool▁call▁end｜>",
       "",
       {{"f", R"({"a": 1})"}}},
      {"deepseek_v31",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{not "
       "json}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{not "
       "json}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {}},
      {"deepseek_v31",
       "hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\":",
       "hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\":",
       {}},
      {"deepseek_v31", "<｜tool▁calls▁begin｜>garbage", "<｜tool▁calls▁begin｜>garbage", {}},
      // DeepSeek-V3.2 (DSML)
      {"deepseek_v32",
       "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke "
       "name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">杭州 "
       "\"west\"</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" "
       "string=\"false\">2</｜DSML｜parameter>\n<｜DSML｜parameter name=\"opts\" "
       "string=\"false\">{\"x\": [true, "
       "null]}</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke "
       "name=\"noop\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
       "Checking.\n\n",
       {{"get_weather", R"({"city": "杭州 \"west\"", "days": 2, "opts": {"x": [true, null]}})"},
        {"noop", "{}"}}},
      {"deepseek_v32",
       "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\" "
       "string=\"false\">not json</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
       "",
       {{"f", R"({"k": "not json"})"}}},
      {"deepseek_v32",
       "<｜DSML｜function_calls><｜DSML｜invoke "
       "nam=\"f\"></｜DSML｜invoke></｜DSML｜function_calls>",
       "<｜DSML｜function_calls><｜DSML｜invoke "
       "nam=\"f\"></｜DSML｜invoke></｜DSML｜function_calls>",
       {}},
      {"deepseek_v32",
       "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\" "
       "string=\"true\">v",
       "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\" "
       "string=\"true\">v",
       {}},
  };
}

void expect_result(const ToolParseResult& r, const Case& c, const std::string& how) {
  SCOPED_TRACE(how + ": " + c.text);
  EXPECT_EQ(r.content, c.content);
  ASSERT_EQ(r.tool_calls.size(), c.calls.size());
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(r.tool_calls[i].id, test_id(static_cast<int>(i)));
    EXPECT_EQ(r.tool_calls[i].name, c.calls[i].first);
    EXPECT_EQ(r.tool_calls[i].arguments, c.calls[i].second);
    EXPECT_TRUE(nlohmann::json::accept(r.tool_calls[i].arguments));
  }
}

ToolParseResult stream(const Case& c, const std::vector<std::string>& chunks) {
  ToolParser p(tool_call_format(c.format, kTools), test_id);
  std::vector<ToolEvent> events;
  for (const auto& chunk : chunks)
    for (auto& e : p.feed(chunk)) events.push_back(std::move(e));
  for (auto& e : p.finish()) events.push_back(std::move(e));
  // Each call starts exactly once, before its argument fragments.
  std::vector<int> started;
  for (const auto& e : events) {
    if (e.kind == ToolEvent::kToolCallStart) {
      EXPECT_EQ(e.index, static_cast<int>(started.size()));
      started.push_back(e.index);
    } else if (e.kind == ToolEvent::kArguments) {
      EXPECT_LT(e.index, static_cast<int>(started.size()));
    }
  }
  return collect_events(events);
}

TEST(ToolParser, CompleteParse) {
  for (const auto& c : cases())
    expect_result(ToolParser(tool_call_format(c.format, kTools), test_id).parse(c.text), c,
                  "complete");
}

TEST(ToolParser, StreamingAgreesForEveryTwoChunkSplit) {
  for (const auto& c : cases()) {
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      if (cut < c.text.size() && (static_cast<unsigned char>(c.text[cut]) & 0xC0) == 0x80) continue;
      expect_result(stream(c, {c.text.substr(0, cut), c.text.substr(cut)}), c,
                    "split at " + std::to_string(cut));
    }
  }
}

TEST(ToolParser, StreamingAgreesCharacterByCharacter) {
  for (const auto& c : cases()) {
    std::vector<std::string> chars;
    for (char32_t cp : tok::utf8_to_u32(c.text)) {
      chars.emplace_back();
      tok::append_utf8(chars.back(), cp);
    }
    expect_result(stream(c, chars), c, "per character");
    std::vector<std::string> bytes;
    for (char b : c.text) bytes.emplace_back(1, b);
    expect_result(stream(c, bytes), c, "per byte");
  }
}

TEST(ToolParser, ContentStreamsBeforeTheCallEnds) {
  ToolParser p(glm47_format(kTools), test_id);
  auto events = p.feed("Thinking about it <tool");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "Thinking about it ");  // "<tool" is held back
  events = p.feed("_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>");
  EXPECT_TRUE(events.empty());
  events = p.feed("</tool_call>");
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind, ToolEvent::kToolCallStart);
  EXPECT_EQ(events[0].name, "get_weather");
  std::string args;
  for (size_t i = 1; i < events.size(); ++i) args += events[i].text;
  EXPECT_EQ(args, R"({"city": "Oslo"})");
}

TEST(ToolParser, RandomIdsAndUnknownFormat) {
  const auto r = ToolParser(deepseek_v31_format())
                     .parse(
                         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<"
                         "｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(r.tool_calls[0].id.size(), 29u);
  EXPECT_THROW(tool_call_format("nope", kTools), InvalidArgument);
}

}  // namespace
}  // namespace mls::chat
