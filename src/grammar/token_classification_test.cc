// Token sets in both forms; the compile-time token classification: what it decides at one
// position (accepted, rejected, context-dependent), and the masks built from it equal the reference
// mask (every token tried through the DFA) on the states of random walks, for JSON Schemas (nested,
// enums, arrays, anyOf, length limits, recursion), JSON-object mode, a regex, a choice list and
// GBNF, over the demo model's vocabulary and a random multi-byte one. ~3 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "grammar/grammar_compiler.h"
#include "grammar/test_support.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// Both forms (ids, bitset) OR exactly their tokens into a mask that already holds others; a set
// made from a mask takes the form a set made from its ids takes.
TEST(TokenSet, EveryFormAddsAndCopiesExactlyItsTokens) {
  const auto v = test::random_vocab(2000, 3);
  std::vector<int32_t> matchable;
  for (int32_t t = 0; t < v->size(); ++t)
    if (v->token(t).matchable) matchable.push_back(t);
  std::mt19937 rng(5);
  for (size_t n : {size_t{0}, size_t{1}, size_t{40}, size_t{70}, matchable.size() / 2,
                   matchable.size() - 60, matchable.size() - 1, matchable.size()}) {
    std::vector<int32_t> ids = matchable;
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(n);
    std::vector<uint32_t> before(static_cast<size_t>(v->mask_words()), 0u);
    for (int k = 0; k < 50; ++k) {
      const auto t = static_cast<int32_t>(rng() % v->size());
      before[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
    }
    std::vector<uint32_t> expected = before;
    for (int32_t t : ids) expected[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
    const TokenSet set(ids, *v);
    EXPECT_EQ(set.size(), n);
    std::vector<uint32_t> copied = before;
    set.add_to(before);
    EXPECT_EQ(before, expected) << n << " tokens";
    std::vector<uint32_t> alone(static_cast<size_t>(v->mask_words()), 0u);
    for (int32_t t : ids) alone[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
    set.copy_to(copied);
    EXPECT_EQ(copied, alone) << n << " tokens";
    EXPECT_LE(set.bytes(), static_cast<size_t>(v->mask_words()) * sizeof(uint32_t));
    // Built from a mask: the same tokens, in the same form.
    const TokenSet from_mask = TokenSet::from_mask(alone, *v);
    EXPECT_EQ(from_mask.size(), n);
    EXPECT_EQ(from_mask.bytes(), set.bytes()) << n << " tokens";
    std::vector<uint32_t> remade(alone.size(), ~0u);
    from_mask.copy_to(remade);
    EXPECT_EQ(remade, alone) << n << " tokens";
  }
}

// Item is referenced from two places, so after its closing quote the stack decides what follows.
TEST(TokenClassification, SplitsTokensAtAPosition) {
  const auto v =
      test::byte_vocab({"abc", "ab\"", "\",", "\"]", "\"x", "\",\"", "\"]x", "a\",\"b", "\"", "]"});
  const auto id = [&](std::string_view s) {
    for (int32_t t = 0; t < v->size(); ++t)
      if (v->token(t).bytes == s) return t;
    ADD_FAILURE() << "no token " << s;
    return int32_t{0};
  };
  const Grammar gr = Grammar::from_rules(parse_gbnf(R"g(
root ::= "[" item ("," item)* "]"
item ::= "\"" [a-z]* "\""
)g"));
  const TokenClassification tc(gr, *v);
  int32_t letters = -1, close = -1;  // the positions of [a-z] and of the closing quote
  for (size_t p = 0; p < gr.elements().size(); ++p) {
    const auto& el = gr.elements()[p];
    if (el.kind != Grammar::kSet) continue;
    if (gr.sets()[el.arg].test('q')) letters = static_cast<int32_t>(p);
    if (gr.sets()[el.arg].test('"')) close = static_cast<int32_t>(p);  // item's second quote
  }
  ASSERT_GE(letters, 0);
  ASSERT_GE(close, 0);
  const auto check = [&](int32_t pos, std::vector<std::string_view> accepted,
                         std::vector<std::string_view> dependent,
                         std::vector<std::string_view> rejected) {
    std::vector<uint32_t> acc(static_cast<size_t>(v->mask_words()), 0u);
    tc.accepted(pos).add_to(acc);
    const auto& dep = tc.context_dependent(pos);
    const auto in_dep = [&](int32_t t) { return std::binary_search(dep.begin(), dep.end(), t); };
    for (std::string_view s : accepted) {
      EXPECT_TRUE(test::allowed(acc, id(s))) << pos << ": " << s;
      EXPECT_FALSE(in_dep(id(s))) << pos << ": " << s;
    }
    for (std::string_view s : dependent) {
      EXPECT_FALSE(test::allowed(acc, id(s))) << pos << ": " << s;
      EXPECT_TRUE(in_dep(id(s))) << pos << ": " << s;
    }
    for (std::string_view s : rejected) {
      EXPECT_FALSE(test::allowed(acc, id(s))) << pos << ": " << s;
      EXPECT_FALSE(in_dep(id(s))) << pos << ": " << s;
    }
  };
  // Inside the string, up to its closing quote (the end of item's own rule): accepted; past it
  // into what follows an item somewhere: context-dependent; what nothing can follow: rejected.
  check(letters, {"a", "z", "abc", "ab\""}, {"a\",\"b"}, {"\"", "\"x", "]", "A", "<eos>"});
  check(close, {"\""}, {"\",", "\"]", "\",\""}, {"\"x", "\"]x", "a", "]"});
  EXPECT_EQ(tc.stats().positions, 6u);  // [ ] , [a-z] and the two quotes
}

const char* const kClassifiedSchemas[] = {
    // nested
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "address":{"type":"object","properties":{"city":{"type":"string"},
        "geo":{"type":"object","properties":{"lat":{"type":"number"},"lon":{"type":"number"}},
        "required":["lat","lon"]}},"required":["city","geo"]}},"required":["name","address"]})",
    // enums
    R"({"type":"object","properties":{"color":{"enum":["red","green","blue"]},
        "shape":{"const":"circle"},"ok":{"type":"boolean"}},"required":["color","shape","ok"]})",
    // arrays, length limits
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string",
        "maxLength":5},"minItems":1,"maxItems":4},"m":{"type":"array","items":{"type":"array",
        "items":{"type":"integer"}}},"id":{"type":"string","minLength":2,"maxLength":3}},
        "required":["tags","m","id"]})",
    // anyOf
    R"({"type":"object","properties":{"items":{"type":"array","items":{"anyOf":[
        {"type":"object","properties":{"kind":{"const":"num"},"value":{"type":"number"}},
         "required":["kind","value"]},
        {"type":"object","properties":{"kind":{"const":"text"},"value":{"type":"string"}},
         "required":["kind","value"]},{"type":"null"}]}}},"required":["items"]})",
    // recursion, additional properties
    R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}},"required":["v"],
        "additionalProperties":{"type":["boolean","null"]}}},"$ref":"#/$defs/t"})",
};

