// The grammar every front end (GBNF text, regex, JSON Schema, choice lists) produces: named
// rules whose bodies are expressions over literal bytes, Unicode character classes, rule
// references, sequences, alternatives and bounded or unbounded repetition. grammar.h lowers it
// to the byte-level form the matcher runs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mls::grammar {

struct Expr {
  enum class Kind { kEmpty, kBytes, kClass, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  std::string bytes;                                  // kBytes (UTF-8 or any bytes)
  std::vector<std::pair<char32_t, char32_t>> ranges;  // kClass: inclusive code point ranges
  bool negated = false;                               // kClass
  std::string name;                                   // kRef
  std::vector<Expr> items;                            // kSeq, kAlt; kRepeat: one item
  int min = 0, max = -1;                              // kRepeat; max -1: unbounded

  static Expr bytes_of(std::string b) {
    Expr e;
    e.kind = Kind::kBytes;
    e.bytes = std::move(b);
    return e;
  }
  static Expr ref(std::string n) {
    Expr e;
    e.kind = Kind::kRef;
    e.name = std::move(n);
    return e;
  }
  static Expr group(Kind k, std::vector<Expr> items) {
    Expr e;
    e.kind = k;
    e.items = std::move(items);
    return e;
  }
  static Expr repeat(Expr item, int min, int max) {
    Expr e;
    e.kind = Kind::kRepeat;
    e.items.push_back(std::move(item));
    e.min = min;
    e.max = max;
    return e;
  }
};

struct RuleSet {
  std::vector<std::pair<std::string, Expr>> rules;  // in definition order
  std::string root = "root";
};

}  // namespace mls::grammar
