// A grammar in the form the matcher runs: rules whose alternatives are sequences of byte-set
// terminals and rule references, laid out in one array (an alternative ends with kEnd). Every
// character class is already its UTF-8 byte sequences, so matching is byte by byte.
// Construction from a RuleSet checks what the matcher relies on: every reference defined, no
// left recursion (also through rules that match the empty string: a pushdown matcher would
// loop), and alternatives that can never complete removed, so that every state reached can
// still finish — the mask never allows a dead end.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "grammar/rule_set.h"

namespace mls::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  bool operator==(const ByteSet&) const = default;
};

class Grammar {
 public:
  enum Kind : uint8_t { kSet, kRef, kEnd };
  struct Element {
    Kind kind;
    int32_t arg;  // kSet: index into sets(); kRef: rule index
  };

  // Throws GrammarError naming the problem (undefined rule, left recursion, empty language).
  static Grammar from_rules(const RuleSet& rules);

  const std::vector<Element>& elements() const { return elems_; }
  const std::vector<ByteSet>& sets() const { return sets_; }
  // Alternatives of rule r: positions of their first elements.
  const std::vector<int32_t>& alternatives(int32_t r) const { return rules_[r]; }
  int32_t root() const { return root_; }
  size_t num_rules() const { return rules_.size(); }

 private:
  std::vector<Element> elems_;
  std::vector<ByteSet> sets_;
  std::vector<std::vector<int32_t>> rules_;
  int32_t root_ = 0;
};

}  // namespace mls::grammar