TEST(TokenClassification, MasksEqualTheReferenceOnRandomStates) {
  int compared = 0;
  for (const auto& v : {test::demo_vocab(), test::random_vocab(3000, 18)}) {
    GrammarCompiler gc(v);
    std::vector<std::shared_ptr<CompiledGrammar>> grammars;
    for (const char* s : kClassifiedSchemas) grammars.push_back(gc.json_schema(ojson::parse(s)));
    grammars.push_back(gc.json_object());
    grammars.push_back(gc.regex(R"(([a-z]+|\d{1,3})( [a-zé]*\.)?\s*(#|é+))"));
    grammars.push_back(gc.choice({"yes", "no", "no way", "\"quoted\""}));
    grammars.push_back(gc.gbnf(R"g(
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= num | "(" ws expr ws ")"
num  ::= [0-9]+ ("." [0-9]+)?
ws   ::= " "?
)g"));
    std::mt19937 rng(99);
    std::vector<uint32_t> mask(static_cast<size_t>(v->mask_words()));
    for (auto& g : grammars) {
      for (int walk = 0; walk < 6; ++walk) {
        int32_t st = g->initial_state();
        for (int step = 0; step < 40 && !g->terminated(st); ++step) {
          if (g->accepting(st) && rng() % 8 == 0) break;
          g->fill_mask(st, mask);  // before the reference creates any state or transition
          const std::vector<uint32_t> ref = test::reference_mask(*g, st);
          ASSERT_EQ(mask, ref) << "walk " << walk << " step " << step;
          ++compared;
          std::vector<int32_t> ok;
          for (int32_t t = 0; t < v->size(); ++t)
            if (test::allowed(mask, t)) ok.push_back(t);
          ASSERT_FALSE(ok.empty());
          st = g->next(st, v->token(ok[rng() % ok.size()]).bytes);
          ASSERT_NE(st, CompiledGrammar::kDead);
        }
      }
    }
  }
  EXPECT_GT(compared, 1000);
}

}  // namespace
}  // namespace mls::grammar
