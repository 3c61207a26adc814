#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <set>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar.h"
#include "grammar/grammar_error.h"
#include "grammar/regex_parser.h"
#include "grammar/utf8_ranges.h"
#include "tokenizer/utf8.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const std::map<std::string, std::pair<std::string, std::vector<std::string>>>& primitives() {
  static const std::map<std::string, std::pair<std::string, std::vector<std::string>>> p = {
      {"space", {R"(| " " | "\n"{1,2} [ \t]{0,20})", {}}},
      {"boolean", {R"(("true" | "false") space)", {"space"}}},
      {"null", {R"("null" space)", {"space"}}},
      {"integral-part", {R"([0] | [1-9] [0-9]{0,15})", {}}},
      {"decimal-part", {R"([0-9]{1,16})", {}}},
      {"integer", {R"(("-"? integral-part) space)", {"integral-part", "space"}}},
      {"number",
       {R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})? space)",
        {"integral-part", "decimal-part", "space"}}},
      {"char", {R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))", {}}},
      {"string", {R"("\"" char* "\"" space)", {"char", "space"}}},
      {"value",
       {"object | array | string | number | boolean | null",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)",
        {"string", "value", "space"}}},
      {"array", {R"("[" space ( value ("," space value)* )? "]" space)", {"value", "space"}}},
  };
  return p;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title",    "description", "default",  "examples",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return a;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> s = {
      "type",     "properties", "required",    "additionalProperties",
      "enum",     "const",      "anyOf",       "oneOf",
      "allOf",    "items",      "prefixItems", "minItems",
      "maxItems", "minLength",  "maxLength",   "$ref"};
  return s;
}

bool json_space(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The first character `e` may match that is not JSON whitespace, if any.
std::optional<char32_t> non_space(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kBytes:
      for (char c : e.bytes)
        if (!json_space(static_cast<unsigned char>(c))) return static_cast<unsigned char>(c);
      return std::nullopt;
    case Expr::Kind::kClass:
      for (const auto& [lo, hi] : normalise_ranges(e.ranges, e.negated))
        for (char32_t c = lo; c <= hi; ++c)
          if (!json_space(c)) return c;
      return std::nullopt;
    default:
      for (const Expr& item : e.items)
        if (const auto c = non_space(item)) return c;
      return std::nullopt;
  }
}

int64_t non_negative(const ojson& schema, const char* key, int64_t fallback) {
  if (!schema.contains(key)) return fallback;
  const ojson& v = schema[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    raise<GrammarError>("JSON Schema: '{}' must be a non-negative integer", key);
  if (v.get<int64_t>() > 100000)
    raise<GrammarError>("JSON Schema: '{}' {} is too large (at most 100000)", key,
                        v.get<int64_t>());
  return v.get<int64_t>();
}

}  // namespace

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else if (u < 0x20 || u == 0x7F)
      out += fmt::format("\\x{:02X}", u);
    else
      out += c;
  }
  return out + "\"";
}

std::string gbnf_name(std::string_view s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return out.empty() ? "x" : out;
}

std::string gbnf_repeat(int64_t min, int64_t max) {
  if (min == 1 && max == 1) return "";
  if (min == 0 && max == 1) return "?";
  if (max < 0) return min == 0 ? "*" : min == 1 ? "+" : fmt::format("{{{},}}", min);
  if (min == max) return fmt::format("{{{}}}", min);
  return fmt::format("{{{},{}}}", min, max);
}

JsonSchemaConverter::JsonSchemaConverter(const ojson& root) : root_(root) {}

void JsonSchemaConverter::set_root(const ojson& root) {
  root_ = root;
  refs_.clear();
}

std::string JsonSchemaConverter::add_rule(const std::string& name, const std::string& body) {
  const std::string base = gbnf_name(name);
  std::string n = base;
  for (int i = 1;; ++i) {
    const auto it = rules_.find(n);
    if (it == rules_.end()) {
      rules_[n] = body;
      return n;
    }
    if (it->second == body) return n;
    n = fmt::format("{}{}", base, i);
  }
}

