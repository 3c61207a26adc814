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

TEST(OpenAiProtocol, HostileRequestsAreA400NamingTheField) {
  const std::string deep = std::string(16000, '[') + std::string(16000, ']');
  EXPECT_THROW(parse_json_body("{\"messages\": " + deep + "}"), ApiError);
  const std::string many_stops = [] {
    std::string s = R"({"prompt": "x", "stop": [)";
    for (int i = 0; i < 129; ++i) s += (i ? ", \"" : "\"") + std::to_string(i) + "\"";
    return s + "]}";
  }();
  const std::string long_stop = R"({"prompt": "x", "stop": ")" + std::string(16385, 'z') + "\"}";
  const BadCase completion[] = {
      {many_stops.c_str(), "stop", "at most 128 strings (got 129)"},
      {long_stop.c_str(), "stop", "of 16384 bytes in all (got 1 of 16385)"},
  };
  for (const BadCase& c : completion) expect_400(c, false);
  const BadCase chat[] = {
      {R"({"messages": [{"role": "user", "content": "x"}],
          "chat_template_kwargs": {"ok": 1, "messages": []}})",
       "chat_template_kwargs.messages", "chat_template_kwargs may not set 'messages'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tools": 1}})",
       "chat_template_kwargs.tools", "may not set 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "a", "parameters": "str"}}]})",
       "tools[0].function.parameters", "must be a JSON Schema object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "a"}}, {"type": "function", "function": {"name": "b",
          "parameters": {"type": "array"}}}]})",
       "tools[1].function.parameters", ".type must be \"object\""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "a", "parameters": {"properties": [1]}}}]})",
       "tools[0].function.parameters", ".properties must be an object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "a", "parameters": {"properties": {"p": 3}}}}]})",
       "tools[0].function.parameters", ".properties.p must be a JSON Schema"},
  };
  for (const BadCase& c : chat) expect_400(c, true);
  // Within the limits: 128 stop strings, a schema with properties.
  EXPECT_NO_THROW(parse_completion_request(parse_json_body(R"({"prompt": "x", "stop": [)" +
                                                           [] {
                                                             std::string s;
                                                             for (int i = 0; i < 128; ++i)
                                                               s += (i ? ", \"" : "\"") +
                                                                    std::to_string(i) + "\"";
                                                             return s;
                                                           }() +
                                                           "]}"),
                                           {}));
  EXPECT_NO_THROW(parse_chat_request(
      parse_json_body(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type":
          "function", "function": {"name": "a", "parameters": {"type": "object", "properties":
          {"p": {"type": "string"}, "q": true}}}}], "chat_template_kwargs": {"k": 1}})"),
      {}));
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

TEST(OpenAiProtocol, TokenConstraintsAndUnsupportedFieldsNameTheField) {
  const BadCase completion[] = {
      {R"({"prompt": "x", "logit_bias": [1]})", "logit_bias", "must be an object"},
      {R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias", "'abc' is not a token id"},
      {R"({"prompt": "x", "logit_bias": {"-3": 1}})", "logit_bias", "is not a token id"},
      {R"({"prompt": "x", "logit_bias": {"3": 101}})", "logit_bias", "[-100, 100]"},
      {R"({"prompt": "x", "logit_bias": {"3": "up"}})", "logit_bias", "[-100, 100]"},
      {R"({"prompt": "x", "allowed_token_ids": []})", "allowed_token_ids", "non-empty list"},
      {R"({"prompt": "x", "allowed_token_ids": [1, -2]})", "allowed_token_ids", "token ids"},
      {R"({"prompt": "x", "bad_words": 3})", "bad_words", "string or a list"},
      {R"({"prompt": "x", "bad_words": ["ok", " "]})", "bad_words", "non-empty strings"},
      {R"({"prompt": "x", "prompt_logprobs": 21})", "prompt_logprobs", "[0, 20]"},
      {R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})", "prompt_logprobs",
       "not available when 'stream' is true"},
      {R"({"prompt": "x", "include_stop_str_in_output": 1})", "include_stop_str_in_output",
       "must be a boolean"},
      {R"({"prompt": "x", "best_of": 3})", "best_of", "other than n"},
      {R"({"prompt": "x", "use_beam_search": true})", "use_beam_search", "not supported"},
      {R"({"prompt": "x", "suffix": "end"})", "suffix", "not supported"},
      {R"({"prompt": "x", "truncate_prompt_tokens": 5})", "truncate_prompt_tokens",
       "not supported"},
      {R"({"prompt": "x", "spaces_between_special_tokens": false})",
       "spaces_between_special_tokens", "not supported"},
      {R"({"prompt": "x", "return_token_ids": 1})", "return_token_ids", "must be a boolean"},
  };
  for (const BadCase& c : completion) expect_400(c, false);
  const BadCase chat[] = {
      {R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", "echo",
       "/v1/completions only"},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": []})", "functions",
       "use 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "modalities": ["audio"]})", "modalities",
       "only"},
      {R"({"messages": [{"role": "user", "content": "x"}], "priority": 3})", "priority",
       "not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "return_token_ids": true})",
       "return_token_ids", "/v1/completions only"},
  };
  for (const BadCase& c : chat) expect_400(c, true);
  // Their default values are accepted.
  EXPECT_NO_THROW(parse_completion_request(
      parse_json_body(R"({"prompt": "x", "n": 2, "best_of": 2, "use_beam_search": false,
                          "suffix": null, "spaces_between_special_tokens": true})"),
      {}));
  EXPECT_NO_THROW(parse_chat_request(
      parse_json_body(R"({"messages": [{"role": "user", "content": "x"}], "echo": false,
                          "modalities": ["text"], "priority": 0})"),
      {}));
}

