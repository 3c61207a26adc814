#include "chat/reasoning_parser.h"

#include <gtest/gtest.h>

#include <vector>

namespace mls::chat {
namespace {

struct ReasoningCase {
  bool starts_in_reasoning;
  std::string text, reasoning, content;
};

const std::vector<ReasoningCase> kReasoningCases = {
    {true, "let me think</think>The answer is 4.", "let me think", "The answer is 4."},
    {true, "still thinking when the budget ran out", "still thinking when the budget ran out", ""},
    {true, "<think>model repeats the tag</think>ok", "model repeats the tag", "ok"},
    {true, "</think>direct", "", "direct"},
    {true, "a < b </thin", "a < b </thin", ""},
    {false, "<think>\nhmm\n</think>\n\nHi!", "\nhmm\n", "\n\nHi!"},
    {false, "No reasoning here, even with </think> inside.", "",
     "No reasoning here, even with </think> inside."},
    {false, "<thi", "", "<thi"},
    {false, "<think>思考 🤔</think>答え", "思考 🤔", "答え"},
    {false, "", "", ""},
};

ReasoningDelta stream_reasoning(const ReasoningCase& c, const std::vector<std::string>& chunks) {
  ReasoningParser p(c.starts_in_reasoning);
  ReasoningDelta all;
  for (const auto& chunk : chunks) {
    const ReasoningDelta d = p.feed(chunk);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  const ReasoningDelta d = p.finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

TEST(ReasoningParser, CompleteAndStreamingAgree) {
  for (const auto& c : kReasoningCases) {
    SCOPED_TRACE(c.text);
    const ReasoningDelta whole = ReasoningParser(c.starts_in_reasoning).parse(c.text);
    EXPECT_EQ(whole.reasoning, c.reasoning);
    EXPECT_EQ(whole.content, c.content);
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      const ReasoningDelta s = stream_reasoning(c, {c.text.substr(0, cut), c.text.substr(cut)});
      EXPECT_EQ(s.reasoning, c.reasoning) << "cut " << cut;
      EXPECT_EQ(s.content, c.content) << "cut " << cut;
    }
    std::vector<std::string> bytes;
    for (char b : c.text) bytes.emplace_back(1, b);
    const ReasoningDelta s = stream_reasoning(c, bytes);
    EXPECT_EQ(s.reasoning, c.reasoning);
    EXPECT_EQ(s.content, c.content);
  }
}

TEST(ReasoningParser, StreamsReasoningBeforeTheEndTag) {
  ReasoningParser p(true);
  EXPECT_EQ(p.feed("step one, ").reasoning, "step one, ");
  const ReasoningDelta d = p.feed("step two</th");
  EXPECT_EQ(d.reasoning, "step two");
  const ReasoningDelta e = p.feed("ink>answer");
  EXPECT_EQ(e.reasoning, "");
  EXPECT_EQ(e.content, "answer");
}

}  // namespace
}  // namespace mls::chat
