// Splits model output into reasoning (inside <think>...</think>) and content, complete or
// streaming. Templates that open <think> in the prompt (GLM-5 with thinking on, DeepSeek with
// thinking=True) make the output start inside reasoning: set `starts_in_reasoning`. A model
// that writes <think> itself is handled either way: a leading <think> opens reasoning.
#pragma once

#include <string>
#include <string_view>

namespace mls::chat {

// Where a reasoning section ends (structured outputs leave the section before it unconstrained).
inline constexpr std::string_view kReasoningEnd = "</think>";

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning);

  ReasoningDelta feed(std::string_view delta);
  // End of output: releases held-back text (an unterminated reasoning block stays reasoning).
  ReasoningDelta finish();

  // Parses a whole output with a fresh state.
  ReasoningDelta parse(std::string_view text) const;

 private:
  enum class State { kStart, kReasoning, kContent };
  void run(ReasoningDelta& out);

  bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string buffer_;
};

}  // namespace mls::chat
