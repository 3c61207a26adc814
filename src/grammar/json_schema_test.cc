// JSON Schema conformance: for each schema, documents the schema accepts must be matched by the
// grammar and documents it rejects must not be (checked against the test's own validator too,
// so that a case cannot be wrong in the same way as the converter); unsupported keywords are
// errors that name the keyword.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/grammar_compiler.h"
#include "grammar/grammar_error.h"
#include "grammar/test_support.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

struct Case {
  const char* name;
  const char* schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"nested",
       R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
           "address":{"type":"object","properties":{"city":{"type":"string"},
           "zip":{"type":"string","minLength":5,"maxLength":5}},"required":["city"]}},
           "required":["name","address"]})",
       {R"({"name": "Ann", "address": {"city": "Rome"}})",
        R"({"name":"Ann","address":{"city":"Rome","zip":"00100"},"age":41})",
        "{\n  \"name\": \"\\u00e9\",\n  \"address\": {\"city\": \"\xE6\x97\xA5\"}\n}"},
       {R"({"name": "Ann"})", R"({"name": "Ann", "address": {"city": "Rome", "zip": "001"}})",
        R"({"name": "Ann", "age": 4.5, "address": {"city": "Rome"}})",
        R"({"name": "Ann", "address": {"city": "Rome"}, "extra": 1})",
        R"({"address": {"city": "Rome"}, "name": "Ann"})"}},
      {"enums_and_const",
       R"({"type":"object","properties":{"color":{"enum":["red","green",3,null]},
           "kind":{"const":"fruit"},"ok":{"type":"boolean"}},"required":["color","kind","ok"]})",
       {R"({"color": "red", "kind": "fruit", "ok": true})",
        R"({"color": 3, "kind": "fruit", "ok": false})",
        R"({"color": null, "kind": "fruit", "ok": true})"},
       {R"({"color": "blue", "kind": "fruit", "ok": true})",
        R"({"color": "red", "kind": "veg", "ok": true})",
        R"({"color": "red", "kind": "fruit", "ok": 1})"}},
      {"arrays",
       R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},
           "minItems":1,"maxItems":3},"point":{"type":"array","prefixItems":[{"type":"number"},
           {"type":"number"}]},"any":{"type":"array"}},"required":["tags"]})",
       {R"({"tags": ["a"]})", R"({"tags": ["a", "b", "c"], "point": [1.5, -2e3]})",
        R"({"tags": ["x"], "any": [1, "two", [3], {"four": 4}, null]})"},
       {R"({"tags": []})", R"({"tags": ["a", "b", "c", "d"]})", R"({"tags": [1]})",
        R"({"tags": ["a"], "point": [1]})"}},
      {"any_of",
       R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"x":{"type":"null"}},
           "required":["x"]},{"type":["string","null"],"maxLength":2}]})",
       {"12", "-7", R"({"x": null})", R"("ab")", "null"},
       {"1.5", R"({"x": 1})", R"("abc")", "true"}},
      {"refs_and_recursion",
       R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
           "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
           "$ref":"#/$defs/node"})",
       {R"({"v": 1, "next": null})", R"({"v": 1, "next": {"v": 2, "next": null}})"},
       {R"({"v": 1})", R"({"v": 1, "next": {"v": 2}})"}},
      {"optional_members_in_order",
       R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
           "c":{"type":"integer"}},"additionalProperties":false})",
       {"{}", R"({"b": 2})", R"({"a": 1, "c": 3})", R"({"a": 1, "b": 2, "c": 3})"},
       {R"({"c": 3, "a": 1})", R"({"d": 4})", R"({"a": 1,})"}},
      {"additional_properties",
       R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
           "additionalProperties":{"type":"string"}})",
       {R"({"id": 1})", R"({"id": 1, "x": "y", "z": ""})"},
       {R"({"id": 1, "x": 2})", R"({"x": "y"})"}},
      {"numbers",
       R"({"type":"array","items":{"type":"number"}})",
       {"[0, -0, 1.25, 3e10, -2.5E-3, 1234567890123456]"},
       {"[01]", "[1.]", "[.5]", "[+1]", "[1e]", "[12345678901234567]", "[1e100]", "[NaN]"}},
      {"strings",
       R"({"type":"string","minLength":2,"maxLength":4})",
       {R"("ab")", R"("\n\"\\x")", "\"\xC3\xA9\xC3\xA9\"", R"("\u0041b")"},
       {R"("a")", R"("abcde")", "\"a\nb\"", R"("\q")"}},
      {"true_schema", "true", {"1", R"({"a": [true]})", R"("s")"}, {"", "{", "tru"}},
  };
  return c;
}

