#include "server/output_stream.h"

#include <gtest/gtest.h>

#include "test_data.h"

namespace mls::server {
namespace {

class OutputStreamTest : public ::testing::Test {
 protected:
  tok::Tokenizer tok_ = tok::Tokenizer::from_dir(MLASERVE_TEST_DATA "/tok-glm");
  std::string id_ = "req";

  TokenEvent token(int32_t id, FinishReason finish = FinishReason::kNone, int sample = 0) {
    TokenEvent ev;
    ev.request_id = &id_;
    ev.sample_index = sample;
    ev.token_id = id;
    ev.finish = finish;
    return ev;
  }
  static std::string text_of(const std::vector<OutputEvent>& events) {
    std::string s;
    for (const OutputEvent& e : events) s += e.text;
    return s;
  }
};

TEST_F(OutputStreamTest, StopStringEndsTheSampleAndIsExcluded) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(&tok_,
                 {.first_choice = 0,
                  .n = 1,
                  .skip_special_tokens = true,
                  .stop = {"lo wor"},
                  .script = nullptr},
                 ch, nullptr);
  const std::vector<int32_t> ids = tok_.encode("hello world and more", false);
  size_t i = 0;
  Verdict v = Verdict::kContinue;
  for (; i < ids.size() && v == Verdict::kContinue; ++i) v = s.on_token(token(ids[i]));
  EXPECT_EQ(v, Verdict::kStop);
  EXPECT_LT(i, ids.size());  // stopped before the end
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  EXPECT_EQ(text_of(events), "hel");
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
  // The engine's notice that follows our verdict adds nothing.
  EXPECT_EQ(s.on_token(token(-1, FinishReason::kStop)), Verdict::kStop);
  EXPECT_FALSE(ch->wait(events, std::chrono::milliseconds(0)));
}

TEST_F(OutputStreamTest, HoldsBackOnlyWhatCouldStartAStopString) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_,
      {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = {"XYZ"}, .script = nullptr},
      ch, nullptr);
  for (int32_t id : tok_.encode("abc dXY", false)) s.on_token(token(id));
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  EXPECT_EQ(text_of(events), "abc d");  // "XY" could still grow into "XYZ"
  s.on_token(token(kTokGlmEndOfText, FinishReason::kStop));
  ch->wait(events, std::chrono::milliseconds(0));
  EXPECT_EQ(text_of(events), "abc dXY");  // the EOS token's text is not output
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
  EXPECT_EQ(events.back().token_ids, std::vector<int32_t>{kTokGlmEndOfText});
}

TEST_F(OutputStreamTest, ManyStopStringsMatchLikeOne) {
  std::vector<std::string> stops;
  for (size_t i = 0; i + 1 < kMaxStopStrings; ++i)
    stops.push_back(std::string(100, 'q') + std::to_string(i));
  stops.push_back(" wor");
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_,
      {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = stops, .script = nullptr},
      ch, nullptr);
  Verdict v = Verdict::kContinue;
  for (int32_t id : tok_.encode("hello world and more", false))
    if ((v = s.on_token(token(id))) == Verdict::kStop) break;
  EXPECT_EQ(v, Verdict::kStop);
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  EXPECT_EQ(text_of(events), "hello");
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
}

TEST_F(OutputStreamTest, AbortEndsEverySample) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_,
      {.first_choice = 4, .n = 2, .skip_special_tokens = true, .stop = {}, .script = nullptr}, ch,
      nullptr);
  s.on_token(token(-1, FinishReason::kAbort));
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].choice, 4);
  EXPECT_EQ(events[1].choice, 5);
  EXPECT_EQ(events[1].finish, FinishReason::kAbort);
}

TEST_F(OutputStreamTest, ScriptReplacesSampledTokensAndStopsAtItsEnd) {
  auto script = std::make_shared<const std::vector<int32_t>>(tok_.encode("scripted!", false));
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_, {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = {}, .script = script},
      ch, nullptr);
  Verdict v = Verdict::kContinue;
  size_t n = 0;
  while (v == Verdict::kContinue) {
    v = s.on_token(token(7));
    ++n;
  }
  EXPECT_EQ(n, script->size());
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  EXPECT_EQ(text_of(events), "scripted!");
  EXPECT_EQ(events.back().finish, FinishReason::kStop);
}

TEST_F(OutputStreamTest, IdsPastTheTokenizerHaveNoText) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_,
      {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = {}, .script = nullptr}, ch,
      nullptr);
  EXPECT_EQ(s.on_token(token(1023, FinishReason::kLength)), Verdict::kContinue);
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].text, "");
  EXPECT_EQ(events[0].finish, FinishReason::kLength);
}

// include_stop_str_in_output keeps the matched string; stop_reason names it either way, and the
// earliest match wins (ties: the first in the request's list).
TEST_F(OutputStreamTest, StopReasonAndIncludeStopStr) {
  for (const bool include : {false, true}) {
    SCOPED_TRACE(include);
    auto ch = std::make_shared<EventChannel>();
    OutputStream s(&tok_,
                   {.first_choice = 0,
                    .n = 1,
                    .skip_special_tokens = true,
                    .stop = {"world", "lo"},
                    .include_stop_str_in_output = include,
                    .stop_token_ids = {},
                    .script = nullptr},
                   ch, nullptr);
    Verdict v = Verdict::kContinue;
    for (int32_t id : tok_.encode("hello world", false))
      if (v == Verdict::kContinue) v = s.on_token(token(id));
    std::vector<OutputEvent> events;
    ch->wait(events, std::chrono::milliseconds(0));
    EXPECT_EQ(text_of(events), include ? "hello" : "hel");
    ASSERT_TRUE(events.back().stop_string.has_value());
    EXPECT_EQ(*events.back().stop_string, "lo");
    EXPECT_EQ(stop_reason_json(events.back()), "lo");
  }
}

