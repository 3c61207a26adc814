#include "chat/tool_parser.h"

#include <algorithm>
#include <random>

#include "chat/jinja_value.h"
#include "core/error.h"

namespace mls::chat {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool all_ws(std::string_view s) {
  return std::all_of(s.begin(), s.end(), is_ws);
}
bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// Length of the longest suffix of `s` that is a proper prefix of `marker`: text that might
// still become the marker and must be held back.
size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// True when `s` is a proper prefix of `marker` (more text could complete it).
bool could_become(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.substr(0, s.size()) == s;
}

std::string random_call_id(int) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

}  // namespace

std::string_view trim_space(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

std::string python_json(const nlohmann::ordered_json& value) {
  return jinja::to_json(jinja::Value::from_json(value), jinja::JsonOptions{});
}

std::vector<std::string> object_fragments(
    const std::vector<std::pair<std::string, std::string>>& members) {
  std::vector<std::string> out{"{"};
  for (size_t i = 0; i < members.size(); ++i)
    out.push_back((i ? ", " : "") + python_json(members[i].first) + ": " + members[i].second);
  out.push_back("}");
  return out;
}

ToolParser::ToolParser(ToolCallFormat format, ToolCallIdGenerator ids)
    : format_(std::move(format)), ids_(ids ? std::move(ids) : random_call_id) {}

void ToolParser::emit_content(std::string text, std::vector<ToolEvent>& out) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == ToolEvent::kContent)
    out.back().text += text;
  else
    out.push_back({ToolEvent::kContent, std::move(text), -1, "", ""});
}

// The section or call being parsed turned out malformed: its text is ordinary content.
void ToolParser::fail_pending(std::vector<ToolEvent>& out) {
  emit_content(std::move(raw_), out);
  raw_.clear();
  state_ = State::kContent;
}

std::vector<ToolEvent> ToolParser::feed(std::string_view delta) {
  buffer_ += delta;
  std::vector<ToolEvent> out;
  run(out);
  return out;
}

void ToolParser::run(std::vector<ToolEvent>& out) {
  const bool sectioned = !format_.section_begin.empty();
  const std::string& opener = format_.opener();
  while (true) {
    switch (state_) {
      case State::kContent: {
        const size_t at = buffer_.find(opener);
        if (at == std::string::npos) {
          const size_t hold = partial_marker_suffix(buffer_, opener);
          emit_content(buffer_.substr(0, buffer_.size() - hold), out);
          buffer_.erase(0, buffer_.size() - hold);
          return;
        }
        emit_content(buffer_.substr(0, at), out);
        raw_ = opener;
        buffer_.erase(0, at + opener.size());
        state_ = sectioned ? State::kSection : State::kCall;
        break;
      }
      case State::kSection:
      case State::kAfterCall: {
        size_t ws = 0;
        while (ws < buffer_.size() && is_ws(buffer_[ws])) ++ws;
        const std::string_view rest = std::string_view(buffer_).substr(ws);
        if (rest.empty()) return;  // white space between calls: undecided until more arrives
        if (starts_with(rest, format_.call_begin)) {
          raw_ += buffer_.substr(0, ws + format_.call_begin.size());
          buffer_.erase(0, ws + format_.call_begin.size());
          state_ = State::kCall;
        } else if (state_ == State::kSection && starts_with(rest, format_.section_end)) {
          buffer_.erase(0, ws + format_.section_end.size());
          raw_.clear();
          state_ = State::kContent;
        } else if (could_become(rest, format_.call_begin) ||
                   (state_ == State::kSection && could_become(rest, format_.section_end))) {
          return;
        } else if (state_ == State::kAfterCall) {
          // Text after a call: the separating white space belongs to the content.
          raw_.clear();
          state_ = State::kContent;
        } else {
          raw_ += buffer_.substr(0, ws);
          buffer_.erase(0, ws);
          fail_pending(out);
        }
        break;
      }
      case State::kCall: {
        const size_t end = buffer_.find(format_.call_end);
        if (end == std::string::npos) return;
        const std::string body = buffer_.substr(0, end);
        buffer_.erase(0, end + format_.call_end.size());
        std::optional<ParsedCall> call = format_.parse_call(body);
        if (!call) {
          raw_ += body + format_.call_end;
          fail_pending(out);
          break;
        }
        const int index = next_index_++;
        ToolEvent start{ToolEvent::kToolCallStart, "", index, ids_(index), call->name};
        out.push_back(std::move(start));
        for (auto& frag : call->argument_fragments)
          out.push_back({ToolEvent::kArguments, std::move(frag), index, "", ""});
        raw_.clear();
        state_ = sectioned ? State::kSection : State::kAfterCall;
        break;
      }
    }
  }
}

std::vector<ToolEvent> ToolParser::finish() {
  std::vector<ToolEvent> out;
  run(out);
  const std::string rest = raw_ + buffer_;
  const bool between_calls = state_ == State::kAfterCall || state_ == State::kSection;
  if (!(between_calls && all_ws(rest))) emit_content(rest, out);
  raw_.clear();
  buffer_.clear();
  state_ = State::kContent;
  return out;
}

ToolParseResult ToolParser::parse(std::string_view text) const {
  ToolParser fresh(format_, ids_);
  std::vector<ToolEvent> events = fresh.feed(text);
  for (auto& e : fresh.finish()) events.push_back(std::move(e));
  return collect_events(events);
}

ToolParseResult collect_events(const std::vector<ToolEvent>& events) {
  ToolParseResult r;
  for (const auto& e : events) {
    switch (e.kind) {
      case ToolEvent::kContent:
        r.content += e.text;
        break;
      case ToolEvent::kToolCallStart:
        r.tool_calls.push_back({e.id, e.name, ""});
        break;
      case ToolEvent::kArguments:
        r.tool_calls.at(e.index).arguments += e.text;
        break;
    }
  }
  return r;
}

std::vector<std::string> tool_parser_names() {
  return {"glm47", "deepseek_v31", "deepseek_v32"};
}

ToolCallFormat tool_call_format(std::string_view name, const nlohmann::ordered_json& tools) {
  if (name == "glm47" || name == "glm45") return glm47_format(tools);
  if (name == "deepseek_v31") return deepseek_v31_format();
  if (name == "deepseek_v32") return deepseek_v32_format();
  raise<InvalidArgument>("unknown tool-call parser '{}' (known: glm47, deepseek_v31, deepseek_v32)",
                         name);
}

}  // namespace mls::chat
