// Compile-time token classification (the technique of XGrammar and llguidance): for every
// grammar position that can be the top of a matcher stack (a byte-set terminal), the matchable
// tokens split into those accepted whatever the stack below holds, those rejected whatever it
// holds, and the context-dependent rest, whose bytes run past the end of the top rule into the
// part of the stack the position does not determine. A state's mask is then the union of its
// stack tops' accepted sets plus those context-dependent tokens that pass a walk with the real
// stacks (CompiledGrammar::fill_mask).
//
// Where the walk stops knowing the stack: a rule referenced from one place only (the lowering's
// helper rules for repetitions, nested alternatives and character classes, and a tail reference
// inherits its caller's place) always returns there, so the walk continues there as the real
// matcher would. A rule referenced from several places returns to whichever the stack holds;
// there the walk goes on through every place it could return to (a superset of the real stack):
// a token that no continuation can consume is rejected, one that only a continuation consumes is
// context-dependent.
//
// The walk runs over a lazily built automaton of local stacks (each headed by "past the
// unknown part or not" and the rule whose continuation lies below its frames), shared by all
// positions, along the vocabulary's trie: one pruned trie walk per position, at construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_set.h"
#include "grammar/vocabulary.h"

namespace mls::grammar {

class TokenClassification {
 public:
  // Bound on the local automaton (GrammarError past it: the grammar is too ambiguous).
  static constexpr size_t kMaxLocalStates = 1 << 17;
  // Bound on the bytes classified ahead at construction (prebuild; past it, lazily).
  static constexpr size_t kMaxPrebuildSteps = 1 << 16;

  struct Stats {
    size_t positions = 0;          // classified positions
    size_t accepted = 0;           // tokens, summed over positions
    size_t context_dependent = 0;  // tokens, summed over positions
    size_t bytes = 0;              // storage of the sets
    size_t local_states = 0;
  };

  enum class Verdict : uint8_t { kAccepted, kRejected, kContextDependent };

  TokenClassification(const Grammar& g, const Vocabulary& v);
  ~TokenClassification();

  // `pos` must be a byte-set position of a rule reachable from the root.
  const TokenSet& accepted(int32_t pos) const { return entries_[slot(pos)].accepted; }
  // Sorted ids.
  const std::vector<int32_t>& context_dependent(int32_t pos) const {
    return entries_[slot(pos)].context_dependent;
  }
  const Stats& stats() const { return stats_; }

  // The same decision for any bytes (the rest of a context-dependent token once the real stack
  // has consumed its start). Extends the local automaton as needed: the caller serialises calls
  // (CompiledGrammar's mutex).
  Verdict classify(int32_t pos, std::string_view bytes);

 private:
  class LocalAutomaton;
  struct Entry {
    TokenSet accepted;
    std::vector<int32_t> context_dependent;
    int32_t start;  // the local automaton's state at this position
  };
  size_t slot(int32_t pos) const;
  void prebuild(const Vocabulary& v);

  std::vector<int32_t> slot_;  // per element position: index into entries_, or -1
  std::vector<Entry> entries_;
  Stats stats_;
  std::unique_ptr<LocalAutomaton> la_;
};

}  // namespace mls::grammar
