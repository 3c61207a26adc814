#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include "server/errors.h"

namespace mls::server {
namespace {

using ojson = nlohmann::ordered_json;

struct BadCase {
  const char* body;
  const char* param;
  const char* message;  // a substring of the error message
};

void expect_400(const BadCase& c, bool chat) {
  SCOPED_TRACE(c.body);
  try {
    const ojson body = parse_json_body(c.body);
    if (chat)
      parse_chat_request(body, {});
    else
      parse_completion_request(body, {});
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), c.param);
    EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
  }
}

TEST(OpenAiProtocol, RejectsMalformedBodies) {
  for (const char* body : {"{bad", "[1, 2]", "\"text\"", ""}) {
    SCOPED_TRACE(body);
    EXPECT_THROW(parse_json_body(body), ApiError);
  }
  EXPECT_THROW(parse_json_body("{\"a\": " + std::string(100000, '[')), ApiError);
}

TEST(OpenAiProtocol, ChatValidationNamesTheField) {
  const BadCase cases[] = {
      {R"({})", "messages", "'messages' is required"},
      {R"({"messages": []})", "messages", "non-empty list"},
      {R"({"messages": "hi"})", "messages", "non-empty list"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role",
       "'wizard' is not one of"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role", "must be a string"},
      {R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content",
       "must be a string, null or a list"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content", "is required"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content", "'image_url' is not supported"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]})",
       "messages[0].tool_calls", "'function' object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature",
       "must be a number"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "temperature",
       "must be in [0, 100]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n", "[1, 128]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens",
       "must be an integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
       "max_completion_tokens", "at least 1"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": 5})", "stop",
       "string or a list of strings"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream",
       "must be a boolean"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})",
       "stream_options", "only allowed when 'stream' is true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs",
       "requires 'logprobs': true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 50})",
       "top_logprobs", "[0, 20]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"})",
       "tool_choice", "not one of none, auto, required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice", "no 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "a"}}], "tool_choice": {"type": "function", "function":
          {"name": "b"}}})",
       "tool_choice", "'b', which is not in 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"name": "a"}]})", "tools",
       "each tool must be"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})",
       "chat_template_kwargs", "must be an object"},
  };
  for (const BadCase& c : cases) expect_400(c, true);
}

TEST(OpenAiProtocol, CompletionValidationNamesTheField) {
  const BadCase cases[] = {
      {R"({})", "prompt", "'prompt' is required"},
      {R"({"prompt": 7})", "prompt", "must be a string, a list of strings"},
      {R"({"prompt": [1, "a"]})", "prompt", "must be a string"},
      {R"({"prompt": [[1, 2], [-3]]})", "prompt", "must be a string"},
      {R"({"prompt": ""})", "prompt", "must not be empty"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs", "[0, 20]"},
      {R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})", "min_tokens",
       "must not exceed max_tokens"},
      {R"({"prompt": "x", "stop_token_ids": [1, "a"]})", "stop_token_ids", "list of integers"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", "[-2, 2]"},
  };
  for (const BadCase& c : cases) expect_400(c, false);
}

TEST(OpenAiProtocol, ParsesSamplingFieldsAndDefaults) {
  GenerationDefaults d;
  d.temperature = 0.6;
  d.top_p = 0.95;
  const CompletionRequest r = parse_completion_request(
      parse_json_body(R"({"prompt": [[1, 2], [3]], "max_tokens": 5, "stop": "x", "seed": 7,
                          "n": 2, "top_k": 20, "logprobs": 3, "echo": true, "stream": true,
                          "stream_options": {"include_usage": true}})"),
      d);
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_DOUBLE_EQ(r.sampling.params.temperature, 0.6);
  EXPECT_DOUBLE_EQ(r.sampling.params.top_p, 0.95);
  EXPECT_EQ(r.sampling.params.max_tokens, 5);
  EXPECT_EQ(r.sampling.params.n, 2);
  EXPECT_EQ(r.sampling.params.top_k, 20);
  EXPECT_EQ(r.sampling.params.logprobs, 3);
  EXPECT_EQ(r.sampling.params.seed, 7u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.sampling.include_usage);
}

