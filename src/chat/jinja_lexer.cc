#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include "chat/template_error.h"
#include "tokenizer/utf8.h"

namespace mls::chat::jinja {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Jinja normalizes every newline sequence to "\n" and drops one trailing newline.
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit(Token::kText, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop spaces and tabs between the line start and a block or comment.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) &&
            std::all_of(text.begin() + l_pos, text.end(),
                        [](char c) { return c == ' ' || c == '\t'; }))
          text.resize(l_pos);
      }
      if (!text.empty()) emit(Token::kText, text, pos);
      size_t after = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(tag, after);
      } else if (kind == '%' && is_raw(after)) {
        pos = lex_raw(tag, after);
      } else {
        pos = lex_tag(kind, tag, after);
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    emit(Token::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  [[noreturn]] void fail(size_t pos, const std::string& msg) const {
    const auto [line, col] = where(pos);
    throw TemplateSyntaxError(fmt::format("chat template line {}, column {}: {}", line, col, msg));
  }

  std::pair<int, int> where(size_t pos) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) - 1;
    return {static_cast<int>(it - line_starts_.begin()) + 1, static_cast<int>(pos - *it) + 1};
  }

  void emit(Token::Type type, std::string value, size_t pos) {
    const auto [line, col] = where(pos);
    tokens_.push_back({type, std::move(value), line, col});
  }

  // The end of a tag at `pos` applies its own whitespace control: "-" strips all following
  // white space, "+" keeps it, and a plain end of a block or comment eats one newline
  // (trim_blocks).
  size_t finish_tag(size_t pos, size_t end_len, bool minus, bool plus, bool trims) const {
    pos += end_len;
    if (minus) {
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    } else if (!plus && trims && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  size_t lex_comment(size_t tag, size_t pos) {
    const size_t end = src_.find("#}", pos);
    if (end == std::string::npos) fail(tag, "unterminated comment");
    const bool minus = end > pos && src_[end - 1] == '-';
    const bool plus = end > pos && src_[end - 1] == '+';
    return finish_tag(end, 2, minus, plus, true);
  }

  bool is_raw(size_t pos) const {
    while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    if (src_.compare(pos, 3, "raw") != 0) return false;
    pos += 3;
    while (pos < src_.size() && is_ws(src_[pos])) ++pos;
    return src_.compare(pos, 2, "%}") == 0 || src_.compare(pos, 3, "-%}") == 0;
  }

  size_t lex_raw(size_t tag, size_t pos) {
    pos = src_.find("%}", pos);
    pos = finish_tag(pos, 2, src_[pos - 1] == '-', false, true);
    // Find "{%[-] endraw [-]%}".
    for (size_t p = src_.find("{%", pos); p != std::string::npos; p = src_.find("{%", p + 2)) {
      size_t q = p + 2;
      const bool lminus = q < src_.size() && src_[q] == '-';
      if (lminus) ++q;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_ws(src_[q])) ++q;
      const bool rminus = src_.compare(q, 1, "-") == 0;
      if (rminus) ++q;
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string body = src_.substr(pos, p - pos);
      if (lminus)
        while (!body.empty() && is_ws(body.back())) body.pop_back();
      if (!body.empty()) emit(Token::kText, body, pos);
      return finish_tag(q, 2, rminus, false, true);
    }
    fail(tag, "missing {% endraw %}");
  }

  size_t lex_tag(char kind, size_t tag, size_t pos) {
    emit(kind == '{' ? Token::kVarBegin : Token::kBlockBegin, "", tag);
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;  // open brackets: a "}}" inside a dict literal does not end the tag
    while (true) {
      while (pos < src_.size() && is_ws(src_[pos])) ++pos;
      if (pos >= src_.size()) fail(tag, kind == '{' ? "unterminated '{{'" : "unterminated '{%'");
      if (depth <= 0) {
        const bool minus = src_[pos] == '-' &&
                           src_.compare(pos + 1, 1, std::string(1, close)) == 0 &&
                           src_.compare(pos + 2, 1, "}") == 0;
        const bool plus = kind == '%' && src_.compare(pos, 3, "+%}") == 0;
        if (minus || plus || (src_[pos] == close && src_.compare(pos + 1, 1, "}") == 0)) {
          emit(kind == '{' ? Token::kVarEnd : Token::kBlockEnd, "", pos);
          return finish_tag(pos, minus || plus ? 3 : 2, minus, plus, kind == '%');
        }
      }
      pos = lex_expression_token(pos, depth);
    }
  }

  size_t lex_expression_token(size_t pos, int& depth) {
    const char c = src_[pos];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos;
      while (end < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
      emit(Token::kName, src_.substr(pos, end - pos), pos);
      return end;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number(pos);
    if (c == '\'' || c == '"') return lex_string(pos);
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*",
                                       "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                       "]",  "{",  "}",  ",",  ".",  ":",  "|"};
    for (const char* op : kOps) {
      const size_t n = std::char_traits<char>::length(op);
      if (src_.compare(pos, n, op) == 0) {
        if (n == 1 && (c == '(' || c == '[' || c == '{')) ++depth;
        if (n == 1 && (c == ')' || c == ']' || c == '}')) --depth;
        emit(Token::kOp, op, pos);
        return pos + n;
      }
    }
    fail(pos, fmt::format("unexpected character '{}'", c));
  }

  size_t lex_number(size_t pos) {
    size_t end = pos;
    const auto digits = [&] {
      while (end < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_'))
        ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text = src_.substr(pos, end - pos);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    emit(is_float ? Token::kFloat : Token::kInt, text, pos);
    return end;
  }

  // String literals use Python's unicode-escape rules.
  size_t lex_string(size_t pos) {
    const char quote = src_[pos];
    std::string out;
    size_t i = pos + 1;
    for (; i < src_.size() && src_[i] != quote; ++i) {
      if (src_[i] != '\\') {
        out += src_[i];
        continue;
      }
      if (++i >= src_.size()) break;
      const char e = src_[i];
      // Exactly n hex digits (std::stoul would throw on none and accept signs, spaces and a
      // shorter prefix), naming a Unicode scalar value.
      const auto hex = [&](int n) {
        if (i + n >= src_.size()) fail(i, "truncated escape in string");
        char32_t cp = 0;
        for (int k = 1; k <= n; ++k) {
          const char h = src_[i + k];
          const int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (v < 0) fail(i + k, "bad hex digit in string escape");
          cp = cp * 16 + static_cast<char32_t>(v);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
          fail(i, "string escape is not a Unicode scalar value");
        i += n;
        tok::append_utf8(out, cp);
      };
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          out += '\\';
          out += e;
      }
    }
    if (i >= src_.size()) fail(pos, "unterminated string literal");
    emit(Token::kString, out, pos);
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace mls::chat::jinja