std::string JsonSchemaConverter::primitive(const std::string& name) {
  const auto& p = primitives().at(name);
  if (rules_.count(name)) return name;
  rules_[name] = p.first;
  for (const std::string& dep : p.second) primitive(dep);
  return name;
}

std::string JsonSchemaConverter::gbnf() const {
  std::string out;
  for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
  return out;
}

std::string JsonSchemaConverter::resolve_ref(const std::string& ref) {
  const auto it = refs_.find(ref);
  if (it != refs_.end()) return it->second;
  if (ref.empty() || ref[0] != '#')
    raise<GrammarError>("JSON Schema: '$ref' '{}' is not a local reference (#/$defs/...)", ref);
  const ojson* target = &root_;
  std::string name = "root-ref";
  size_t pos = 1;
  while (pos < ref.size()) {
    if (ref[pos] != '/') raise<GrammarError>("JSON Schema: '$ref' '{}' is malformed", ref);
    const size_t next = std::min(ref.find('/', pos + 1), ref.size());
    std::string part = ref.substr(pos + 1, next - pos - 1);
    std::string unescaped;  // JSON Pointer: ~1 is '/', ~0 is '~'
    for (size_t k = 0; k < part.size(); ++k) {
      if (part[k] == '~' && k + 1 < part.size() && (part[k + 1] == '0' || part[k + 1] == '1')) {
        unescaped += part[k + 1] == '1' ? '/' : '~';
        ++k;
      } else {
        unescaped += part[k];
      }
    }
    part = std::move(unescaped);
    if (!target->is_object() || !target->contains(part))
      raise<GrammarError>("JSON Schema: '$ref' '{}' points nowhere", ref);
    target = &(*target)[part];
    name = part;
    pos = next;
  }
  // Reserve the name first: a recursive schema refers to itself.
  std::string rule = gbnf_name("ref-" + name);
  for (int i = 1; rules_.count(rule); ++i) rule = fmt::format("{}{}", gbnf_name("ref-" + name), i);
  rules_[rule] = "\"\"";
  refs_[ref] = rule;
  rules_[rule] = visit(*target, rule + "-body");
  return rule;
}

std::string JsonSchemaConverter::visit(const ojson& schema, const std::string& name) {
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) raise<GrammarError>("JSON Schema: 'false' matches nothing");
    return primitive("value");
  }
  if (!schema.is_object()) raise<GrammarError>("JSON Schema: a schema must be an object");
  for (const auto& [key, v] : schema.items()) {
    if (supported().count(key) || annotations().count(key) || key.rfind("x-", 0) == 0) continue;
    raise<GrammarError>("JSON Schema keyword '{}' is not supported", key);
  }
  if (schema.contains("$ref")) {
    if (!schema["$ref"].is_string()) raise<GrammarError>("JSON Schema: '$ref' must be a string");
    return resolve_ref(schema["$ref"].get<std::string>());
  }
  if (schema.contains("const"))
    return add_rule(name, gbnf_literal(schema["const"].dump()) + " " + primitive("space"));
  if (schema.contains("enum")) {
    const ojson& e = schema["enum"];
    if (!e.is_array() || e.empty())
      raise<GrammarError>("JSON Schema: 'enum' must be a non-empty list");
    std::string body = "(";
    for (size_t i = 0; i < e.size(); ++i) body += (i ? " | " : "") + gbnf_literal(e[i].dump());
    return add_rule(name, body + ") " + primitive("space"));
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    const ojson& alts = schema[key];
    if (!alts.is_array() || alts.empty())
      raise<GrammarError>("JSON Schema: '{}' must be a non-empty list", key);
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i)
      body += (i ? " | " : "") + visit(alts[i], fmt::format("{}-{}", name, i));
    return add_rule(name, body);
  }
  if (schema.contains("allOf")) {
    const ojson& all = schema["allOf"];
    if (!all.is_array() || all.size() != 1)
      raise<GrammarError>("JSON Schema keyword 'allOf' is only supported with one member");
    return visit(all[0], name);
  }
  ojson type = schema.value("type", ojson());
  if (type.is_array()) {
    std::string body;
    for (size_t i = 0; i < type.size(); ++i) {
      ojson one = schema;
      one["type"] = type[i];
      body += (i ? " | " : "") + visit(one, fmt::format("{}-{}", name, i));
    }
    if (body.empty()) raise<GrammarError>("JSON Schema: 'type' must not be an empty list");
    return add_rule(name, body);
  }
  if (type.is_null()) {
    if (schema.contains("properties") || schema.contains("additionalProperties"))
      type = "object";
    else if (schema.contains("items") || schema.contains("prefixItems"))
      type = "array";
    else if (schema.contains("minLength") || schema.contains("maxLength"))
      type = "string";
    else
      return primitive("value");
  }
  if (!type.is_string()) raise<GrammarError>("JSON Schema: 'type' must be a string or a list");
  const std::string t = type.get<std::string>();
  if (t == "object") return object_rule(schema, name);
  if (t == "array") return array_rule(schema, name);
  if (t == "string") return string_rule(schema, name);
  if (t == "integer" || t == "number" || t == "boolean" || t == "null") return primitive(t);
  raise<GrammarError>("JSON Schema: unknown type '{}'", t);
}

