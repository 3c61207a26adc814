// GrammarMatcher's trigger (tool_choice "auto", grammar/grammar_matcher.h) over the real
// tool-call formats: the output is free until the format's first marker, the tool-call grammar
// applies from the marker's first byte on (the marker split across tokens, glued to text before
// it or to the call after it), a malformed call token is refused by the mask and by advance, the
// output may end only after a complete call, a marker inside the reasoning section does not
// start the grammar, and a clone taken mid-marker goes on alone; random walks check the mask
// against advance() token by token. What the matcher accepts parses as the call. Byte and
// random vocabularies plus the formats' markers; about 0.5 s with the timing test.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "chat/reasoning_parser.h"
#include "chat/tool_call_grammar.h"
#include "chat/tool_parser.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/test_support.h"
#include "tokenizer/tokenizer_config.h"

namespace mls::chat {
namespace {

using grammar::GrammarMatcher;
using grammar::test::allowed;
using ojson = nlohmann::ordered_json;

const ojson kWeatherTool = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}}])");

// A well-formed call of kWeatherTool in each format's syntax.
std::string weather_call(const std::string& parser) {
  if (parser == "glm47")
    return "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
           "</tool_call>";
  if (parser == "deepseek_v31")
    return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
           "{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  return "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
         "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
         "</｜DSML｜invoke>\n</｜DSML｜function_calls>";
}

class Trigger : public ::testing::TestWithParam<std::string> {
 protected:
  Trigger()
      : trigger_(tool_call_format(GetParam(), kWeatherTool).opener()),
        call_(weather_call(GetParam())),
        vocab_(grammar::test::byte_vocab({
            trigger_,                                    // kTrigger
            "Sure." + trigger_,                          // kTextTrigger
            call_.substr(0, trigger_.size() + 3),        // kTriggerCall: the call's start
            trigger_ + "x",                              // kTriggerBad
            trigger_.substr(trigger_.size() - 1) + "x",  // kEndBad: the marker's last byte
            std::string(kReasoningEnd) + trigger_,       // kGateTrigger
        })),
        gc_(vocab_) {}

  static constexpr int32_t kTrigger = 256, kTextTrigger = 257, kTriggerCall = 258,
                           kTriggerBad = 259, kEndBad = 260, kGateTrigger = 261;

  std::shared_ptr<grammar::CompiledGrammar> grammar(bool parallel) {
    return gc_.gbnf(tool_call_gbnf(GetParam(), kWeatherTool, "", parallel));
  }
  std::vector<uint32_t> mask(GrammarMatcher& m) const {
    std::vector<uint32_t> out(static_cast<size_t>(vocab_->mask_words()));
    m.fill_mask(out);
    return out;
  }
  static void bytes(TokenConstraint& m, std::string_view text) {
    for (char c : text) ASSERT_TRUE(m.advance(static_cast<uint8_t>(c))) << text;
  }

  std::string trigger_, call_;
  std::shared_ptr<const grammar::Vocabulary> vocab_;
  grammar::GrammarCompiler gc_;
};

TEST_P(Trigger, OutputIsFreeUntilTheMarker) {
  const auto g = grammar(false);
  GrammarMatcher m(g, "", trigger_);
  EXPECT_TRUE(m.awaiting_trigger());
  EXPECT_TRUE(m.can_end());
  // Every token, special ones included, except the one completing the marker into a bad call.
  std::vector<uint32_t> free = mask(m);
  for (int32_t t = 0; t < vocab_->size(); ++t) EXPECT_EQ(allowed(free, t), t != kTriggerBad) << t;
  EXPECT_TRUE(m.advance(kEndBad));  // no marker before it: plain text
  EXPECT_TRUE(m.advance(static_cast<int32_t>(vocab_->size() - 1)));  // "<eos>" as text: free
  bytes(m, "Hi, ");
  EXPECT_TRUE(m.awaiting_trigger());
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.state(), g->initial_state());
  EXPECT_FALSE(m.clone()->advance(kTriggerBad));
}

