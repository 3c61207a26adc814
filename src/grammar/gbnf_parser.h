// llama.cpp's GBNF grammar text → RuleSet. Supported: `name ::= body` rules (names of letters,
// digits, '-' and '_'; a rule ends at a newline outside parentheses, and may continue after a
// trailing '|'), "literals" and [classes] with \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH
// escapes, [^...] negation, `.` (any character), ( groups ), alternation |, and the postfix
// operators * + ? {m} {m,} {m,n}; # comments. The start rule is `root`. Token references
// (<[id]>, <name>) are not supported (GrammarError).
#pragma once

#include <string_view>

#include "grammar/rule_set.h"

namespace mls::grammar {

RuleSet parse_gbnf(std::string_view text);

}  // namespace mls::grammar
