// What CompiledGrammar adds to the mask's exactness (token_classification_test.cc): byte
// classes, and the states precomputed at construction — a precomputed grammar masks exactly as
// one that builds every state on first use, meets no new state on outputs of a grammar whose
// states all fit the budget, and leaves an ambiguity error to the request that reaches it.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar_error.h"
#include "grammar/json_schema.h"
#include "grammar/test_support.h"

namespace mls::grammar {
namespace {

using ojson = nlohmann::ordered_json;

TEST(CompiledGrammar, ByteClassesGroupBytesEveryByteSetTreatsAlike) {
  auto g = test::compile(R"g(root ::= [a-c] "x" | [b-d] "y")g");
  // a, {b c}, d, x, y, and every other byte.
  EXPECT_EQ(g->num_byte_classes(), 6u);
  const int32_t s0 = g->initial_state();
  EXPECT_EQ(g->next(s0, 'b'), g->next(s0, 'c'));
  EXPECT_NE(g->next(s0, 'a'), g->next(s0, 'b'));
  EXPECT_NE(g->next(s0, 'd'), g->next(s0, 'b'));
  EXPECT_EQ(g->next(s0, 'z'), CompiledGrammar::kDead);
  EXPECT_TRUE(test::matches(*g, "ax"));
  EXPECT_TRUE(test::matches(*g, "cy"));
  EXPECT_FALSE(test::matches(*g, "ay"));
  EXPECT_FALSE(test::matches(*g, "dx"));
}

const char* const kPrecomputeSchemas[] = {
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},
        "minItems":1,"maxItems":3},"m":{"type":"array","items":{"type":"array",
        "items":{"type":"integer"}}}},"required":["tags","m"]})",
    R"({"type":"object","properties":{"items":{"type":"array","items":{"anyOf":[
        {"type":"object","properties":{"kind":{"const":"num"},"value":{"type":"number"}},
         "required":["kind","value"]},
        {"type":"object","properties":{"kind":{"const":"text"},"value":{"type":"string",
         "maxLength":4}},"required":["kind","value"]},{"type":"null"}]}}},
        "required":["items"]})",
};

TEST(CompiledGrammar, PrecomputedStatesMaskAsStatesBuiltOnFirstUse) {
  int compared = 0;
  for (const auto& v : {test::demo_vocab(), test::random_vocab(3000, 7)}) {
    for (const char* schema : kPrecomputeSchemas) {
      const RuleSet rules = json_rules(json_schema_gbnf(ojson::parse(schema)), "");
      CompiledGrammar eager(Grammar::from_rules(rules), v);
      CompiledGrammar lazy(Grammar::from_rules(rules), v, 0);
      const size_t precomputed = eager.num_states();
      const size_t eager_bytes = eager.memory_bytes(), lazy_bytes = lazy.memory_bytes();
      // Every reachable state fits the budget: outputs meet only precomputed states.
      ASSERT_LT(precomputed, CompiledGrammar::kPrecomputedStates);
      EXPECT_EQ(lazy.num_states(), 1u);
      std::mt19937 rng(5);
      std::vector<uint32_t> m_eager(static_cast<size_t>(v->mask_words()));
      std::vector<uint32_t> m_lazy(m_eager.size());
      for (int walk = 0; walk < 8; ++walk) {
        int32_t se = eager.initial_state(), sl = lazy.initial_state();
        for (int step = 0; step < 60 && !eager.terminated(se); ++step) {
          if (eager.accepting(se) && rng() % 8 == 0) break;
          eager.fill_mask(se, m_eager);
          lazy.fill_mask(sl, m_lazy);
          ASSERT_EQ(m_eager, m_lazy) << "walk " << walk << " step " << step;
          ASSERT_EQ(m_lazy, test::reference_mask(lazy, sl)) << "walk " << walk << " step " << step;
          ++compared;
          std::vector<int32_t> ok;
          for (int32_t t = 0; t < v->size(); ++t)
            if (test::allowed(m_eager, t)) ok.push_back(t);
          ASSERT_FALSE(ok.empty());
          const std::string& bytes = v->token(ok[rng() % ok.size()]).bytes;
          se = eager.next(se, bytes);
          sl = lazy.next(sl, bytes);
          ASSERT_NE(se, CompiledGrammar::kDead);
          ASSERT_NE(sl, CompiledGrammar::kDead);
        }
      }
      // Nothing was built for the eager grammar at run time; the lazy one built states as met.
      EXPECT_EQ(eager.num_states(), precomputed);
      EXPECT_EQ(eager.memory_bytes(), eager_bytes);
      EXPECT_GT(lazy.num_states(), 1u);
      EXPECT_GT(lazy.memory_bytes(), lazy_bytes);
    }
  }
  EXPECT_GT(compared, 500);
}

// After n "a"s the parses expect any of 2^n sequences of "b" and "c": the state past about a
// dozen exceeds kMaxStacks. The classification never sees it (a token is one byte here).
TEST(CompiledGrammar, AmbiguityErrorsBelongToTheRequestThatMeetsThem) {
  const char* gbnf = R"g(
root ::= s
s    ::= "a" s "b" | "a" s "c" | "d"
)g";
  std::shared_ptr<CompiledGrammar> g;
  ASSERT_NO_THROW(g = test::compile(gbnf));
  // The breadth-first precomputation stopped at the error, short of its budget (this grammar's
  // states are unbounded).
  EXPECT_LT(g->num_states(), CompiledGrammar::kPrecomputedStates);
  EXPECT_TRUE(test::matches(*g, "aadbc"));
  EXPECT_THROW(g->next(g->initial_state(), std::string(16, 'a')), GrammarError);
}

}  // namespace
}  // namespace mls::grammar
