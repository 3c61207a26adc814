// A practical regular-expression subset → grammar expression. The whole output must match
// (anchors are implicit; a leading ^ and trailing $ are accepted and ignored). Supported:
// literal characters (UTF-8), escapes \n \r \t \f \v \0 \xHH \uHHHH and escaped punctuation,
// classes \d \w \s \D \W \S, [...] and [^...] with ranges and class escapes, `.` (any character
// but a newline), groups ( ), (?: ) and named (?<n> ) / (?P<n> ), alternation |, quantifiers
// ? * + {m} {m,} {m,n} (a lazy or possessive suffix is accepted: it does not change the language).
// Back-references, look-around, \b \B, inline flags and anchors elsewhere are rejected with a
// GrammarError naming the construct.
#pragma once

#include <string_view>

#include "grammar/rule_set.h"

namespace mls::grammar {

Expr parse_regex(std::string_view pattern);

}  // namespace mls::grammar
