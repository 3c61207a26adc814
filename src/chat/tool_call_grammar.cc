#include "chat/tool_call_grammar.h"

#include <fmt/format.h>

#include <set>

#include "chat/tool_parser.h"
#include "core/error.h"
#include "grammar/json_schema.h"

namespace mls::chat {
namespace {

using ojson = nlohmann::ordered_json;
using grammar::gbnf_literal;

// The JSON-schema type a parser reads a bare value as (the first non-null one of a list), or "".
std::string value_type(const ojson& schema) {
  const ojson type = schema.is_object() ? schema.value("type", ojson()) : ojson();
  if (type.is_string()) return type.get<std::string>();
  if (type.is_array())
    for (const ojson& t : type)
      if (t.is_string() && t != "null") return t.get<std::string>();
  return "";
}

// Text written bare (no JSON quoting) for a string parameter: its enum values, or characters
// other than '<' within the schema's length bounds.
std::string bare_string(const ojson& schema) {
  if (schema.is_object() && schema.contains("enum") && schema["enum"].is_array()) {
    std::string alts;
    for (const ojson& v : schema["enum"])
      if (v.is_string()) alts += (alts.empty() ? "" : " | ") + gbnf_literal(v.get<std::string>());
    if (!alts.empty()) return "(" + alts + ")";
  }
  int64_t mn = 0, mx = -1;
  if (schema.is_object()) {
    if (schema.contains("minLength") && schema["minLength"].is_number_integer())
      mn = schema["minLength"].get<int64_t>();
    if (schema.contains("maxLength") && schema["maxLength"].is_number_integer())
      mx = schema["maxLength"].get<int64_t>();
  }
  return "[^<]" + grammar::gbnf_repeat(mn, mx);
}

struct Param {
  std::string key;
  ojson schema;
};

// The tool's parameters, required ones first, each group in the schema's order.
std::vector<Param> params_of(const ojson& parameters, std::vector<bool>& required) {
  std::vector<Param> req, opt;
  std::set<std::string> names;
  if (parameters.is_object() && parameters.contains("required") &&
      parameters["required"].is_array())
    for (const ojson& r : parameters["required"])
      if (r.is_string()) names.insert(r.get<std::string>());
  const ojson props =
      parameters.is_object() ? parameters.value("properties", ojson::object()) : ojson::object();
  if (props.is_object())
    for (const auto& [k, v] : props.items()) (names.count(k) ? req : opt).push_back({k, v});
  required.assign(req.size(), true);
  required.resize(req.size() + opt.size(), false);
  req.insert(req.end(), opt.begin(), opt.end());
  return req;
}

class Builder {
 public:
  Builder(std::string_view parser, const ojson& tools)
      : parser_(parser), format_(tool_call_format(parser, tools)), conv_(ojson::object()) {}

  std::string call(const ojson& fn, int index) {
    const std::string name = fn.value("name", "");
    const ojson parameters = fn.value("parameters", ojson::object());
    conv_.set_root(parameters);
    const std::string id = fmt::format("tool{}", index);
    if (parser_ == "deepseek_v31") {
      // The arguments are one JSON object (any object when the tool declares no schema).
      const bool typed = parameters.contains("type") || parameters.contains("properties") ||
                         parameters.contains("$ref") || parameters.contains("anyOf");
      const std::string args =
          typed ? conv_.visit(parameters, id + "-args") : conv_.primitive("object");
      return conv_.add_rule(id, gbnf_literal(format_.call_begin + name + "<｜tool▁sep｜>") + " " +
                                    args + " " + gbnf_literal(format_.call_end));
    }
    std::vector<bool> required;
    const std::vector<Param> params = params_of(parameters, required);
    std::string body;
    for (size_t i = 0; i < params.size(); ++i) {
      const Param& p = params[i];
      const bool bare = value_type(p.schema) == "string" || value_type(p.schema).empty();
      const std::string value =
          bare ? bare_string(p.schema) : conv_.visit(p.schema, id + "-" + p.key);
      std::string kv;
      if (parser_ == "glm47") {
        kv = gbnf_literal("<arg_key>" + p.key + "</arg_key><arg_value>") + " " + value + " " +
             gbnf_literal("</arg_value>");
      } else {  // deepseek_v32
        kv = gbnf_literal(fmt::format("<｜DSML｜parameter name=\"{}\" string=\"{}\">", p.key,
                                      bare ? "true" : "false")) +
             " " + value + " " + gbnf_literal("</｜DSML｜parameter>\n");
      }
      body += " (" + kv + ")" + (required[i] ? "" : "?");
    }
    if (parser_ == "glm47")
      return conv_.add_rule(id, gbnf_literal(format_.call_begin + name) + body + " " +
                                    gbnf_literal(format_.call_end));
    return conv_.add_rule(id, gbnf_literal(format_.call_begin + " name=\"" + name + "\">\n") +
                                  body + " " + gbnf_literal(format_.call_end + "\n"));
  }

  std::string finish(const std::string& calls, bool parallel) {
    const std::string many = "(" + calls + ")" + (parallel ? "+" : "");
    std::string root = many;
    if (!format_.section_begin.empty()) {
      const std::string sep = parser_ == "deepseek_v32" ? "\n" : "";
      root = gbnf_literal(format_.section_begin + sep) + " " + many + " " +
             gbnf_literal(format_.section_end);
    }
    return conv_.gbnf() + "root ::= " + root + "\n";
  }

 private:
  std::string parser_;
  ToolCallFormat format_;
  grammar::JsonSchemaConverter conv_;
};

}  // namespace

std::string tool_call_gbnf(std::string_view parser, const ojson& tools, const std::string& only,
                           bool parallel) {
  if (parser != "glm47" && parser != "deepseek_v31" && parser != "deepseek_v32")
    raise<InvalidArgument>("no tool-call grammar for parser '{}'", parser);
  Builder b(parser, tools);
  std::string calls;
  int index = 0;
  for (const ojson& t : tools) {
    const ojson fn = t.contains("function") ? t["function"] : t;
    if (!only.empty() && fn.value("name", "") != only) continue;
    calls += (calls.empty() ? "" : " | ") + b.call(fn, index++);
  }
  if (calls.empty()) raise<InvalidArgument>("no tool named '{}'", only);
  return b.finish(calls, parallel);
}

}  // namespace mls::chat