TEST_P(Trigger, MarkerSplitAcrossTokensStartsTheGrammar) {
  const auto g = grammar(false);
  GrammarMatcher m(g, "", trigger_);
  bytes(m, "Let me see. ");
  bytes(m, std::string_view(trigger_).substr(0, trigger_.size() - 1));
  EXPECT_TRUE(m.awaiting_trigger());
  EXPECT_TRUE(m.can_end());
  // Now the marker's last byte glued to a bad byte completes it into a malformed call.
  std::vector<uint32_t> before = mask(m);
  EXPECT_FALSE(allowed(before, kEndBad));
  EXPECT_TRUE(allowed(before, static_cast<uint8_t>(trigger_.back())));
  EXPECT_TRUE(allowed(before, 'x'));  // the marker abandoned: plain text
  std::unique_ptr<TokenConstraint> mid = m.clone();
  EXPECT_FALSE(m.clone()->advance(kEndBad));

  EXPECT_TRUE(m.advance(static_cast<uint8_t>(trigger_.back())));
  EXPECT_FALSE(m.awaiting_trigger());
  EXPECT_EQ(m.state(), g->next(g->initial_state(), trigger_));
  EXPECT_FALSE(m.can_end());  // EOS refused mid-call
  std::vector<uint32_t> in_call = mask(m);
  EXPECT_FALSE(allowed(in_call, 'x'));
  EXPECT_TRUE(allowed(in_call, static_cast<uint8_t>(call_[trigger_.size()])));
  EXPECT_FALSE(m.clone()->advance('x'));

  // The clone stayed one byte short of the marker and goes on alone.
  auto& clone = static_cast<GrammarMatcher&>(*mid);
  EXPECT_TRUE(clone.awaiting_trigger());
  EXPECT_TRUE(clone.advance('x'));
  EXPECT_TRUE(clone.awaiting_trigger());
  EXPECT_TRUE(allowed(mask(clone), kEndBad));  // no partial marker left
  EXPECT_TRUE(clone.can_end());
}

TEST_P(Trigger, TextAndMarkerInOneTokenThenTheCall) {
  for (bool parallel : {false, true}) {
    const auto g = grammar(parallel);
    GrammarMatcher m(g, "", trigger_);
    EXPECT_TRUE(allowed(mask(m), kTextTrigger));
    ASSERT_TRUE(m.advance(kTextTrigger));
    EXPECT_FALSE(m.awaiting_trigger());
    EXPECT_EQ(m.state(), g->next(g->initial_state(), trigger_));  // "Sure." stayed free
    const std::string rest = call_.substr(trigger_.size());
    for (size_t i = 0; i < rest.size(); ++i) {
      EXPECT_FALSE(m.can_end()) << i;
      ASSERT_TRUE(m.advance(static_cast<uint8_t>(rest[i]))) << i;
    }
    EXPECT_TRUE(m.can_end());
    // A section's end closes the output too.
    const bool sectioned = !tool_call_format(GetParam(), kWeatherTool).section_begin.empty();
    EXPECT_EQ(m.is_terminated(), !parallel || sectioned);
    if (!parallel) {
      EXPECT_FALSE(m.advance(kTrigger));
    }
    const ToolParseResult r =
        ToolParser(tool_call_format(GetParam(), kWeatherTool)).parse("Sure." + call_);
    EXPECT_EQ(r.content, "Sure.");
    ASSERT_EQ(r.tool_calls.size(), 1u);
    EXPECT_EQ(r.tool_calls[0].name, "get_weather");
    EXPECT_EQ(ojson::parse(r.tool_calls[0].arguments), ojson::parse(R"({"city": "Paris"})"));
  }
}

TEST_P(Trigger, MarkerGluedToTheCallIsMatchedWhole) {
  const auto g = grammar(true);
  GrammarMatcher m(g, "", trigger_);
  const std::vector<uint32_t> free = mask(m);
  EXPECT_TRUE(allowed(free, kTriggerCall));
  EXPECT_TRUE(allowed(free, kTrigger));
  EXPECT_FALSE(allowed(free, kTriggerBad));
  EXPECT_FALSE(m.clone()->advance(kTriggerBad));
  ASSERT_TRUE(m.advance(kTriggerCall));
  EXPECT_EQ(m.state(), g->next(g->initial_state(), call_.substr(0, trigger_.size() + 3)));
  bytes(m, call_.substr(trigger_.size() + 3));
  EXPECT_TRUE(m.can_end());
}

TEST_P(Trigger, MarkerInsideReasoningIsFree) {
  const auto g = grammar(false);
  GrammarMatcher m(g, std::string(kReasoningEnd), trigger_);
  EXPECT_TRUE(m.gated());
  EXPECT_FALSE(m.awaiting_trigger());
  bytes(m, "I could call " + trigger_ + "x, or not. ");
  EXPECT_TRUE(m.advance(kTriggerBad));
  EXPECT_TRUE(m.gated());
  bytes(m, kReasoningEnd);
  EXPECT_FALSE(m.gated());
  EXPECT_TRUE(m.awaiting_trigger());
  EXPECT_EQ(m.state(), g->initial_state());
  EXPECT_FALSE(allowed(mask(m), kTriggerBad));
  ASSERT_TRUE(m.advance(kTrigger));
  EXPECT_FALSE(m.awaiting_trigger());
  EXPECT_FALSE(m.can_end());
  // The reasoning end and the marker in one token: the gate passes and the grammar starts.
  GrammarMatcher n(g, std::string(kReasoningEnd), trigger_);
  ASSERT_TRUE(n.advance(kGateTrigger));
  EXPECT_FALSE(n.gated());
  EXPECT_FALSE(n.awaiting_trigger());
  EXPECT_EQ(n.state(), g->next(g->initial_state(), trigger_));
}