// A stop id of the request is the stop_reason (its text only with include_stop_str_in_output);
// EOS and length have none.
TEST_F(OutputStreamTest, StopTokenIsTheStopReason) {
  const int32_t stop_id = tok_.encode("!", false).at(0);
  for (const bool include : {false, true}) {
    auto ch = std::make_shared<EventChannel>();
    OutputStream s(&tok_,
                   {.first_choice = 0,
                    .n = 1,
                    .skip_special_tokens = true,
                    .stop = {},
                    .include_stop_str_in_output = include,
                    .stop_token_ids = {stop_id},
                    .script = nullptr},
                   ch, nullptr);
    for (int32_t id : tok_.encode("hi", false)) s.on_token(token(id));
    s.on_token(token(stop_id, FinishReason::kStop));
    std::vector<OutputEvent> events;
    ch->wait(events, std::chrono::milliseconds(0));
    EXPECT_EQ(text_of(events), include ? "hi!" : "hi");
    EXPECT_EQ(stop_reason_json(events.back()), stop_id);
  }
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(&tok_,
                 {.first_choice = 0,
                  .n = 1,
                  .skip_special_tokens = true,
                  .stop = {},
                  .include_stop_str_in_output = false,
                  .stop_token_ids = {stop_id},
                  .script = nullptr},
                 ch, nullptr);
  s.on_token(token(kTokGlmEndOfText, FinishReason::kStop));
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  EXPECT_TRUE(stop_reason_json(events.back()).is_null());
}

TEST_F(OutputStreamTest, PromptLogprobsRideTheFirstEvent) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_,
      {.first_choice = 0, .n = 1, .skip_special_tokens = true, .stop = {}, .script = nullptr}, ch,
      nullptr);
  const std::vector<Logprobs> prompt{{{7, -1.5f}, 3, {}}, {{8, -0.5f}, 1, {}}};
  TokenEvent first = token(tok_.encode("a", false).at(0));
  first.prompt_logprobs = &prompt;
  s.on_token(first);
  s.on_token(token(tok_.encode("b", false).at(0), FinishReason::kLength));
  std::vector<OutputEvent> events;
  ch->wait(events, std::chrono::milliseconds(0));
  ASSERT_EQ(events.size(), 2u);
  ASSERT_EQ(events[0].prompt_logprobs.size(), 2u);
  EXPECT_EQ(events[0].prompt_logprobs[1].sampled.token_id, 8);
  EXPECT_TRUE(events[1].prompt_logprobs.empty());
  EXPECT_TRUE(stop_reason_json(events[1]).is_null());
}

// A failed engine step ends the request with its error on every open choice: the handlers
// answer a 500 (or an error event on a stream).
TEST_F(OutputStreamTest, AFailedEngineStepEndsEveryChoiceWithItsError) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(
      &tok_,
      {.first_choice = 2, .n = 2, .skip_special_tokens = true, .stop = {}, .script = nullptr}, ch,
      nullptr);
  const std::string error = "the engine step serving this request failed: out of memory";
  TokenEvent ev = token(-1, FinishReason::kAbort);
  ev.error = &error;
  EXPECT_EQ(s.on_token(ev), Verdict::kStop);
  std::vector<OutputEvent> events;
  ASSERT_TRUE(ch->wait(events, std::chrono::milliseconds(0)));
  ASSERT_EQ(events.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(events[i].choice, 2 + i);
    EXPECT_EQ(events[i].finish, FinishReason::kAbort);
    EXPECT_EQ(events[i].error, error);
  }
}

// --skip-tokenizer-init: no detokenizer; each event carries its token id and no text, and a
// request's stop token still ends the sample as its stop_reason.
TEST_F(OutputStreamTest, WithoutATokenizerEventsCarryIdsOnly) {
  auto ch = std::make_shared<EventChannel>();
  OutputStream s(nullptr,
                 {.first_choice = 0,
                  .n = 1,
                  .skip_special_tokens = true,
                  .stop = {},
                  .stop_token_ids = {99},
                  .script = nullptr},
                 ch, nullptr);
  EXPECT_EQ(s.on_token(token(150000)), Verdict::kContinue);  // past any tokenizer's vocabulary
  EXPECT_EQ(s.on_token(token(7)), Verdict::kContinue);
  EXPECT_EQ(s.on_token(token(99, FinishReason::kStop)), Verdict::kContinue);
  std::vector<OutputEvent> events;
  ASSERT_TRUE(ch->wait(events, std::chrono::milliseconds(0)));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(text_of(events), "");
  EXPECT_EQ(events[0].token_ids, std::vector<int32_t>{150000});
  EXPECT_EQ(events[1].token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(events[2].token_ids, std::vector<int32_t>{99});
  EXPECT_EQ(events[2].finish, FinishReason::kStop);
  EXPECT_EQ(stop_reason_json(events[2]), 99);
}

}  // namespace
}  // namespace mls::server