std::string JsonSchemaConverter::string_rule(const ojson& schema, const std::string& name) {
  const int64_t mn = non_negative(schema, "minLength", 0);
  const int64_t mx = non_negative(schema, "maxLength", -1);
  if (mn == 0 && mx < 0) return primitive("string");
  if (mx >= 0 && mx < mn) raise<GrammarError>("JSON Schema: 'maxLength' is below 'minLength'");
  primitive("char");
  return add_rule(name, "\"\\\"\" char" + gbnf_repeat(mn, mx) + " \"\\\"\" " + primitive("space"));
}

std::string JsonSchemaConverter::array_rule(const ojson& schema, const std::string& name) {
  const std::string sp = primitive("space");
  if (schema.contains("prefixItems")) {
    const ojson& items = schema["prefixItems"];
    if (!items.is_array()) raise<GrammarError>("JSON Schema: 'prefixItems' must be a list");
    std::string body = "\"[\" " + sp;
    for (size_t i = 0; i < items.size(); ++i)
      body += (i ? " \",\" " + sp + " " : " ") + visit(items[i], fmt::format("{}-{}", name, i));
    return add_rule(name, body + " \"]\" " + sp);
  }
  const std::string item =
      schema.contains("items") ? visit(schema["items"], name + "-item") : primitive("value");
  const int64_t mn = non_negative(schema, "minItems", 0);
  const int64_t mx = non_negative(schema, "maxItems", -1);
  if (mx >= 0 && mx < mn) raise<GrammarError>("JSON Schema: 'maxItems' is below 'minItems'");
  std::string list;
  const std::string more = "(\",\" " + sp + " " + item + ")";
  if (mx == 0) {
    list = "";
  } else if (mn == 0) {
    list = "(" + item + " " + more + gbnf_repeat(0, mx < 0 ? -1 : mx - 1) + ")?";
  } else {
    list = item + " " + more + gbnf_repeat(mn - 1, mx < 0 ? -1 : mx - 1);
  }
  return add_rule(name, "\"[\" " + sp + " " + list + " \"]\" " + sp);
}

