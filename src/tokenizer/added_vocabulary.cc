#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "tokenizer/token_id.h"

namespace mls::tok {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Word characters for single_word: ASCII alphanumerics, '_' and any non-ASCII byte (letters of
// other scripts), matching the regex \w closely enough for token boundaries.
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

}  // namespace

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& added_tokens) {
  AddedVocabulary v;
  if (added_tokens.is_null()) return v;
  for (const auto& t : added_tokens) {
    AddedToken a;
    a.id = token_id(t.at("id"), "added_tokens");
    a.content = t.at("content").get<std::string>();
    a.special = t.value("special", false);
    a.single_word = t.value("single_word", false);
    a.lstrip = t.value("lstrip", false);
    a.rstrip = t.value("rstrip", false);
    if (a.content.empty()) raise<ConfigError>("tokenizer.json: added token {} is empty", a.id);
    v.tokens_.push_back(std::move(a));
  }
  for (size_t i = 0; i < v.tokens_.size(); ++i)
    v.by_first_byte_[static_cast<unsigned char>(v.tokens_[i].content[0])].push_back(i);
  for (auto& list : v.by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return v.tokens_[a].content.size() > v.tokens_[b].content.size();
    });
  return v;
}

const AddedToken* AddedVocabulary::match_at(std::string_view text, size_t pos) const {
  for (size_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = tokens_[i];
    if (text.compare(pos, t.content.size(), t.content) != 0) continue;
    if (t.single_word) {
      const size_t end = pos + t.content.size();
      if (pos > 0 && is_word_byte(text[pos - 1])) continue;
      if (end < text.size() && is_word_byte(text[end])) continue;
    }
    return &t;
  }
  return nullptr;
}

std::vector<Segment> AddedVocabulary::split(std::string_view text) const {
  std::vector<Segment> out;
  if (tokens_.empty()) {
    out.push_back({text});
    return out;
  }
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* t = match_at(text, pos);
    if (!t) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + t->content.size();
    if (t->lstrip)
      while (begin > plain_start && is_space(text[begin - 1])) --begin;
    if (t->rstrip)
      while (end < text.size() && is_space(text[end])) ++end;
    if (begin > plain_start) out.push_back({text.substr(plain_start, begin - plain_start)});
    out.push_back({text.substr(begin, end - begin), t->id});
    plain_start = pos = end;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start)});
  return out;
}

}  // namespace mls::tok