TEST(JsonSchema, ConformanceCases) {
  GrammarCompiler gc(test::byte_vocab());
  for (const Case& c : cases()) {
    const ojson schema = ojson::parse(c.schema);
    const test::SchemaValidator validator(schema);
    auto g = gc.json_schema(schema);
    for (const std::string& doc : c.valid) {
      EXPECT_TRUE(test::matches(*g, doc)) << c.name << ": " << doc;
      EXPECT_TRUE(validator.valid(ojson::parse(doc))) << c.name << " (case error): " << doc;
    }
    for (const std::string& doc : c.invalid) {
      EXPECT_FALSE(test::matches(*g, doc)) << c.name << ": " << doc;
      const ojson parsed = ojson::parse(doc, nullptr, false);
      // Rejected either by JSON itself or by the schema — or it is a shape the grammar
      // deliberately narrows (member order, digit counts), marked by validating here.
      if (!parsed.is_discarded() && validator.valid(parsed)) {
        EXPECT_TRUE(std::string(c.name) == "optional_members_in_order" ||
                    std::string(c.name) == "numbers" || std::string(c.name) == "nested")
            << c.name << ": " << doc << " is valid JSON Schema-wise";
      }
    }
  }
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  GrammarCompiler gc(test::byte_vocab());
  for (const char* kw : {"pattern", "format", "minimum", "maximum", "multipleOf", "not",
                         "uniqueItems", "patternProperties", "if", "minProperties"}) {
    const ojson schema = {{"type", "object"},
                          {"properties", {{"x", {{"type", "string"}, {kw, 1}}}}}};
    try {
      gc.json_schema(schema);
      ADD_FAILURE() << kw << " was accepted";
    } catch (const GrammarError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + kw + "'"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(gc.json_schema(ojson::parse(R"({"allOf": [{}, {}]})")), GrammarError);
  EXPECT_THROW(gc.json_schema(ojson::parse(R"({"$ref": "http://x/y"})")), GrammarError);
  EXPECT_THROW(gc.json_schema(ojson::parse(R"({"$ref": "#/$defs/none"})")), GrammarError);
  EXPECT_THROW(gc.json_schema(ojson::parse(R"({"type": "decimal"})")), GrammarError);
  EXPECT_THROW(gc.json_schema(ojson::parse("false")), GrammarError);
  EXPECT_THROW(gc.json_schema(ojson::parse(R"({"type": "string", "maxLength": -1})")),
               GrammarError);
  // A required self-reference has no finite instance.
  EXPECT_THROW(gc.json_schema(ojson::parse(
                   R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})")),
               GrammarError);
  // Annotations and extensions are ignored.
  EXPECT_NO_THROW(gc.json_schema(ojson::parse(
      R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"T","description":"d",
          "type":"object","properties":{"a":{"type":"string","default":"x","examples":["y"],
          "x-vendor":1}}})")));
}

// vLLM's guided_whitespace_pattern: the regex becomes the whitespace between JSON tokens.
TEST(JsonSchema, WhitespacePatternReplacesTheDefault) {
  GrammarCompiler gc(test::byte_vocab());
  const ojson schema = ojson::parse(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},
          "required":["a"]})");
  auto tight = gc.json_schema(schema, "[ ]?");
  EXPECT_TRUE(test::matches(*tight, R"({"a":[1,2]})"));
  EXPECT_TRUE(test::matches(*tight, R"({ "a" : [ 1 , 2 ] })"));
  EXPECT_FALSE(test::matches(*tight, "{\n\"a\":[1]}"));
  EXPECT_FALSE(test::matches(*tight, R"({"a":  [1]})"));
  auto usual = gc.json_schema(schema);
  EXPECT_NE(tight, usual);
  EXPECT_TRUE(test::matches(*usual, "{\n  \"a\": [1]\n}"));
  auto lines = gc.json_object("\n*");
  EXPECT_TRUE(test::matches(*lines, "{\n\n\"k\":\n1}"));
  EXPECT_FALSE(test::matches(*lines, R"({ "k": 1})"));
  EXPECT_NO_THROW(json_whitespace("[ \\t\\n\\r]{0,4}"));
  EXPECT_NO_THROW(json_whitespace("()"));  // none at all
  for (const char* bad : {"[ a]", "\\s", "( *)*", "(", ".?"})
    EXPECT_THROW(json_whitespace(bad), GrammarError) << bad;
}

TEST(JsonSchema, JsonObjectModeIsAnyObject) {
  GrammarCompiler gc(test::byte_vocab());
  auto g = gc.json_object();
  for (const char* ok : {"{}", R"({"a": {"b": [1, {"c": null}]}})", "{ \"x\" : \"y\" }"})
    EXPECT_TRUE(test::matches(*g, ok)) << ok;
  for (const char* bad : {"[]", "1", R"({"a"})", R"({a: 1})", "{} {}"})
    EXPECT_FALSE(test::matches(*g, bad)) << bad;
}

}  // namespace
}  // namespace mls::grammar
