// The grammar engine below JSON Schema: GBNF and regex front ends, choice lists, UTF-8 at the
// byte level (partial tokens included), the exactness of the allowed-token mask, and the
// matcher the engine drives (EOS, termination, the reasoning gate).
#include <gtest/gtest.h>

#include <random>

#include "grammar/grammar_compiler.h"
#include "grammar/grammar_error.h"
#include "grammar/grammar_matcher.h"
#include "grammar/json_schema.h"
#include "grammar/regex_parser.h"
#include "grammar/test_support.h"

namespace mls::grammar {
namespace {

using test::byte_vocab;
using test::compile;
using test::matches;

std::shared_ptr<CompiledGrammar> regex(std::string_view pattern) {
  RuleSet rs;
  rs.rules.emplace_back("root", parse_regex(pattern));
  return std::make_shared<CompiledGrammar>(Grammar::from_rules(rs), byte_vocab());
}

TEST(Gbnf, ArithmeticExpressions) {
  auto g = compile(R"g(
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
)g");
  for (const char* ok : {"1+2*3", "(1+2)*3", "42", "((7))", "1-2/3*(4+5)"})
    EXPECT_TRUE(matches(*g, ok)) << ok;
  for (const char* bad : {"", "1+", "(1", "+1", "1++2", "1 + 2", "()"})
    EXPECT_FALSE(matches(*g, bad)) << bad;
  EXPECT_TRUE(test::is_prefix(*g, "(1+"));
  EXPECT_FALSE(test::is_prefix(*g, "(1+)"));
}

TEST(Gbnf, LiteralsClassesRepetitionsAndComments) {
  auto g = compile(R"(# a comment
root ::= greeting " " name "!"{1,3} tail?   # trailing comment
greeting ::= "hi" | "hello" | "\x48\u0069"
name ::= [A-Z] [a-z\-]{1,5}
tail ::= (
    "\n" | "\t"
  ) .
)");
  EXPECT_TRUE(matches(*g, "hi Bob!"));
  EXPECT_TRUE(matches(*g, "Hi Ann-e!!!"));
  EXPECT_TRUE(matches(*g, "hello Zed!!\n\xC3\xA9"));  // `.` is any character, é included
  EXPECT_FALSE(matches(*g, "hi Bob!!!!"));
  EXPECT_FALSE(matches(*g, "hi bob!"));
  EXPECT_FALSE(matches(*g, "hi Bobbbbb!"));
  EXPECT_FALSE(matches(*g, "hello Zed!\n\xC3"));  // an incomplete character
}

TEST(Gbnf, ErrorsNameTheProblem) {
  const auto message = [](std::string_view text) -> std::string {
    try {
      compile(text);
    } catch (const GrammarError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message("root ::= foo").find("'foo' is not defined"), std::string::npos);
  EXPECT_NE(message("root ::= root \"a\" | \"a\"").find("left recursion"), std::string::npos);
  EXPECT_NE(message("root ::= (\"a\"?)*").find("left recursion"), std::string::npos);
  EXPECT_NE(message("root ::= \"abc").find("unterminated literal"), std::string::npos);
  EXPECT_NE(message("root ::= <[12]>").find("token references"), std::string::npos);
  EXPECT_NE(message("start ::= \"a\"").find("no 'root' rule"), std::string::npos);
  EXPECT_NE(message("root ::= a\na ::= \"x\" a").find("matches no finite string"),
            std::string::npos);
  EXPECT_NE(message("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
}

TEST(Gbnf, UnproductiveAlternativesAreDropped) {
  // `loop` never ends; the grammar still matches "b", and no state ever offers "a".
  auto g = compile("root ::= loop | \"b\"\nloop ::= \"a\" loop");
  EXPECT_TRUE(matches(*g, "b"));
  EXPECT_FALSE(test::is_prefix(*g, "a"));
}

TEST(Regex, PracticalSubset) {
  EXPECT_TRUE(matches(*regex(R"(\d{3}-\d{4})"), "555-1234"));
  EXPECT_FALSE(matches(*regex(R"(\d{3}-\d{4})"), "5551234"));
  auto animals = regex("^(cat|dog)s?$");
  for (const char* ok : {"cat", "dogs"}) EXPECT_TRUE(matches(*animals, ok));
  for (const char* bad : {"cats!", "bird", "^cat"}) EXPECT_FALSE(matches(*animals, bad));
  auto word = regex(R"([A-Z][a-z]*(?:\s\w+)+)");
  EXPECT_TRUE(matches(*word, "Hello big_world 42"));
  EXPECT_FALSE(matches(*word, "hello world"));
  auto dot = regex("a.c");
  EXPECT_TRUE(matches(*dot,
                      "a\xE2\x82\xAC"
                      "c"));  // a€c
  EXPECT_FALSE(matches(*dot, "a\nc"));
  auto cls = regex(R"([^\d\s]+\.[a-f\x41-\x43]{2,}?)");
  EXPECT_TRUE(matches(*cls, "x\xC3\xA9.fA"));
  EXPECT_FALSE(matches(*cls, "x1.fa"));
  auto named = regex(R"((?P<y>\d{4})-(?<m>\d\d)\*)");
  EXPECT_TRUE(matches(*named, "2026-12*"));
  for (const char* bad : {R"((a)\1)", "(?=a)b", R"(\bword)", "a^b", "(a", "a)", "[a-", "x{2,1}",
                          "*a", R"([[:alpha:]])", "(?i)a", R"(\p{L})"})
    EXPECT_THROW(regex(bad), GrammarError) << bad;
}

TEST(Choice, ExactlyOneOfTheStringsThenTermination) {
  GrammarCompiler gc(byte_vocab());
  auto g = gc.choice({"yes", "no", "none"});
  EXPECT_TRUE(matches(*g, "yes"));
  EXPECT_TRUE(matches(*g, "none"));
  EXPECT_FALSE(matches(*g, "ye"));
  EXPECT_FALSE(matches(*g, "yesno"));
  const int32_t yes = g->next(0, "yes");
  EXPECT_TRUE(g->terminated(yes));
  const int32_t no = g->next(0, "no");  // "none" may still follow
  EXPECT_TRUE(g->accepting(no));
  EXPECT_FALSE(g->terminated(no));
  EXPECT_THROW(gc.choice({}), GrammarError);
  EXPECT_THROW(gc.choice({"a", ""}), GrammarError);
  EXPECT_EQ(gc.choice({"yes", "no", "none"}), g);  // cached
}

TEST(Utf8, ClassesMatchWholeCharactersOnly) {
  auto g = compile(R"(root ::= [^"\\]* "!")");
  for (const char* ok : {"\xC3\xA9!", "\xE6\x97\xA5\xE6\x9C\xAC!", "\xF0\x9F\x98\x80!", "a!"})
    EXPECT_TRUE(matches(*g, ok)) << ok;
  for (const char* bad : {"\xC0\x80!",          // overlong
                          "\xED\xA0\x80!",      // a surrogate
                          "\x80!",              // a lone continuation byte
                          "\xF4\x90\x80\x80!",  // past U+10FFFF
                          "\xE6\x97!"})         // a truncated character
    EXPECT_FALSE(matches(*g, bad)) << bad;
  auto range = compile("root ::= [\xC3\xA0-\xC3\xBF]+");  // [à-ÿ]
  EXPECT_TRUE(matches(*range, "\xC3\xA9\xC3\xA0"));
  EXPECT_FALSE(matches(*range, "e"));
  EXPECT_FALSE(matches(*range, "\xC3\x9F"));  // ß, below the range
}

// Escapes name Unicode scalar values: a surrogate or a value past U+10FFFF has no UTF-8, so a
// grammar naming one is an error, as is grammar text that is not UTF-8 itself.
TEST(Utf8, EscapesAndGrammarTextMustBeUnicode) {
  EXPECT_TRUE(matches(*compile(R"(root ::= "\u00e9\U0001F600\x41")"),
                      "\xC3\xA9\xF0\x9F\x98\x80"
                      "A"));
  EXPECT_TRUE(matches(*regex(R"(\u00e9+)"), "\xC3\xA9\xC3\xA9"));
  for (const char* bad :
       {R"(root ::= "\uD800")", R"(root ::= "\U00110000")", R"(root ::= "\UFFFFFFFF")",
        R"(root ::= [\uDFFF])", R"(root ::= "\x4")", "root ::= \"\xED\xA0\x80\"",
        "root ::= \"\xC0\x80\"", "root ::= [\xE6\x97]"})
    EXPECT_THROW(compile(bad), GrammarError) << bad;
  for (const char* bad : {R"(\uD800)", R"([\uDC00-\uDFFF])", R"(\x4)", "\xF4\x90\x80\x80"})
    EXPECT_THROW(regex(bad), GrammarError) << bad;
}

TEST(Utf8, PartialCharacterTokensAreMaskedByteByByte) {
  // Tokens 256: "\xC3" (the first half of é), 257: "\xA9" (its second half), 258: "é!".
  const auto v = byte_vocab({"\xC3", "\xA9", "\xC3\xA9!"});
  auto g = compile(R"(root ::= "\"" [a-zé]* "\"")", v);
  std::vector<uint32_t> mask(static_cast<size_t>(v->mask_words()));
  const int32_t open = g->next(0, "\"");
  g->fill_mask(open, mask);
  EXPECT_TRUE(test::allowed(mask, 256));
  EXPECT_FALSE(test::allowed(mask, 257));
  EXPECT_FALSE(test::allowed(mask, 258));  // '!' cannot follow
  EXPECT_TRUE(test::allowed(mask, 'a'));
  EXPECT_TRUE(test::allowed(mask, '"'));
  EXPECT_TRUE(test::allowed(mask, 0xC3));  // the single byte too
  EXPECT_FALSE(test::allowed(mask, 'A'));
  const int32_t half = g->next(open, "\xC3");
  g->fill_mask(half, mask);
  EXPECT_TRUE(test::allowed(mask, 257));
  EXPECT_TRUE(test::allowed(mask, 0xA9));
  EXPECT_FALSE(test::allowed(mask, 0xA8));  // U+00E8 è is outside [a-zé]
  EXPECT_FALSE(test::allowed(mask, 'a'));
  EXPECT_FALSE(test::allowed(mask, '"'));
  EXPECT_FALSE(test::allowed(mask, 259));  // the special token, never by its bytes
}

// The mask against brute force: bit t is set exactly when token t's bytes lead to a state that
// can still complete, along random valid outputs of a JSON grammar.
TEST(Mask, ExactAlongRandomOutputs) {
  const auto v = byte_vocab({"{\"", "\": ", "\", \"", "true", "false", "null", "[1, ", "]}", "\"}",
                             "12", "\xC3", "\xA9", "\xC3\xA9\"", "}\n", "\n\n  "});
  auto g =
      std::make_shared<CompiledGrammar>(Grammar::from_rules(parse_gbnf(json_object_gbnf())), v);
  std::vector<uint32_t> mask(static_cast<size_t>(v->mask_words()));
  std::map<int32_t, int> dist;
  const auto completable = [&](int32_t s) {
    if (!dist.count(s)) dist[s] = test::distance_to_end(*g, s);
    return dist[s] >= 0;
  };
  std::mt19937 rng(7);
  for (int walk = 0; walk < 20; ++walk) {
    int32_t st = g->initial_state();
    for (int step = 0; step < 40 && !g->terminated(st); ++step) {
      g->fill_mask(st, mask);
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < v->size(); ++t) {
        const auto& tok = v->token(t);
        const int32_t next = tok.matchable ? g->next(st, tok.bytes) : CompiledGrammar::kDead;
        const bool live = next != CompiledGrammar::kDead && completable(next);
        ASSERT_EQ(test::allowed(mask, t), live)
            << "walk " << walk << " step " << step << " token " << t;
        if (live) ok.push_back(t);
      }
      ASSERT_FALSE(ok.empty());
      st = g->next(st, v->token(ok[rng() % ok.size()]).bytes);
    }
  }
  // Padding bits past the vocabulary stay clear.
  if (v->size() % 32) {
    EXPECT_EQ(mask.back() >> (v->size() % 32), 0u);
  }
}

// Every token that is a prefix of the rest of a valid document is allowed there.
TEST(Mask, NeverForbidsATokenOnTheWayToAValidOutput) {
  const auto v = test::demo_vocab();
  GrammarCompiler gc(v);
  auto g = gc.json_object();
  std::vector<uint32_t> mask(static_cast<size_t>(v->mask_words()));
  for (const std::string doc : {R"({"city": "Paris", "days": 3})",
                                "{\n  \"a\": [1, 2.5e3, -0, true, null],\n  \"b\": {}\n}",
                                R"({"unicode": "\u00e9 é 日本 😀", "esc": "a\"b\\c\n"})"}) {
    ASSERT_TRUE(matches(*g, doc)) << doc;
    int32_t st = g->initial_state();
    for (size_t pos = 0; pos < doc.size(); ++pos) {
      g->fill_mask(st, mask);
      for (int32_t t = 0; t < v->size(); ++t) {
        const auto& tok = v->token(t);
        if (tok.matchable && doc.compare(pos, tok.bytes.size(), tok.bytes) == 0) {
          ASSERT_TRUE(test::allowed(mask, t)) << doc << " at " << pos << " token " << t;
        }
      }
      st = g->next(st, static_cast<uint8_t>(doc[pos]));
    }
  }
}

TEST(Matcher, EndsTerminatesAndClones) {
  GrammarCompiler gc(byte_vocab());
  GrammarMatcher m(gc.choice({"ab", "abc"}));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.advance('a'));
  std::unique_ptr<TokenConstraint> copy = m.clone();
  EXPECT_TRUE(m.advance('b'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.advance('c'));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.advance('c'));
  EXPECT_FALSE(copy->can_end());  // the clone stayed after "a"
  EXPECT_FALSE(copy->advance('x'));
  GrammarMatcher special(gc.choice({"ab"}));
  EXPECT_FALSE(special.advance(256));  // "<eos>" is never matched by its bytes
}

TEST(Matcher, ReasoningIsFreeUntilTheGate) {
  const auto v = byte_vocab({"</think>", "</think>{"});
  GrammarCompiler gc(v);
  auto g = gc.json_object();
  std::vector<uint32_t> mask(static_cast<size_t>(v->mask_words()));
  GrammarMatcher m(g, "</think>");
  m.fill_mask(mask);
  for (int32_t t = 0; t < v->size(); ++t) EXPECT_TRUE(test::allowed(mask, t)) << t;
  EXPECT_TRUE(m.can_end());
  for (char c : std::string("x </thi")) EXPECT_TRUE(m.advance(static_cast<uint8_t>(c)));
  EXPECT_TRUE(m.gated());
  for (char c : std::string("nk>")) EXPECT_TRUE(m.advance(static_cast<uint8_t>(c)));
  EXPECT_FALSE(m.gated());
  EXPECT_FALSE(m.can_end());
  m.fill_mask(mask);
  EXPECT_TRUE(test::allowed(mask, '{'));
  EXPECT_FALSE(test::allowed(mask, 'x'));
  // A token carrying the marker and the output's first byte.
  GrammarMatcher n(g, "</think>");
  EXPECT_TRUE(n.advance(257));
  EXPECT_FALSE(n.gated());
  EXPECT_EQ(n.state(), g->next(g->initial_state(), "{"));
}

TEST(Vocabulary, TrieHoldsEveryMatchableTokenOnce) {
  const auto v = byte_vocab({"ab", "abc", "ab", "b", ""});
  std::vector<int> seen(static_cast<size_t>(v->size()), 0);
  for (const auto& node : v->trie())
    for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k) ++seen[v->token_ids()[k]];
  for (int32_t t = 0; t < v->size(); ++t) EXPECT_EQ(seen[t], v->token(t).matchable ? 1 : 0) << t;
  EXPECT_FALSE(v->token(260).matchable);  // the empty token
  EXPECT_EQ(v->mask_words(), (262 + 31) / 32);
  // Ranks index token_ids() and order the tokens by their bytes, ties by id.
  for (int32_t t = 0; t < v->size(); ++t) {
    if (v->token(t).matchable) {
      EXPECT_EQ(v->token_ids()[v->rank(t)], t);
    } else {
      EXPECT_EQ(v->rank(t), -1);
    }
  }
  for (size_t k = 1; k < v->token_ids().size(); ++k) {
    const int32_t a = v->token_ids()[k - 1], b = v->token_ids()[k];
    EXPECT_TRUE(v->token(a).bytes < v->token(b).bytes ||
                (v->token(a).bytes == v->token(b).bytes && a < b));
  }
}

}  // namespace
}  // namespace mls::grammar
