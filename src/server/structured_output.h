// A request's structured output as a token constraint: response_format / structured_outputs /
// guided_* compiled through the serving context's GrammarCompiler, the tool-call grammar when
// tool_choice requires a call, or the same grammar triggered by the call's first marker under
// tool_choice "auto". A grammar error (an unsupported JSON Schema keyword, a bad regex or GBNF)
// is a 400 naming the request field. `gate` ("" or the reasoning end marker) leaves a reasoning
// section unconstrained.
#pragma once

#include <memory>
#include <string>

#include "engine/token_constraint.h"
#include "server/openai_protocol.h"
#include "server/serving_context.h"

namespace mls::server {

// Null when `so` asks for nothing.
std::shared_ptr<const TokenConstraint> structured_constraint(ServingContext& ctx,
                                                             const StructuredOutput& so,
                                                             const std::string& gate);

// tool_choice "required" (`only` empty) or a named tool, in the server's tool-call syntax.
std::shared_ptr<const TokenConstraint> tool_call_constraint(ServingContext& ctx,
                                                            const nlohmann::ordered_json& tools,
                                                            const std::string& only, bool parallel,
                                                            const std::string& gate);

// tool_choice "auto": the output is free until the tool parser's first marker (after `gate`),
// and from the marker on a call (calls when `parallel`) of `tools` in the same syntax, so that
// what follows the marker always parses as a call. Null, leaving the output free as vLLM does,
// when a tool's parameters use JSON Schema the grammar does not support (such tools are no
// client error under "auto").
std::shared_ptr<const TokenConstraint> auto_tool_call_constraint(
    ServingContext& ctx, const nlohmann::ordered_json& tools, bool parallel,
    const std::string& gate);

}  // namespace mls::server