// return_token_ids: unset leaves the choice to the server (on without a tokenizer).
TEST(OpenAiProtocol, ReturnTokenIdsIsKeptAsGiven) {
  EXPECT_FALSE(parse_completion_request(parse_json_body(R"({"prompt": [1, 2]})"), {})
                   .return_token_ids.has_value());
  EXPECT_EQ(
      parse_completion_request(parse_json_body(R"({"prompt": [1], "return_token_ids": true})"), {})
          .return_token_ids,
      true);
  EXPECT_EQ(
      parse_completion_request(parse_json_body(R"({"prompt": [1], "return_token_ids": false})"), {})
          .return_token_ids,
      false);
  EXPECT_NO_THROW(parse_chat_request(
      parse_json_body(
          R"({"messages": [{"role": "user", "content": "x"}], "return_token_ids": false})"),
      {}));
}

TEST(OpenAiProtocol, ParsesTheRemainingSamplingFields) {
  const CompletionRequest r = parse_completion_request(
      parse_json_body(R"({"prompt": "x", "logit_bias": {"5": -100, "7": 2.5},
                          "allowed_token_ids": [5, 7, 9], "bad_words": ["a b", "c"],
                          "include_stop_str_in_output": true, "stream": true,
                          "stream_options": {"include_usage": true,
                                             "continuous_usage_stats": true}})"),
      {});
  const SamplingParams& p = r.sampling.params;
  EXPECT_EQ(p.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(p.allowed_token_ids, (std::vector<int32_t>{5, 7, 9}));
  EXPECT_EQ(r.sampling.bad_words, (std::vector<std::string>{"a b", "c"}));
  EXPECT_TRUE(r.sampling.include_stop_str_in_output);
  EXPECT_TRUE(r.sampling.continuous_usage);
  // continuous_usage_stats counts only with include_usage.
  EXPECT_FALSE(parse_completion_request(parse_json_body(R"({"prompt": "x", "stream": true,
                       "stream_options": {"continuous_usage_stats": true}})"),
                                        {})
                   .sampling.continuous_usage);
  // echo with logprobs scores the prompt with the same k; prompt_logprobs alone too.
  const CompletionRequest echo = parse_completion_request(
      parse_json_body(R"({"prompt": "x", "echo": true, "logprobs": 3})"), {});
  EXPECT_EQ(echo.sampling.params.prompt_logprobs, 3);
  EXPECT_FALSE(echo.prompt_logprobs);
  const ChatRequest chat = parse_chat_request(
      parse_json_body(R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 0,
                          "add_special_tokens": true})"),
      {});
  EXPECT_EQ(chat.sampling.params.prompt_logprobs, 0);
  EXPECT_TRUE(chat.add_special_tokens);
}

TEST(OpenAiProtocol, BadWordsAreTokenizedWithAndWithoutALeadingSpace) {
  const tok::Tokenizer tok = tok::Tokenizer::from_dir(MLASERVE_TEST_DATA "/tok-glm");
  const auto ids = bad_words_token_ids(tok, {" hello", "hello"});
  ASSERT_EQ(ids.size(), 2u);  // " hello" and "hello" are the same word: two sequences, once
  EXPECT_EQ(ids[0], tok.encode("hello", false));
  EXPECT_EQ(ids[1], tok.encode(" hello", false));
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

// vLLM's whitespace pattern: honoured for JSON output, a 400 naming the field otherwise; one
// grammar engine, so guided_decoding_backend is "auto" or a 400.
TEST(OpenAiProtocol, WhitespacePatternAndDecodingBackend) {
  const auto parse = [](const char* body) {
    return parse_completion_request(parse_json_body(body), {}).sampling.structured;
  };
  EXPECT_EQ(parse(R"({"prompt": "x", "guided_json": {"type": "object"},
                      "guided_whitespace_pattern": "[ ]?"})")
                .whitespace,
            "[ ]?");
  EXPECT_EQ(parse(R"({"prompt": "x", "structured_outputs": {"json_object": true,
                      "whitespace_pattern": "[\n ]*"}})")
                .whitespace,
            "[\n ]*");
  EXPECT_EQ(parse(R"({"prompt": "x", "guided_json": {}, "guided_decoding_backend": "auto"})").kind,
            StructuredOutput::Kind::kJsonSchema);
  for (const BadCase& c : std::vector<BadCase>{
           {R"({"prompt": "x", "guided_whitespace_pattern": " "})", "guided_whitespace_pattern",
            "JSON output only"},
           {R"({"prompt": "x", "guided_regex": "a", "guided_whitespace_pattern": " "})",
            "guided_whitespace_pattern", "JSON output only"},
           {R"({"prompt": "x", "guided_json": {}, "guided_whitespace_pattern": "[ x]"})",
            "guided_whitespace_pattern", "'x', which is not JSON whitespace"},
           {R"({"prompt": "x", "guided_json": {}, "guided_whitespace_pattern": "\\s*"})",
            "guided_whitespace_pattern", "U+000B"},
           {R"({"prompt": "x", "guided_json": {}, "guided_whitespace_pattern": "( *)*"})",
            "guided_whitespace_pattern", "left recursion"},
           {R"({"prompt": "x", "guided_json": {}, "guided_whitespace_pattern": ""})",
            "guided_whitespace_pattern", "non-empty string"},
           {R"({"prompt": "x", "structured_outputs": {"json": {}, "whitespace_pattern": " "},
               "guided_whitespace_pattern": " "})",
            "guided_whitespace_pattern", "give only one"},
           {R"({"prompt": "x", "guided_json": {}, "guided_decoding_backend": "xgrammar"})",
            "guided_decoding_backend", "one grammar engine"},
       })
    expect_400(c, false);
}

}  // namespace
}  // namespace mls::server
