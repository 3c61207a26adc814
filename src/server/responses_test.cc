#include "server/responses.h"

#include <gtest/gtest.h>

#include "server/errors.h"
#include "test_data.h"

namespace mls::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ResponsesRequest parse(const std::string& body, ResponseStore& store) {
  return parse_responses_request(parse_json_body(body), {}, store);
}

void expect_error(const std::string& body, int status, const std::string& param,
                  const std::string& message, ResponseStore& store) {
  SCOPED_TRACE(body);
  try {
    parse(body, store);
    FAIL() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), status);
    EXPECT_EQ(e.param(), param);
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Responses, InputItemsBecomeChatMessages) {
  ResponseStore store;
  const ResponsesRequest plain = parse(R"({"input": "Hi", "instructions": "Be brief"})", store);
  EXPECT_EQ(plain.chat.template_request["messages"],
            ojson::parse(R"([{"role": "system", "content": "Be brief"},
                             {"role": "user", "content": "Hi"}])"));
  // Instructions are not part of what a continuation inherits.
  EXPECT_EQ(plain.conversation, ojson::parse(R"([{"role": "user", "content": "Hi"}])"));

  const ResponsesRequest items = parse(R"({"input": [
      {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
      {"type": "message", "role": "user", "content": "weather?"},
      {"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "call it"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather",
       "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
      "tools": [{"type": "function", "name": "get_weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
      "tool_choice": {"type": "function", "name": "get_weather"},
      "max_output_tokens": 9, "temperature": 0, "store": false})",
                                       store);
  const ojson& m = items.chat.template_request["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "rules");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["reasoning_content"], "call it");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[3],
            ojson::parse(R"({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})"));
  EXPECT_EQ(items.chat.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(items.chat.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(items.chat.sampling.params.max_tokens, 9);
  EXPECT_FALSE(items.store);
  EXPECT_EQ(items.echo["max_output_tokens"], 9);
  EXPECT_EQ(items.echo["tool_choice"],
            json::parse(R"({"type": "function", "name": "get_weather"})"));
}

TEST(Responses, ValidationNamesTheField) {
  ResponseStore store;
  expect_error(R"({})", 400, "input", "'input' is required", store);
  expect_error(R"({"input": []})", 400, "input", "non-empty list", store);
  expect_error(R"({"input": [{"type": "image", "role": "user"}]})", 400, "input[0].type",
               "'image' is not supported", store);
  expect_error(R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})", 400,
               "input[0].content", "'input_image' is not supported", store);
  expect_error(R"({"input": [{"type": "function_call_output", "output": "x"}]})", 400, "input[0]",
               "call_id must be a string", store);
  expect_error(R"({"input": "x", "max_output_tokens": 0})", 400, "max_output_tokens", "at least 1",
               store);
  expect_error(R"({"input": "x", "tools": [{"type": "web_search"}]})", 400, "tools[0]",
               "only tools of type 'function'", store);
  expect_error(R"({"input": "x", "include": ["reasoning.encrypted_content"]})", 400, "include",
               "not supported", store);
  expect_error(R"({"input": "x", "background": true})", 400, "background", "not supported", store);
  expect_error(R"({"input": "x", "reasoning": {"effort": "high"}})", 400, "reasoning",
               "chat_template_kwargs", store);
  expect_error(R"({"input": "x", "truncation": "auto"})", 400, "truncation", "disabled", store);
  expect_error(R"({"input": "x", "temperature": "hot"})", 400, "temperature", "number", store);
  expect_error(R"({"input": "x", "previous_response_id": "resp_gone"})", 404,
               "previous_response_id", "not found", store);
}

TEST(Responses, PreviousResponseContinuesTheStoredConversation) {
  ResponseStore store;
  store.put("resp_1", ojson::parse(R"([{"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello"}])"));
  const ResponsesRequest r = parse(
      R"({"input": "And you?", "instructions": "new rules", "previous_response_id": "resp_1"})",
      store);
  EXPECT_EQ(r.chat.template_request["messages"],
            ojson::parse(R"([{"role": "system", "content": "new rules"},
                             {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello"},
                             {"role": "user", "content": "And you?"}])"));
  EXPECT_EQ(r.conversation.size(), 3u);
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
}

TEST(ResponseStore, DropsTheLeastRecentlyUsed) {
  ResponseStore store(2);
  store.put("a", ojson::array({1}));
  store.put("b", ojson::array({2}));
  EXPECT_EQ(store.get("a"), ojson::array({1}));  // a is now the most recent
  store.put("c", ojson::array({3}));
  EXPECT_FALSE(store.get("b").has_value());
  EXPECT_TRUE(store.get("a").has_value());
  EXPECT_TRUE(store.get("c").has_value());
  EXPECT_EQ(store.size(), 2u);
  EXPECT_THROW(ResponseStore(0), InvalidArgument);
}

class ResponsesOutput : public ::testing::Test {
 protected:
  tok::Tokenizer tok_ = tok::Tokenizer::from_dir(MLASERVE_SOURCE_DIR "/models/tiny-glm5-chat");

  // The model's output as the engine would report it, one event per token, then `last`.
  std::vector<OutputEvent> scripted(const std::string& text, FinishReason last) {
    auto ch = std::make_shared<EventChannel>();
    OutputStream s(
        &tok_,
        {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = {}, .script = nullptr}, ch,
        nullptr);
    const std::string id = "r";
    std::vector<int32_t> ids = tok_.encode(text, false);
    if (last == FinishReason::kStop) ids.push_back(kTokGlmEndOfText);
    for (size_t i = 0; i < ids.size(); ++i) {
      TokenEvent ev;
      ev.request_id = &id;
      ev.token_id = ids[i];
      ev.finish = i + 1 == ids.size() ? last : FinishReason::kNone;
      s.on_token(ev);
    }
    std::vector<OutputEvent> events;
    ch->wait(events, std::chrono::milliseconds(0));
    return events;
  }

  ResponsesOutputConfig config() {
    return {.id = "resp_test",
            .model = "m",
            .created = 1,
            .parsers = {.reasoning_parser = "glm45",
                        .starts_in_reasoning = true,
                        .tool_parser = "glm47",
                        .tools = ojson::parse(R"([{"type": "function", "function": {
                            "name": "get_weather", "parameters": {"type": "object"}}}])"),
                        .tool_choice = ToolChoice::kAuto},
            .echo = {{"store", true}}};
  }
};

