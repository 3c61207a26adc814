#include "grammar/regex_parser.h"

#include <cctype>

#include "grammar/grammar_error.h"
#include "grammar/hex_escape.h"
#include "grammar/utf8_ranges.h"
#include "tokenizer/utf8.h"

namespace mls::grammar {
namespace {

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}};

Expr class_of(Ranges r, bool negated) {
  Expr e;
  e.kind = Expr::Kind::kClass;
  e.ranges = std::move(r);
  e.negated = negated;
  return e;
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view s) : s_(s) {}

  Expr parse() {
    if (!s_.empty() && s_.front() == '^') ++pos_;
    Expr e = parse_alt();
    if (pos_ < s_.size()) fail(s_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    raise<GrammarError>("regex: {} at offset {} of '{}'", why, pos_, s_);
  }

  bool at_end_anchor() const { return pos_ + 1 == s_.size() && s_[pos_] == '$'; }

  Expr parse_alt() {
    std::vector<Expr> alts;
    alts.push_back(parse_seq());
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      alts.push_back(parse_seq());
    }
    return alts.size() == 1 ? std::move(alts[0]) : Expr::group(Expr::Kind::kAlt, std::move(alts));
  }

  Expr parse_seq() {
    std::vector<Expr> items;
    while (pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
      if (at_end_anchor()) {
        ++pos_;
        break;
      }
      Expr atom = parse_atom();
      parse_quantifiers(atom);
      items.push_back(std::move(atom));
    }
    if (items.size() == 1) return std::move(items[0]);
    return items.empty() ? Expr{} : Expr::group(Expr::Kind::kSeq, std::move(items));
  }

  int parse_int() {
    const size_t start = pos_;
    int v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > 100000) fail("repetition count too large");
    }
    if (pos_ == start) fail("expected a number in {m,n}");
    return v;
  }

  void parse_quantifiers(Expr& atom) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      int mn = 0, mx = -1;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        ++pos_;
        mn = 1;
      } else if (c == '?') {
        ++pos_;
        mx = 1;
      } else if (c == '{' && pos_ + 1 < s_.size() &&
                 std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
        ++pos_;
        mn = mx = parse_int();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          mx = pos_ < s_.size() && s_[pos_] == '}' ? -1 : parse_int();
        }
        if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
        ++pos_;
        if (mx >= 0 && mx < mn) fail("repetition {m,n} with n < m");
      } else {
        return;
      }
      // Lazy and possessive forms match the same strings.
      if (pos_ < s_.size() && (s_[pos_] == '?' || s_[pos_] == '+')) ++pos_;
      atom = Expr::repeat(std::move(atom), mn, mx);
    }
  }

  char32_t parse_utf8() {
    const tok::CodePoint u = tok::read_utf8(s_.substr(pos_));
    if (u.len == 0) fail("invalid UTF-8");
    pos_ += u.len;
    return u.cp;
  }

  char32_t hex(int digits) {
    const auto cp = read_hex_escape(s_, pos_, digits);
    if (!cp)
      fail(fmt::format("a hex escape needs {} hex digits naming a Unicode scalar value", digits));
    return *cp;
  }

  // After a backslash: a class escape (into `cls`, returns true) or one code point (`cp`).
  bool parse_escape(Ranges& cls, bool& negated, char32_t& cp) {
    if (pos_ >= s_.size()) fail("trailing backslash");
    const char e = s_[pos_++];
    switch (e) {
      case 'd':
        cls = kDigit;
        negated = false;
        return true;
      case 'D':
        cls = kDigit;
        negated = true;
        return true;
      case 'w':
        cls = kWord;
        negated = false;
        return true;
      case 'W':
        cls = kWord;
        negated = true;
        return true;
      case 's':
        cls = kSpace;
        negated = false;
        return true;
      case 'S':
        cls = kSpace;
        negated = true;
        return true;
      case 'n':
        cp = '\n';
        return false;
      case 'r':
        cp = '\r';
        return false;
      case 't':
        cp = '\t';
        return false;
      case 'f':
        cp = '\f';
        return false;
      case 'v':
        cp = '\v';
        return false;
      case '0':
        cp = 0;
        return false;
      case 'x':
        cp = hex(2);
        return false;
      case 'u':
        cp = hex(4);
        return false;
      case 'b':
      case 'B':
        fail("word boundaries (\\b, \\B) are not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) fail("back-references are not supported");
        if (std::isalnum(static_cast<unsigned char>(e)))
          fail(std::string("unsupported escape '\\") + e + "'");
        cp = static_cast<unsigned char>(e);
        return false;
    }
  }

  Expr parse_atom() {
    const char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (pos_ < s_.size() && s_[pos_] == '?') {
        ++pos_;
        if (pos_ < s_.size() && s_[pos_] == ':') {
          ++pos_;
        } else if (s_.substr(pos_, 2) == "P<" ||
                   (pos_ < s_.size() && s_[pos_] == '<' && pos_ + 1 < s_.size() &&
                    s_[pos_ + 1] != '=' && s_[pos_ + 1] != '!')) {
          const size_t close = s_.find('>', pos_);
          if (close == std::string_view::npos) fail("unterminated group name");
          pos_ = close + 1;
        } else {
          fail("look-around and inline flags ((?=, (?!, (?<=, (?i) ...) are not supported");
        }
      }
      Expr inner = parse_alt();
      if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return class_of({{'\n', '\n'}}, true);
    }
    if (c == '\\') {
      ++pos_;
      Ranges cls;
      bool neg = false;
      char32_t cp = 0;
      if (parse_escape(cls, neg, cp)) return class_of(std::move(cls), neg);
      std::string b;
      tok::append_utf8(b, cp);
      return Expr::bytes_of(std::move(b));
    }
    if (c == '^' || c == '$') fail("anchors are only supported at the start and end");
    if (c == '*' || c == '+' || c == '?') fail(std::string("'") + c + "' follows nothing");
    std::string b;
    tok::append_utf8(b, parse_utf8());
    return Expr::bytes_of(std::move(b));
  }

  Expr parse_class() {
    ++pos_;  // '['
    Expr e;
    e.kind = Expr::Kind::kClass;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      e.negated = true;
      ++pos_;
    }
    // A class escape inside [...] with negation ([\D]) is rewritten as its complement ranges.
    bool first = true;
    while (pos_ < s_.size() && (s_[pos_] != ']' || first)) {
      first = false;
      char32_t lo = 0;
      if (s_[pos_] == '\\') {
        ++pos_;
        Ranges cls;
        bool neg = false;
        if (parse_escape(cls, neg, lo)) {
          for (const auto& r : normalise_ranges(std::move(cls), neg)) e.ranges.push_back(r);
          continue;
        }
      } else if (s_[pos_] == '[' && pos_ + 1 < s_.size() && s_[pos_ + 1] == ':') {
        fail("POSIX classes ([:alpha:]) are not supported");
      } else {
        lo = parse_utf8();
      }
      char32_t hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (s_[pos_] == '\\') {
          ++pos_;
          Ranges cls;
          bool neg = false;
          if (parse_escape(cls, neg, hi)) fail("a class escape cannot end a range");
        } else {
          hi = parse_utf8();
        }
        if (hi < lo) fail("reversed range in a character class");
      }
      e.ranges.emplace_back(lo, hi);
    }
    if (pos_ >= s_.size()) fail("unterminated character class");
    ++pos_;
    return e;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

Expr parse_regex(std::string_view pattern) {
  return RegexParser(pattern).parse();
}

}  // namespace mls::grammar
