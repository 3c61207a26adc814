#include "server/chat_completions.h"

#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "test_data.h"

namespace mls::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const char* kTools = R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

struct ParserCase {
  const char* parser;
  const char* output;  // what the "model" writes
};

const ParserCase kCases[] = {
    {"glm47",
     "Let me check.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris"
     "</arg_value></tool_call>"},
    {"deepseek_v31",
     "Let me "
     "check.</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
     "{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
    {"deepseek_v32",
     "Let me check.</think>Sure.<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
     "<｜DSML｜parameter name=\"city\" "
     "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
     "</｜DSML｜function_calls>"},
};

class ChatCompletionsTest : public ::testing::Test {
 protected:
  const std::string model_dir_ = MLASERVE_SOURCE_DIR "/models/tiny-glm5-chat";
  tok::Tokenizer tok_ = tok::Tokenizer::from_dir(model_dir_);
  chat::ChatTemplate tmpl_ = chat::ChatTemplate::from_dir(model_dir_);

  // The model's output as the engine would report it: one event per token, then EOS.
  std::vector<OutputEvent> scripted(const std::string& text) {
    auto ch = std::make_shared<EventChannel>();
    OutputStream s(
        &tok_,
        {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = {}, .script = nullptr}, ch,
        nullptr);
    const std::string id = "r";
    std::vector<int32_t> ids = tok_.encode(text, false);
    ids.push_back(kTokGlmEndOfText);
    for (size_t i = 0; i < ids.size(); ++i) {
      TokenEvent ev;
      ev.request_id = &id;
      ev.token_id = ids[i];
      ev.finish = i + 1 == ids.size() ? FinishReason::kStop : FinishReason::kNone;
      s.on_token(ev);
    }
    std::vector<OutputEvent> events;
    ch->wait(events, std::chrono::milliseconds(0));
    return events;
  }

  ChatOutputConfig config(const ChatRequest& req, const std::string& parser,
                          const std::string& prompt) {
    return {.id = "chatcmpl-test",
            .model = "m",
            .created = 1,
            .reasoning_parser = "glm45",
            .starts_in_reasoning = prompt.ends_with("<think>"),
            .include_reasoning = req.include_reasoning,
            .tool_parser = parser,
            .tools = req.tools,
            .tool_choice = req.tool_choice,
            .logprobs = false,
            .include_usage = true};
  }

  ChatRequest request() {
    ojson body = ojson::parse(R"({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "And Paris?"}]})");
    body["tools"] = ojson::parse(kTools);
    return parse_chat_request(body, {});
  }
};

TEST_F(ChatCompletionsTest, RequestRendersThroughTheTemplate) {
  const ChatRequest req = request();
  const std::string prompt = chat::render_chat(tmpl_, req.template_request);
  EXPECT_TRUE(prompt.starts_with("[gMASK]<sop><|system|>"));
  // The assistant's JSON-string arguments were parsed into an object for the template.
  EXPECT_NE(prompt.find("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome"),
            std::string::npos);
  EXPECT_NE(prompt.find("<|observation|><tool_response>sunny</tool_response>"), std::string::npos);
  EXPECT_TRUE(prompt.ends_with("<|assistant|><think>"));
}

TEST_F(ChatCompletionsTest, ToolCallsAndReasoningForEveryParser) {
  const ChatRequest req = request();
  const std::string prompt = chat::render_chat(tmpl_, req.template_request);
  for (const ParserCase& c : kCases) {
    SCOPED_TRACE(c.parser);
    const std::vector<OutputEvent> events = scripted(c.output);

    ChatResponder whole(config(req, c.parser, prompt), tok_);
    whole.absorb(events);
    const json r = whole.response(10);
    EXPECT_EQ(r["object"], "chat.completion");
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    const json& msg = choice["message"];
    EXPECT_EQ(msg["reasoning_content"], "Let me check.");
    EXPECT_EQ(msg["reasoning"], "Let me check.");
    EXPECT_EQ(msg["content"], "Sure.");
    ASSERT_EQ(msg["tool_calls"].size(), 1u);
    const json& call = msg["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_"));
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
              json({{"city", "Paris"}}));
    int64_t tokens = 0;
    for (const OutputEvent& ev : events) tokens += static_cast<int64_t>(ev.token_ids.size());
    EXPECT_EQ(r["usage"]["completion_tokens"], tokens);
    EXPECT_EQ(r["usage"]["total_tokens"], 10 + r["usage"]["completion_tokens"].get<int64_t>());

    // Streaming the same events gives the same message, fragment by fragment.
    ChatResponder streamed(config(req, c.parser, prompt), tok_);
    std::vector<json> chunks;
    for (const OutputEvent& ev : events)
      for (json& ch : streamed.stream_chunks({ev}, 10)) chunks.push_back(std::move(ch));
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(chunks[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
    std::string reasoning, content, name, args, call_id;
    int finishes = 0;
    for (const json& ch : chunks) {
      EXPECT_EQ(ch["object"], "chat.completion.chunk");
      EXPECT_EQ(ch["id"], "chatcmpl-test");
      const json& d = ch["choices"][0]["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const json& tc : d["tool_calls"]) {
          EXPECT_EQ(tc["index"], 0);
          if (tc.contains("id")) {
            EXPECT_TRUE(call_id.empty());  // id and name come once
            call_id = tc["id"];
            name = tc["function"]["name"];
          }
          args += tc["function"]["arguments"].get<std::string>();
        }
      }
      if (!ch["choices"][0]["finish_reason"].is_null()) {
        ++finishes;
        EXPECT_EQ(ch["choices"][0]["finish_reason"], "tool_calls");
      }
    }
    EXPECT_EQ(finishes, 1);
    EXPECT_EQ(reasoning, "Let me check.");
    EXPECT_EQ(content, "Sure.");
    EXPECT_EQ(name, "get_weather");
    EXPECT_EQ(json::parse(args), json({{"city", "Paris"}}));
    const auto usage = streamed.usage_chunk(10);
    ASSERT_TRUE(usage.has_value());
    EXPECT_TRUE((*usage)["choices"].empty());
    EXPECT_EQ((*usage)["usage"], r["usage"]);
  }
}

TEST_F(ChatCompletionsTest, PlainAnswerHasNoToolCallsField) {
  ChatRequest req =
      parse_chat_request(ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                       "include_reasoning": false})"),
                         {});
  ChatResponder r(config(req, "", "<think>"), tok_);
  r.absorb(scripted("thinking...</think>Hello!"));
  const json out = r.response(3);
  const json& msg = out["choices"][0]["message"];
  EXPECT_EQ(msg["content"], "Hello!");
  EXPECT_FALSE(msg.contains("tool_calls"));
  EXPECT_FALSE(msg.contains("reasoning_content"));  // include_reasoning: false
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
}

TEST_F(ChatCompletionsTest, NamedToolChoiceFinishesWithStop) {
  ojson body = ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}],
      "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})");
  body["tools"] = ojson::parse(kTools);
  const ChatRequest req = parse_chat_request(body, {});
  ChatResponder r(config(req, "glm47", ""), tok_);
  r.absorb(scripted(
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"));
  const json out = r.response(3);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(out["choices"][0]["message"]["content"].is_null());
}

}  // namespace
}  // namespace mls::server
