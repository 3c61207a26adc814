// Jinja2 lexer with the settings transformers uses (trim_blocks, lstrip_blocks, no
// keep_trailing_newline). Whitespace control is resolved here, so the parser only sees text
// that will be printed verbatim.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mls::chat::jinja {

struct Token {
  enum Type {
    kText,
    kVarBegin,
    kVarEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,
    kInt,
    kFloat,
    kOp,
    kEof
  };
  Type type;
  std::string value;  // text, name, unescaped string, number spelling or operator
  int line;
  int col;
};

// Throws TemplateSyntaxError with line and column on unterminated tags, strings or comments.
std::vector<Token> tokenize(std::string_view source);

}  // namespace mls::chat::jinja