// Reasoning, text and a tool call become three output items; the stream's events (with
// consecutive sequence numbers) rebuild exactly the items of the whole response.
TEST_F(ResponsesOutput, ItemsAndTheEventStreamAgree) {
  const auto events = scripted(
      "Let me check.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key>"
      "<arg_value>Paris</arg_value></tool_call>",
      FinishReason::kStop);
  ResponsesResponder whole(config());
  whole.feed(events);
  whole.finish_events(12);
  const json r = whole.response(12);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["store"], true);
  const json& out = r["output"];
  ASSERT_EQ(out.size(), 3u) << r.dump(1);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0]["text"], "Let me check.");
  EXPECT_EQ(out[1]["type"], "message");
  EXPECT_EQ(out[1]["content"][0]["type"], "output_text");
  EXPECT_EQ(out[1]["content"][0]["text"], "Sure.");
  EXPECT_EQ(out[2]["type"], "function_call");
  EXPECT_EQ(out[2]["name"], "get_weather");
  EXPECT_EQ(json::parse(out[2]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_FALSE(out[2]["call_id"].get<std::string>().empty());
  EXPECT_EQ(r["usage"]["input_tokens"], 12);
  EXPECT_GT(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);

  const ojson m = whole.assistant_message();
  EXPECT_EQ(m["reasoning_content"], "Let me check.");
  EXPECT_EQ(m["content"], "Sure.");
  // As strings: clang finds ordered_json == json ambiguous under C++20's reversed operators.
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>(), out[2]["call_id"].get<std::string>());

  ResponsesResponder streamed(config());
  std::vector<json> stream = streamed.start_events();
  for (const OutputEvent& ev : events)
    for (json& e : streamed.feed({ev})) stream.push_back(std::move(e));
  for (json& e : streamed.finish_events(12)) stream.push_back(std::move(e));
  std::vector<std::string> types;
  json items = json::array();
  std::string reasoning, text, args;
  for (size_t i = 0; i < stream.size(); ++i) {
    const json& e = stream[i];
    EXPECT_EQ(e["sequence_number"], i);
    const std::string type = e["type"];
    if (types.empty() || types.back() != type) types.push_back(type);
    if (type == "response.output_item.added") {
      EXPECT_EQ(e["output_index"], items.size());
      items.push_back(e["item"]);
    }
    if (type == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
    if (type == "response.output_text.delta") text += e["delta"].get<std::string>();
    if (type == "response.function_call_arguments.delta") args += e["delta"].get<std::string>();
    if (type == "response.output_item.done") items[e["output_index"].get<size_t>()] = e["item"];
  }
  const std::vector<std::string> want = {"response.created",
                                         "response.in_progress",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.reasoning_text.delta",
                                         "response.reasoning_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.content_part.added",
                                         "response.output_text.delta",
                                         "response.output_text.done",
                                         "response.content_part.done",
                                         "response.output_item.done",
                                         "response.output_item.added",
                                         "response.function_call_arguments.delta",
                                         "response.function_call_arguments.done",
                                         "response.output_item.done",
                                         "response.completed"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(stream[0]["response"]["status"], "in_progress");
  EXPECT_EQ(stream[0]["response"]["output"], json::array());
  EXPECT_EQ(reasoning, "Let me check.");
  EXPECT_EQ(text, "Sure.");
  EXPECT_EQ(args, out[2]["arguments"]);
  // Ids and call ids are random per responder: compare the rest.
  for (json& item : items) item.erase("id"), item.erase("call_id");
  json want_items = out;
  for (json& item : want_items) item.erase("id"), item.erase("call_id");
  EXPECT_EQ(items, want_items);
  EXPECT_EQ(stream.back()["response"]["output"].size(), 3u);
}

TEST_F(ResponsesOutput, MaxOutputTokensMakesItIncomplete) {
  ResponsesResponder r(config());
  r.feed(scripted("Thinking still", FinishReason::kLength));
  const std::vector<json> last = r.finish_events(3);
  EXPECT_EQ(last.back()["type"], "response.incomplete");
  const json resp = r.response(3);
  EXPECT_EQ(resp["status"], "incomplete");
  EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
}

}  // namespace
}  // namespace mls::server