// The mask is exactly what advance() accepts, free, mid-marker and in the call: random walks
// over a vocabulary of the marker's pieces (prefixes, suffixes, glued to text or to a bad byte)
// and random multi-byte tokens, each step checking every token on a clone.
TEST_P(Trigger, MaskIsWhatAdvanceAccepts) {
  std::vector<std::string> pieces;
  for (size_t k = 1; k < trigger_.size(); ++k) {
    pieces.push_back(trigger_.substr(0, k));
    pieces.push_back(trigger_.substr(k));
    pieces.push_back(trigger_.substr(k) + "x");
    pieces.push_back(trigger_.substr(k) + call_.substr(trigger_.size(), 2));
  }
  pieces.push_back("a" + trigger_);
  pieces.push_back(call_.substr(trigger_.size(), 4));
  const auto random = grammar::test::random_vocab(300, 11);
  std::vector<grammar::Vocabulary::Token> tokens;
  for (int32_t t = 0; t < random->size(); ++t) tokens.push_back(random->token(t));
  std::set<std::string> distinct;
  for (const auto& t : tokens) distinct.insert(t.bytes);
  std::vector<int32_t> piece_ids;
  for (const std::string& p : pieces)
    if (distinct.insert(p).second) {
      piece_ids.push_back(static_cast<int32_t>(tokens.size()));
      tokens.push_back({p, true});
    }
  const auto v = std::make_shared<const grammar::Vocabulary>(std::move(tokens));
  grammar::GrammarCompiler gc(v);
  const auto g = gc.gbnf(tool_call_gbnf(GetParam(), kWeatherTool, "", true));
  std::mt19937 rng(3);
  int triggered = 0;
  for (int walk = 0; walk < 20; ++walk) {
    GrammarMatcher m(g, "", trigger_);
    std::vector<uint32_t> words(static_cast<size_t>(v->mask_words()));
    for (int step = 0; step < 12; ++step) {
      m.fill_mask(words);
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < v->size(); ++t) {
        ASSERT_EQ(allowed(words, t), m.clone()->advance(t)) << "token " << t << " step " << step;
        if (allowed(words, t)) ok.push_back(t);
      }
      if (ok.empty()) break;
      std::vector<int32_t> ok_pieces;
      for (int32_t t : piece_ids)
        if (allowed(words, t)) ok_pieces.push_back(t);
      const bool piece = !ok_pieces.empty() && rng() % 4 != 0;
      const std::vector<int32_t>& from = piece ? ok_pieces : ok;
      ASSERT_TRUE(m.advance(from[rng() % from.size()]));
    }
    triggered += !m.awaiting_trigger();
  }
  EXPECT_GT(triggered, 0);
  EXPECT_LT(triggered, 20);
}

// A request's cost under tool_choice "auto" (server/structured_output.cc): the tool-call
// grammar compiles once per distinct tools list and later requests find it in the
// GrammarCompiler's cache, and so does the matcher's trigger index (one pass over the
// vocabulary, kept with the grammar). Timed on the demo model's held-out tool lists, and the index
// on a vocabulary of GLM-5's size (154,880 ids). Printed; the cache hit is checked.
TEST(TriggerCost, RepeatedToolsListIsACacheHit) {
  using Clock = std::chrono::steady_clock;
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  const ojson golden = ojson::parse(
      tok::read_text_file(std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5/golden.json"));
  grammar::GrammarCompiler gc(grammar::test::demo_vocab());
  std::set<std::string> seen;
  double first_max = 0, second_max = 0;
  for (const ojson& s : golden["heldout_eval"]) {
    const ojson& tools = s["tools"];
    if (tools.empty() || !seen.insert(tools.dump()).second) continue;
    std::shared_ptr<grammar::CompiledGrammar> first;
    for (int request = 0; request < 2; ++request) {
      const Clock::time_point t0 = Clock::now();
      const auto g = gc.gbnf(tool_call_gbnf("glm47", tools, "", true));
      GrammarMatcher m(g, "", tool_call_format("glm47", tools).opener());
      const double took = ms(Clock::now() - t0);
      if (request == 0) first = g;
      EXPECT_EQ(g, first);
      double& most = request == 0 ? first_max : second_max;
      most = std::max(most, took);
    }
  }
  std::printf("demo, %zu tools lists: first request up to %.3f ms, second up to %.3f ms\n",
              seen.size(), first_max, second_max);
  EXPECT_GE(seen.size(), 2u);
  const auto big = grammar::test::random_vocab(154880 - 257, 5);
  ASSERT_EQ(big->size(), 154880);
  const auto g = grammar::test::compile("root ::= \"<tool_call>\" [a-z]+", big);
  for (int request = 0; request < 2; ++request) {
    const Clock::time_point t0 = Clock::now();
    GrammarMatcher m(g, "", "<tool_call>");
    std::printf("154,880-id vocabulary, request %d: matcher %.3f ms\n", request + 1,
                ms(Clock::now() - t0));
    EXPECT_TRUE(m.awaiting_trigger());
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Trigger,
                         ::testing::Values("glm47", "deepseek_v31", "deepseek_v32"));

}  // namespace
}  // namespace mls::chat