std::string JsonSchemaConverter::object_rule(const ojson& schema, const std::string& name) {
  const std::string sp = primitive("space");
  const ojson props = schema.value("properties", ojson::object());
  if (!props.is_object()) raise<GrammarError>("JSON Schema: 'properties' must be an object");
  std::set<std::string> required;
  if (schema.contains("required")) {
    if (!schema["required"].is_array())
      raise<GrammarError>("JSON Schema: 'required' must be a list");
    for (const ojson& r : schema["required"]) {
      if (!r.is_string()) raise<GrammarError>("JSON Schema: 'required' must list strings");
      required.insert(r.get<std::string>());
    }
  }
  // key: rule of `"key": value` for each property, required ones first.
  std::vector<std::pair<std::string, std::string>> req, opt;
  for (const auto& [key, sub] : props.items()) {
    const std::string kv =
        add_rule(name + "-" + key + "-kv", gbnf_literal(ojson(key).dump()) + " " + sp + " \":\" " +
                                               sp + " " + visit(sub, name + "-" + key));
    (required.count(key) ? req : opt).emplace_back(key, kv);
  }
  for (const std::string& r : required)
    if (!props.contains(r)) {
      const std::string kv =
          add_rule(name + "-" + r + "-kv", gbnf_literal(ojson(r).dump()) + " " + sp + " \":\" " +
                                               sp + " " + primitive("value"));
      req.emplace_back(r, kv);
    }
  const ojson addl = schema.value("additionalProperties", ojson());
  if (addl.is_object() || (addl.is_boolean() && addl.get<bool>())) {
    const std::string value =
        addl.is_object() ? visit(addl, name + "-additional") : primitive("value");
    opt.emplace_back(
        "*", add_rule(name + "-additional-kv", primitive("string") + " \":\" " + sp + " " + value));
  }
  std::string body = "\"{\" " + sp;
  for (size_t i = 0; i < req.size(); ++i) body += (i ? " \",\" " + sp + " " : " ") + req[i].second;
  if (!opt.empty()) {
    // Any in-order subset of the optional members: alternative i starts with member i, and each
    // later one may follow (llama.cpp's construction, one parse per subset).
    std::function<std::string(size_t, bool)> from = [&](size_t i, bool first_optional) {
      const auto& [key, kv] = opt[i];
      const std::string comma_kv = "(\",\" " + sp + " " + kv + ")";
      std::string r = first_optional ? comma_kv + (key == "*" ? "*" : "?")
                                     : kv + (key == "*" ? " " + comma_kv + "*" : "");
      if (i + 1 < opt.size()) r += " " + add_rule(name + "-" + key + "-rest", from(i + 1, true));
      return r;
    };
    body += " (";
    if (!req.empty()) body += " \",\" " + sp + " (";
    for (size_t i = 0; i < opt.size(); ++i) body += (i ? " | " : " ") + from(i, false);
    if (!req.empty()) body += " )";
    body += " )?";
  }
  return add_rule(name, body + " \"}\" " + sp);
}

std::string json_schema_gbnf(const ojson& schema) {
  JsonSchemaConverter c(schema);
  const std::string top = c.visit(schema, "schema");
  return c.gbnf() + "root ::= " + top + "\n";
}

Expr json_whitespace(std::string_view pattern) {
  Expr e = parse_regex(pattern);
  if (const auto c = non_space(e)) {
    std::string shown;
    tok::append_utf8(shown, *c);
    raise<GrammarError>("the whitespace pattern may match {}, which is not JSON whitespace",
                        *c < 0x20 || *c == 0x7F ? fmt::format("U+{:04X}", static_cast<uint32_t>(*c))
                                                : "'" + shown + "'");
  }
  RuleSet alone;
  alone.rules.emplace_back("root", e);
  Grammar::from_rules(alone);  // left recursion, no finite match: GrammarError
  return e;
}

RuleSet json_rules(std::string_view gbnf, std::string_view whitespace_pattern) {
  RuleSet rs = parse_gbnf(gbnf);
  if (whitespace_pattern.empty()) return rs;
  const Expr ws = json_whitespace(whitespace_pattern);
  for (auto& [name, body] : rs.rules)
    if (name == "space") body = ws;
  return rs;
}

std::string json_object_gbnf() {
  JsonSchemaConverter c(ojson::object());
  const std::string top = c.primitive("object");
  return c.gbnf() + "root ::= " + top + "\n";
}

}  // namespace mls::grammar
