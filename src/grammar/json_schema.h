// JSON Schema → GBNF text (then parse_gbnf), in the manner of llama.cpp's
// json-schema-to-grammar. Supported: type (one or a list), properties, required,
// additionalProperties (absent or false: no other keys; true or a schema: any other string
// keys), enum, const, anyOf, oneOf (as anyOf: exclusivity is not enforced), allOf with one
// member, items, prefixItems (a fixed tuple), minItems, maxItems, minLength, maxLength, $ref to
// "#", "#/$defs/..." or "#/definitions/...", and annotations (title, description, default,
// examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, x-*), which are ignored.
// Any other keyword (pattern, format, minimum, ...) is a GrammarError naming it.
//
// Output shape: properties in declaration order with the required ones first, optional ones
// skippable; whitespace between tokens limited to one space or one or two newlines and up to
// 20 indentation characters; integer parts and fractions at most 16 digits, exponents at most
// 2 (a model cannot stall in an endless number or indentation, and every number fits a double).
// A whitespace pattern (vLLM's guided_whitespace_pattern) replaces that whitespace rule.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar/rule_set.h"

namespace mls::grammar {

class JsonSchemaConverter {
 public:
  // `root` is what "#" refers to.
  explicit JsonSchemaConverter(const nlohmann::ordered_json& root);
  // Another document's "#" (one grammar holding several schemas, e.g. one per tool).
  void set_root(const nlohmann::ordered_json& root);

  // A rule name matching the JSON values valid under `schema` (followed by optional space).
  std::string visit(const nlohmann::ordered_json& schema, const std::string& name);
  // Adds `name ::= body` (renamed when taken by another body); returns the name used.
  std::string add_rule(const std::string& name, const std::string& body);
  // One of the shared rules (space, value, string, integer, ...), added with what it uses.
  std::string primitive(const std::string& name);
  // All rules added so far, one per line.
  std::string gbnf() const;

 private:
  std::string object_rule(const nlohmann::ordered_json& schema, const std::string& name);
  std::string array_rule(const nlohmann::ordered_json& schema, const std::string& name);
  std::string string_rule(const nlohmann::ordered_json& schema, const std::string& name);
  std::string resolve_ref(const std::string& ref);

  nlohmann::ordered_json root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> refs_;
};

// A GBNF literal ("...") matching exactly `bytes` (UTF-8 text).
std::string gbnf_literal(std::string_view bytes);
// Rule names may only hold letters, digits and '-'.
std::string gbnf_name(std::string_view s);
// A length quantifier: "" for {1,1}, "?", "*", "+", "{m}", "{m,}" or "{m,n}".
std::string gbnf_repeat(int64_t min, int64_t max);

// Complete grammars (root rule "root").
std::string json_schema_gbnf(const nlohmann::ordered_json& schema);
std::string json_object_gbnf();

// A regex (regex_parser.h) for the whitespace between JSON tokens, checked: it may only match
// JSON whitespace (space, tab, newline, carriage return) and must form a valid grammar.
// GrammarError otherwise, naming the problem.
Expr json_whitespace(std::string_view pattern);
// The rules of `gbnf` (from json_schema_gbnf or json_object_gbnf) with the whitespace rule
// replaced by json_whitespace(`whitespace_pattern`), or unchanged when the pattern is empty.
RuleSet json_rules(std::string_view gbnf, std::string_view whitespace_pattern);

}  // namespace mls::grammar
