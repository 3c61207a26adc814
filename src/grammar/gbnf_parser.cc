#include "grammar/gbnf_parser.h"

#include <cctype>

#include "grammar/grammar_error.h"
#include "grammar/hex_escape.h"
#include "tokenizer/utf8.h"

namespace mls::grammar {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  RuleSet parse() {
    RuleSet rs;
    skip_space(true);
    while (pos_ < s_.size()) {
      std::string name = parse_name();
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      skip_space(true);
      Expr body = parse_alternatives(false);
      for (const auto& r : rs.rules)
        if (r.first == name) fail("rule '" + name + "' is defined twice");
      rs.rules.emplace_back(std::move(name), std::move(body));
      skip_space(true);
    }
    if (rs.rules.empty()) fail("the grammar defines no rules");
    return rs;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    size_t line = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) line += s_[i] == '\n';
    raise<GrammarError>("grammar: {} (line {})", why, line);
  }

  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  static bool word_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < s_.size() && word_char(s_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(s_.substr(start, pos_ - start));
  }

  char32_t hex_escape(int digits) {
    const auto cp = read_hex_escape(s_, pos_, digits);
    if (!cp)
      fail(fmt::format("a hex escape needs {} hex digits naming a Unicode scalar value", digits));
    return *cp;
  }

  // One character of a literal or class: a code point (escapes decoded, UTF-8 read whole).
  char32_t parse_char() {
    if (pos_ >= s_.size()) fail("unexpected end of grammar");
    const auto c = static_cast<unsigned char>(s_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (pos_ >= s_.size()) fail("unexpected end after '\\'");
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return hex_escape(2);
        case 'u':
          return hex_escape(4);
        case 'U':
          return hex_escape(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '/':
        case '^':
          return static_cast<char32_t>(e);
        default:
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
    const tok::CodePoint u = tok::read_utf8(s_.substr(pos_));
    if (u.len == 0) fail("invalid UTF-8");
    pos_ += u.len;
    return u.cp;
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

  Expr parse_alternatives(bool nested) {
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(nested));
    }
    return alts.size() == 1 ? std::move(alts[0]) : Expr::group(Expr::Kind::kAlt, std::move(alts));
  }

  Expr parse_sequence(bool nested) {
    std::vector<Expr> items;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        std::string bytes;
        while (pos_ < s_.size() && s_[pos_] != '"') tok::append_utf8(bytes, parse_char());
        if (pos_ >= s_.size()) fail("unterminated literal");
        ++pos_;
        items.push_back(Expr::bytes_of(std::move(bytes)));
      } else if (c == '[') {
        ++pos_;
        Expr cls;
        cls.kind = Expr::Kind::kClass;
        if (pos_ < s_.size() && s_[pos_] == '^') {
          cls.negated = true;
          ++pos_;
        }
        while (pos_ < s_.size() && s_[pos_] != ']') {
          const char32_t lo = parse_char();
          char32_t hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
          }
          cls.ranges.emplace_back(lo, hi);
        }
        if (pos_ >= s_.size()) fail("unterminated character class");
        ++pos_;
        items.push_back(std::move(cls));
      } else if (c == '.') {
        ++pos_;
        Expr any;
        any.kind = Expr::Kind::kClass;
        any.negated = true;
        items.push_back(std::move(any));
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        Expr inner = parse_alternatives(true);
        if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')'");
        ++pos_;
        items.push_back(std::move(inner));
      } else if (c == '<') {
        fail("token references (<...>) are not supported");
      } else if (word_char(c)) {
        const size_t save = pos_;
        std::string name = parse_name();
        // The next rule's definition starts here: the sequence has ended.
        size_t look = pos_;
        while (look < s_.size() && (s_[look] == ' ' || s_[look] == '\t')) ++look;
        if (s_.substr(look, 3) == "::=") {
          pos_ = save;
          break;
        }
        items.push_back(Expr::ref(std::move(name)));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) fail(std::string("'") + c + "' follows nothing");
        ++pos_;
        int mn = 0, mx = -1;
        if (c == '+') mn = 1;
        if (c == '?') mx = 1;
        if (c == '{') {
          skip_space(false);
          mn = parse_int();
          skip_space(false);
          mx = mn;
          if (pos_ < s_.size() && s_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            mx = pos_ < s_.size() && s_[pos_] == '}' ? -1 : parse_int();
            skip_space(false);
          }
          if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}'");
          ++pos_;
          if (mx >= 0 && mx < mn) fail("repetition {m,n} with n < m");
        }
        items.back() = Expr::repeat(std::move(items.back()), mn, mx);
      } else {
        break;
      }
      skip_space(nested);
    }
    if (items.size() == 1) return std::move(items[0]);
    return items.empty() ? Expr{} : Expr::group(Expr::Kind::kSeq, std::move(items));
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

RuleSet parse_gbnf(std::string_view text) {
  return Parser(text).parse();
}

}  // namespace mls::grammar
