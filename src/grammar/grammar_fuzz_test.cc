// Random walks through the allowed-token masks: over the demo model's vocabulary, each walk
// takes random allowed tokens for a while and then the allowed token that brings it closest to
// a complete output; every output must be accepted by the grammar and parse as JSON that the
// test's own validator accepts under the schema. ~2 s.
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_compiler.h"
#include "grammar/test_support.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const char* const kFuzzSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
        "age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b","c"]},
        "maxItems":4},"address":{"type":"object","properties":{"city":{"type":"string"},
        "zip":{"type":"string","minLength":2,"maxLength":3}},"required":["city"]}},
        "required":["name","address"]})",
    R"({"anyOf":[{"type":"number"},{"type":"array","items":{"type":["boolean","null"]},
        "minItems":2,"maxItems":3},{"type":"object","properties":{"k":{"const":[1,"x"]}},
        "additionalProperties":{"type":"integer"}}]})",
    R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}},"required":["v"]}},
        "$ref":"#/$defs/t"})",
    R"({"type":"object","properties":{"free":{}}, "additionalProperties": true})",
};

TEST(GrammarFuzz, RandomAllowedWalksProduceValidDocuments) {
  const auto v = test::demo_vocab();
  GrammarCompiler gc(v);
  std::vector<uint32_t> mask(static_cast<size_t>(v->mask_words()));
  std::mt19937 rng(12345);
  int documents = 0;
  for (const char* text : kFuzzSchemas) {
    const ojson schema = ojson::parse(text);
    const test::SchemaValidator validator(schema);
    auto g = gc.json_schema(schema);
    std::map<int32_t, int> dist;
    const auto distance = [&](int32_t s) {
      const auto it = dist.find(s);
      if (it != dist.end()) return it->second;
      return dist[s] = test::distance_to_end(*g, s);
    };
    for (int walk = 0; walk < 40; ++walk) {
      int32_t st = g->initial_state();
      std::string out;
      const int wander = static_cast<int>(rng() % 30);
      for (int step = 0; step < 400; ++step) {
        if (g->accepting(st) && (step >= wander || g->terminated(st))) break;
        g->fill_mask(st, mask);
        std::vector<int32_t> ok;
        for (int32_t t = 0; t < v->size(); ++t)
          if (test::allowed(mask, t)) ok.push_back(t);
        ASSERT_FALSE(ok.empty()) << out;
        int32_t pick = ok[rng() % ok.size()];
        if (step >= wander) {  // head for the end: the allowed token leaving the least to write
          int best = 1 << 30;
          for (int32_t t : ok) {
            const int d = distance(g->next(st, v->token(t).bytes));
            ASSERT_GE(d, 0) << "token " << t << " leads to a dead end after " << out;
            if (d < best || (d == best && rng() % 2)) {
              best = d;
              pick = t;
            }
          }
        }
        out += v->token(pick).bytes;
        st = g->next(st, v->token(pick).bytes);
        ASSERT_NE(st, CompiledGrammar::kDead);
      }
      ASSERT_TRUE(g->accepting(st)) << out;
      const ojson doc = ojson::parse(out, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << "not JSON: " << out;
      EXPECT_TRUE(validator.valid(doc)) << "schema " << text << "\ndocument " << out;
      ++documents;
    }
  }
  EXPECT_EQ(documents, 160);
}

}  // namespace
}  // namespace mls::grammar
