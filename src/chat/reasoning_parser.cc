#include "chat/reasoning_parser.h"

#include <algorithm>

namespace mls::chat {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = kReasoningEnd;

size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningParser::ReasoningParser(bool starts_in_reasoning)
    : starts_in_reasoning_(starts_in_reasoning) {}

ReasoningDelta ReasoningParser::feed(std::string_view delta) {
  buffer_ += delta;
  ReasoningDelta out;
  run(out);
  return out;
}

void ReasoningParser::run(ReasoningDelta& out) {
  while (true) {
    switch (state_) {
      case State::kStart:
        if (buffer_.size() < kOpen.size() && kOpen.substr(0, buffer_.size()) == buffer_) return;
        if (buffer_.compare(0, kOpen.size(), kOpen) == 0) {
          buffer_.erase(0, kOpen.size());
          state_ = State::kReasoning;
        } else {
          state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
        }
        break;
      case State::kReasoning: {
        const size_t end = buffer_.find(kClose);
        if (end == std::string::npos) {
          const size_t hold = partial_suffix(buffer_, kClose);
          out.reasoning += buffer_.substr(0, buffer_.size() - hold);
          buffer_.erase(0, buffer_.size() - hold);
          return;
        }
        out.reasoning += buffer_.substr(0, end);
        buffer_.erase(0, end + kClose.size());
        state_ = State::kContent;
        break;
      }
      case State::kContent:
        out.content += buffer_;
        buffer_.clear();
        return;
    }
  }
}

ReasoningDelta ReasoningParser::finish() {
  ReasoningDelta out;
  run(out);
  if (state_ == State::kStart)
    (starts_in_reasoning_ ? out.reasoning : out.content) += buffer_;
  else
    out.reasoning += buffer_;  // a held partial "</think>" at the very end
  buffer_.clear();
  return out;
}

ReasoningDelta ReasoningParser::parse(std::string_view text) const {
  ReasoningParser fresh(starts_in_reasoning_);
  ReasoningDelta out = fresh.feed(text);
  const ReasoningDelta tail = fresh.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

}  // namespace mls::chat
