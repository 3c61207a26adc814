#include "server/structured_output.h"

#include <fmt/format.h>

#include "chat/tool_call_grammar.h"
#include "chat/tool_parser.h"
#include "core/logging.h"
#include "grammar/grammar_error.h"
#include "grammar/grammar_matcher.h"
#include "server/errors.h"

namespace mls::server {
namespace {

grammar::GrammarCompiler& compiler(ServingContext& ctx, const std::string& field) {
  if (!ctx.grammars) bad_request("structured outputs are not available on this server", field);
  return *ctx.grammars;
}

}  // namespace

std::shared_ptr<const TokenConstraint> structured_constraint(ServingContext& ctx,
                                                             const StructuredOutput& so,
                                                             const std::string& gate) {
  using Kind = StructuredOutput::Kind;
  if (so.kind == Kind::kNone) return nullptr;
  grammar::GrammarCompiler& gc = compiler(ctx, so.field);
  std::shared_ptr<grammar::CompiledGrammar> g;
  try {
    switch (so.kind) {
      case Kind::kJsonObject:
        g = gc.json_object(so.whitespace);
        break;
      case Kind::kJsonSchema:
        g = gc.json_schema(so.schema, so.whitespace);
        break;
      case Kind::kRegex:
        g = gc.regex(so.text);
        break;
      case Kind::kChoice:
        g = gc.choice(so.choices);
        break;
      case Kind::kGrammar:
        g = gc.gbnf(so.text);
        break;
      case Kind::kNone:
        break;
    }
  } catch (const grammar::GrammarError& e) {
    bad_request(fmt::format("'{}': {}", so.field, e.what()), so.field);
  }
  return std::make_shared<grammar::GrammarMatcher>(std::move(g), gate);
}

std::shared_ptr<const TokenConstraint> tool_call_constraint(ServingContext& ctx,
                                                            const nlohmann::ordered_json& tools,
                                                            const std::string& only, bool parallel,
                                                            const std::string& gate) {
  grammar::GrammarCompiler& gc = compiler(ctx, "tool_choice");
  try {
    const std::string text = chat::tool_call_gbnf(ctx.opts.tool_call_parser, tools, only, parallel);
    return std::make_shared<grammar::GrammarMatcher>(gc.gbnf(text), gate);
  } catch (const grammar::GrammarError& e) {
    bad_request(fmt::format("'tools': a tool's parameters: {}", e.what()), "tools");
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), "tool_choice");
  }
}

std::shared_ptr<const TokenConstraint> auto_tool_call_constraint(
    ServingContext& ctx, const nlohmann::ordered_json& tools, bool parallel,
    const std::string& gate) {
  grammar::GrammarCompiler& gc = compiler(ctx, "tool_choice");
  const std::string& parser = ctx.opts.tool_call_parser;
  try {
    return std::make_shared<grammar::GrammarMatcher>(
        gc.gbnf(chat::tool_call_gbnf(parser, tools, "", parallel)), gate,
        chat::tool_call_format(parser, tools).opener());
  } catch (const grammar::GrammarError& e) {
    MLS_LOG_DEBUG("tool_choice auto: tool calls left free: a tool's parameters: {}", e.what());
    return nullptr;
  } catch (const InvalidArgument& e) {
    bad_request(e.what(), "tools");
  }
}

}  // namespace mls::server
