// The grammar of a turn that must call a tool (tool_choice "required" or a named function),
// written in the model's own tool-call syntax, so that the tool parser reads exactly what was
// generated: GLM-4.5/4.7/5 <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>
// </tool_call>, DeepSeek-V3.1 <｜tool▁call▁begin｜>name<｜tool▁sep｜>{json}<｜tool▁call▁end｜> in
// a <｜tool▁calls▁begin｜> section, DeepSeek-V3.2 DSML invoke/parameter blocks. Each tool's
// `parameters` JSON Schema constrains its arguments (grammar::JsonSchemaConverter; a string
// parameter written as bare text may not contain '<'). Parameters are written in the schema's
// order, required ones first.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mls::chat {

// GBNF text (root rule "root") for `parser` (a tool_call_format name). `only` names the one tool
// allowed ("" = any of `tools`); `parallel` allows more than one call. Throws InvalidArgument
// for an unknown parser, grammar::GrammarError for a schema outside the supported subset.
std::string tool_call_gbnf(std::string_view parser, const nlohmann::ordered_json& tools,
                           const std::string& only, bool parallel);

}  // namespace mls::chat
