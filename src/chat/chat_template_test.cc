// Renders every conversation of tests/chat/conversations.json with every template in
// tests/chat/templates/ and compares with Python Jinja2 byte for byte.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include "chat/python_reference.h"
#include "chat/template_error.h"
#include "tokenizer/tokenizer_config.h"

namespace mls::chat {
namespace {

const std::filesystem::path kChatDir =
    std::filesystem::path(MLASERVE_SOURCE_DIR) / "tests" / "chat";

const std::vector<std::pair<std::string, std::string>> kSpecial = {
    {"bos_token", "<｜begin▁of▁sentence｜>"}, {"eos_token", "<｜end▁of▁sentence｜>"}};

class ConversationSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(ConversationSuite, MatchesPythonJinja) {
  if (!testing::python_jinja_available())
    GTEST_SKIP() << "/usr/bin/python3 cannot import jinja2 (apt install python3-jinja2); "
                    "the reference rendering is unavailable";
  const std::string source = tok::read_text_file(kChatDir / "templates" / (GetParam() + ".jinja"));
  const ChatTemplate tmpl(source, kSpecial);
  const auto conversations =
      nlohmann::ordered_json::parse(tok::read_text_file(kChatDir / "conversations.json"));
  ASSERT_GE(conversations.size(), 30u);

  std::vector<testing::ReferenceCase> cases;
  std::vector<std::string> ours, our_errors;
  for (const auto& conv : conversations) {
    nlohmann::ordered_json vars = chat_variables(conv["request"]);
    try {
      ours.push_back(tmpl.render(vars));
      our_errors.emplace_back();
    } catch (const TemplateRuntimeError& e) {
      ours.emplace_back();
      our_errors.push_back(e.what());
    }
    for (const auto& [k, v] : kSpecial) vars[k] = v;
    cases.push_back({source, vars});
  }
  const auto reference = testing::render_with_python(cases);
  ASSERT_EQ(reference.size(), cases.size());
  int rendered = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(conversations[i]["name"].get<std::string>());
    if (reference[i].ok) {
      ++rendered;
      EXPECT_EQ(our_errors[i], "");
      EXPECT_EQ(ours[i], reference[i].output);
    } else {
      EXPECT_NE(our_errors[i], "") << "Python failed with " << reference[i].error;
    }
  }
  EXPECT_GE(rendered, 25) << "most conversations must render";
}

INSTANTIATE_TEST_SUITE_P(Templates, ConversationSuite,
                         ::testing::Values("glm5_style", "deepseek_v31_style",
                                           "deepseek_v32_style"));

TEST(ChatVariables, ParsesToolCallArgumentsAndKwargs) {
  const auto vars = chat_variables(nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "assistant", "content": null, "tool_calls": [
      {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]}],
    "chat_template_kwargs": {"enable_thinking": false}})"));
  const auto& args = vars["messages"][0]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(args.dump(), R"({"b":1,"a":2})");  // client order kept
  EXPECT_TRUE(vars["tools"].is_null());
  EXPECT_EQ(vars["add_generation_prompt"], true);
  EXPECT_EQ(vars["enable_thinking"], false);
}

TEST(ChatVariables, RejectsBadRequests) {
  EXPECT_THROW(chat_variables(nlohmann::ordered_json::parse(R"({"messages": 3})")),
               InvalidArgument);
  EXPECT_THROW(chat_variables(nlohmann::ordered_json::parse(R"({"messages": [{"role": "assistant",
      "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})")),
               InvalidArgument);
  // Found by fuzz_chat_template: fields of the wrong type escaped as nlohmann::type_error.
  EXPECT_THROW(
      chat_variables(nlohmann::ordered_json::parse(
          R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": "type"})")),
      InvalidArgument);
  EXPECT_THROW(chat_variables(nlohmann::ordered_json::parse(R"({"messages": [{"role": "assistant",
      "tool_calls": [{"function": {"name": 7, "arguments": "{oops"}}]}]})")),
               InvalidArgument);
}

TEST(ChatTemplate, LoadsFromConfigAndReportsMissingTemplate) {
  tok::TokenizerConfig cfg = tok::TokenizerConfig::from_json(nlohmann::json::parse(
      R"({"bos_token": {"content": "<s>"}, "chat_template": [{"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"}]})"));
  const ChatTemplate t = ChatTemplate::from_config(cfg);
  EXPECT_EQ(render_chat(t, nlohmann::ordered_json::parse(
                               R"({"messages": [{"role": "user", "content": "x"}]})")),
            "<s>x");
  EXPECT_THROW(ChatTemplate::from_config(tok::TokenizerConfig{}), ConfigError);
}

}  // namespace
}  // namespace mls::chat
