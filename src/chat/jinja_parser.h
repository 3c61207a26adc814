// Recursive-descent parser for the Jinja2 subset chat templates use, following Jinja2's
// operator precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary <
// filters/tests < postfix).
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace mls::chat::jinja {

// Throws TemplateSyntaxError with line and column.
Body parse(std::string_view source);

}  // namespace mls::chat::jinja
