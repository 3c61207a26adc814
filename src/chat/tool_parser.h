// Tool-call parsing of model output into OpenAI `tool_calls`, complete and streaming.
//
// Every supported format has the same shape: ordinary text, then calls delimited by begin/end
// markers, optionally wrapped in a section (DeepSeek's <｜tool▁calls▁begin｜> ...). One state
// machine handles all formats; a format only says what its markers are and how one call's body
// becomes a name and JSON arguments. A call is reported once its end marker has arrived and its
// body parsed, so that streaming and complete parsing always agree: a malformed or unterminated
// call is returned as content in both.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mls::chat {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as text
};

struct ToolParseResult {
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// One streaming event. Argument fragments of a call concatenate to its complete arguments.
struct ToolEvent {
  enum Kind { kContent, kToolCallStart, kArguments };
  Kind kind;
  std::string text;  // content or argument fragment
  int index = -1;    // tool call index (kToolCallStart, kArguments)
  std::string id;    // kToolCallStart
  std::string name;  // kToolCallStart
};

// A call body as a format parsed it.
struct ParsedCall {
  std::string name;
  std::vector<std::string> argument_fragments;  // concatenate to the JSON arguments
};

struct ToolCallFormat {
  std::string section_begin;  // "" when calls are not wrapped
  std::string section_end;
  std::string call_begin;
  std::string call_end;
  // Body between call_begin and call_end -> call, or nullopt when malformed.
  std::function<std::optional<ParsedCall>(std::string_view body)> parse_call;

  // The marker where the parser starts a call (or the section of calls).
  const std::string& opener() const { return section_begin.empty() ? call_begin : section_begin; }
};

// Makes the id of the call with the given index ("call_" + 24 random characters by default).
using ToolCallIdGenerator = std::function<std::string(int index)>;

class ToolParser {
 public:
  ToolParser(ToolCallFormat format, ToolCallIdGenerator ids = {});

  // Feeds a text delta; returns the events it completes.
  std::vector<ToolEvent> feed(std::string_view delta);
  // End of output: releases held-back text; unterminated calls become content.
  std::vector<ToolEvent> finish();

  // Parses a whole output with a fresh state.
  ToolParseResult parse(std::string_view text) const;

 private:
  enum class State { kContent, kSection, kCall, kAfterCall };
  void run(std::vector<ToolEvent>& out);
  void emit_content(std::string text, std::vector<ToolEvent>& out);
  void fail_pending(std::vector<ToolEvent>& out);

  ToolCallFormat format_;
  ToolCallIdGenerator ids_;
  State state_ = State::kContent;
  std::string buffer_;  // unprocessed text
  std::string raw_;     // consumed markup of the section or call being parsed
  int next_index_ = 0;
};

// Folds events into a complete result.
ToolParseResult collect_events(const std::vector<ToolEvent>& events);

// Formats: "glm47" (GLM-4.5/4.7/5 <tool_call> with <arg_key>/<arg_value>), "deepseek_v31",
// "deepseek_v32" (DSML). `tools` is the request's tool list (argument types for GLM).
// Throws InvalidArgument for an unknown name.
ToolCallFormat tool_call_format(std::string_view name, const nlohmann::ordered_json& tools);
std::vector<std::string> tool_parser_names();

ToolCallFormat glm47_format(const nlohmann::ordered_json& tools);
ToolCallFormat deepseek_v31_format();
ToolCallFormat deepseek_v32_format();

// `s` without leading and trailing white space (space, tab, CR, LF), as the formats skip it.
std::string_view trim_space(std::string_view s);
// json.dumps(value, ensure_ascii=False) of a JSON value, Python's spacing.
std::string python_json(const nlohmann::ordered_json& value);
// Python-style JSON object text from key/value-JSON pairs, split into streaming fragments:
// "{", "\"k\": v", ", \"k2\": v2", "}".
std::vector<std::string> object_fragments(
    const std::vector<std::pair<std::string, std::string>>& members);

}  // namespace mls::chat