TEST(OpenAiProtocol, NormalisesChatMessages) {
  const ChatRequest r = parse_chat_request(parse_json_body(R"({"messages": [
          {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
          {"role": "assistant", "content": null, "reasoning": "hm", "tool_calls": []}],
        "max_completion_tokens": 3, "logprobs": true, "top_logprobs": 2,
        "chat_template_kwargs": {"enable_thinking": false}})"),
                                           {});
  const ojson& m = r.template_request["messages"];
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "a\nb");
  EXPECT_EQ(m[1]["reasoning_content"], "hm");
  EXPECT_FALSE(m[1].contains("tool_calls"));  // an empty list is no tool calls
  EXPECT_EQ(r.sampling.params.max_tokens, 3);
  EXPECT_EQ(r.sampling.params.logprobs, 2);
  EXPECT_EQ(r.template_request["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_EQ(r.tool_choice, ToolChoice::kNone);
}

TEST(OpenAiProtocol, ErrorBodyHasTheOpenAiShape) {
  const nlohmann::json e = error_body(404, "no such model", "model");
  EXPECT_EQ(e["error"]["message"], "no such model");
  EXPECT_EQ(e["error"]["type"], "NotFoundError");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], 404);
  EXPECT_TRUE(error_body(400, "x")["error"]["param"].is_null());
}

TEST(OpenAiProtocol, StructuredOutputFields) {
  using Kind = StructuredOutput::Kind;
  const auto parse = [](const char* body) {
    return parse_completion_request(parse_json_body(body), {}).sampling.structured;
  };
  EXPECT_EQ(parse(R"({"prompt": "x"})").kind, Kind::kNone);
  EXPECT_EQ(parse(R"({"prompt": "x", "response_format": {"type": "text"}})").kind, Kind::kNone);
  EXPECT_EQ(parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})").kind,
            Kind::kJsonObject);
  const StructuredOutput js = parse(
      R"({"prompt": "x", "response_format": {"type": "json_schema",
          "json_schema": {"name": "n", "strict": true, "schema": {"type": "integer"}}}})");
  EXPECT_EQ(js.kind, Kind::kJsonSchema);
  EXPECT_EQ(js.schema, ojson({{"type", "integer"}}));
  EXPECT_EQ(js.field, "response_format.json_schema.schema");
  const StructuredOutput so =
      parse(R"({"prompt": "x", "structured_outputs": {"choice": ["a", "b"]}})");
  EXPECT_EQ(so.kind, Kind::kChoice);
  EXPECT_EQ(so.choices, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(parse(R"({"prompt": "x", "structured_outputs": {"regex": "a+"}})").text, "a+");
  EXPECT_EQ(parse(R"({"prompt": "x", "guided_json": "{\"type\": \"string\"}"})").schema,
            ojson({{"type", "string"}}));
  EXPECT_EQ(parse(R"({"prompt": "x", "guided_grammar": "root ::= \"a\""})").kind, Kind::kGrammar);
  EXPECT_TRUE(parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "parallel_tool_calls": false})"),
                                 {})
                  .parallel_tool_calls == false);
  for (
      const BadCase& c : std::vector<BadCase>{
          {R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format.type",
           "not one of"},
          {R"({"prompt": "x", "response_format": {"type": "json_schema"}})",
           "response_format.json_schema", "'schema'"},
          {R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": 3}}})",
           "response_format.json_schema.schema", "JSON Schema"},
          {R"({"prompt": "x", "structured_outputs": {"structural_tag": "t"}})",
           "structured_outputs.structural_tag", "not supported"},
          {R"({"prompt": "x", "guided_choice": []})", "guided_choice", "non-empty list"},
          {R"({"prompt": "x", "guided_regex": ""})", "guided_regex", "non-empty string"},
          {R"({"prompt": "x", "guided_json": "{not json"})", "guided_json", "JSON Schema"},
          {R"({"prompt": "x", "response_format": {"type": "json_object"}, "guided_regex": "a"})",
           "guided_regex", "give only one"},
      })
    expect_400(c, false);
}

}  // namespace
}  // namespace mls::server
