// A request's structured output as a token constraint: response_format / structured_outputs /
// guided_* compiled through the serving context's GrammarCompiler, or the tool-call grammar
// when tool_choice requires a call. A grammar error (an unsupported JSON Schema keyword, a bad
// regex or GBNF) is a 400 naming the request field. `gate` ("" or the reasoning end marker)
// leaves a reasoning section unconstrained.
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

}  // namespace mls::server
