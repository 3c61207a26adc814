// Hostile templates and values: every limit of jinja_limits.h ends in a template error, never a
// crash, an exhausted stack or an unbounded allocation.
#include <gtest/gtest.h>

#include <ctime>
#include <functional>
#include <string>

#include "chat/chat_template.h"
#include "chat/jinja_limits.h"
#include "chat/jinja_template.h"
#include "chat/template_error.h"

namespace mls::chat::jinja {
namespace {

std::string render_within(const std::string& src, int64_t max_steps = kMaxRenderSteps) {
  return Template(src).render({}, max_steps);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error; expected one containing: " << part;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(JinjaLimits, SyntaxNestingIsBounded) {
  const auto syntax = [](const std::string& src, const std::string& part) {
    SCOPED_TRACE(src.substr(0, 60));
    expect_error<TemplateSyntaxError>([&] { Template t(src); }, part);
  };
  syntax("{{ " + repeat("(", 20000) + "1" + repeat(")", 20000) + " }}",
         "nests deeper than 128 levels");
  syntax("{{ " + repeat("[", 20000) + repeat("]", 20000) + " }}", "nests deeper than 128 levels");
  syntax("{{ " + repeat("-", 20000) + "1 }}", "nests deeper than 128 levels");
  syntax("{{ " + repeat("not ", 20000) + "1 }}", "nests deeper than 128 levels");
  syntax("{{ 1" + repeat(" + 1", 50000) + " }}", "an expression nests deeper than 128 levels");
  syntax("{{ x" + repeat(".a", 50000) + " }}", "an expression nests deeper than 128 levels");
  syntax("{{ x" + repeat("|trim", 50000) + " }}", "an expression nests deeper than 128 levels");
  syntax(repeat("{% if 1 %}", 20000) + repeat("{% endif %}", 20000),
         "nests deeper than 128 levels");
  syntax("{{ 99999999999999999999 }}", "integer literal out of range");
  syntax("{{ 1e999 }}", "float literal out of range");
  // Real nesting well inside the limits still works.
  EXPECT_EQ(render_within("{{ " + repeat("(", 40) + "1" + repeat(")", 40) + " }}"), "1");
  EXPECT_EQ(render_within("{{ 1" + repeat(" + 1", 100) + " }}"), "101");
}

TEST(JinjaLimits, RecursiveMacrosAndRunawayLoopsEnd) {
  const auto runtime = [](const std::string& src, const std::string& part,
                          int64_t steps = kMaxRenderSteps) {
    SCOPED_TRACE(src);
    expect_error<TemplateRuntimeError>([&] { render_within(src, steps); }, part);
  };
  runtime("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
          "nests deeper than 256 levels while rendering");
  runtime("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
          "nests deeper than 256 levels while rendering");
  runtime("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
          "too many steps", 100'000);
  // Bounded recursion is fine.
  EXPECT_EQ(
      render_within("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                    "{{ f(30) | length }}"),
      "51");
}

TEST(JinjaLimits, SizesAreCheckedBeforeAllocating) {
  const auto runtime = [](const std::string& src, const std::string& part) {
    SCOPED_TRACE(src);
    // CPU time (the renderer is single-threaded): a limit bounds work, and wall time on a busy
    // machine (the sanitizer build in CI beside other jobs) also counts other processes' turns.
    const std::clock_t t0 = std::clock();
    expect_error<TemplateRuntimeError>([&] { render_within(src); }, part);
    EXPECT_LT(static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC, 5.0);
  };
  runtime(R"({{ "a" * 2000000000 }})", "a string of more than 67108864 bytes");
  runtime(R"({{ 2000000000 * "ab" }})", "a string of more than 67108864 bytes");
  runtime(R"({{ [1, 2] * 9000000000000000000 }})", "a list of more than 1000000 items");
  runtime(R"({{ range(2000000) | length }})", "range() of more than 1000000 items");
  runtime(R"({% set ns = namespace(s="ab") %}{% for i in range(64) %})"
          R"({% set ns.s = ns.s ~ ns.s %}{% endfor %})",
          "more than 67108864 bytes");
  runtime(R"({% set ns = namespace(s="ab") %}{% for i in range(64) %})"
          R"({% set ns.s = ns.s + ns.s %}{% endfor %})",
          "more than 67108864 bytes");
  runtime(R"({{ "x" | indent(9000000000000) }})", "a string of more than 67108864 bytes");
  runtime(R"({{ {} | tojson(indent=9000000000000) }})", "a string of more than 67108864 bytes");
  runtime(
      R"({{ ("x" * 1000000).replace("", "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy") }})",
      "a string of more than 67108864 bytes");
  runtime(R"({% for i in range(100) %}{{ "x" * 1000000 }}{% endfor %})",
          "the rendered text exceeds 67108864 bytes");
}

TEST(JinjaLimits, ValuesCannotNestWithoutBoundOrCycle) {
  const auto runtime = [](const std::string& src, const std::string& part) {
    SCOPED_TRACE(src);
    expect_error<TemplateRuntimeError>([&] { render_within(src); }, part);
  };
  runtime(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}",
      "a value nests deeper than 192 levels");
  runtime("{% set ns = namespace(x=1) %}{% set ns.x = ns %}{{ ns }}",
          "a namespace cannot hold another namespace");
  runtime("{% set ns = namespace(x=1) %}{% set ns.x = [{'a': ns}] %}",
          "a namespace cannot hold another namespace");
  runtime("{% set ns = namespace(x=1) %}{% set ns2 = namespace(ns) %}{% set ns.y = ns2 %}",
          "a namespace cannot hold another namespace");
  // JSON from a request nests at most kMaxJsonDepth; deeper values are refused on conversion.
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < kMaxValueDepth + 1; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_THROW(Value::from_json(deep), ValueError);
}

TEST(JinjaLimits, IntegerOverflowIsAnError) {
  for (const char* src :
       {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
        "{{ 9223372036854775807 * 2 }}", "{{ 2 ** 64 }}", "{{ (-9223372036854775807 - 1) // -1 }}",
        "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) | abs }}",
        "{{ 1e300 * 1e300 | int }}", "{{ 'nan' | float | int }}"}) {
    SCOPED_TRACE(src);
    expect_error<TemplateRuntimeError>([&] { render_within(src); }, "");
  }
  EXPECT_EQ(render_within("{{ 1 ** 9223372036854775807 }}"), "1");
  EXPECT_EQ(render_within("{{ (-1) ** 9223372036854775807 }}"), "-1");
  EXPECT_EQ(render_within("{{ range(9223372036854775806, 9223372036854775807, 1000) | list }}"),
            "[9223372036854775806]");
  EXPECT_EQ(render_within("{{ [1, 2, 3][0::9223372036854775807] }}"), "[1]");
}

// The exact report: ~16k levels of JSON in a tool call's arguments string (40 KB) used to
// overflow the stack converting it into template values.
TEST(JinjaLimits, DeepToolCallArgumentsAreRejected) {
  const std::string deep = repeat("[", 16000) + repeat("]", 16000);
  const auto request = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function":
      {"name": "f", "arguments": ")" +
      deep + R"("}}]}]})");
  expect_error<InvalidArgument>([&] { chat_variables(request); },
                                "tool call arguments of 'f': JSON nests deeper than 128 levels");
}

TEST(JinjaLimits, ChatTemplateKwargsCannotReplaceReservedNames) {
  for (const char* key : {"messages", "tools", "documents", "add_generation_prompt", "bos_token",
                          "range", "raise_exception"}) {
    SCOPED_TRACE(key);
    const auto request = nlohmann::ordered_json::parse(
        std::string(R"({"messages": [{"role": "user", "content": "hi"}],
                        "chat_template_kwargs": {")") +
        key + R"(": []}})");
    expect_error<InvalidArgument>([&] { chat_variables(request); },
                                  std::string("chat_template_kwargs may not set '") + key + "'");
  }
}

}  // namespace
}  // namespace mls::chat::jinja
