// A grammar bound to a vocabulary, run as a lazily built DFA over bytes. A state is the set of
// pushdown stacks the grammar can be in after some output (each stack a list of positions in
// Grammar::elements(), its top always a byte-set terminal; an empty stack means the output so
// far is a complete sentence). States are interned, and per state the byte transitions and
// what its allowed-token mask needs are computed on first use and kept: a request's matcher is
// one state id, a token advances it through a few table lookups, and a mask for a state seen
// before (by this or any earlier request with the same grammar) is a copy of its tops' union
// plus a few bits. A new state's mask comes from the
// token classification computed at construction (token_classification.h): the union of its
// stack tops' accepted sets (kept per distinct set of tops: states at another nesting or item
// count share it), plus the few context-dependent tokens that the DFA lets through, each
// walked only until the classification at the reached state's tops decides its rest. A state
// keeps only those tokens, not a mask of its own.
//
// A first request with a new grammar must meet the mask budget too, so construction builds, in
// breadth-first order from the initial state, the transitions, unions and passing tokens of up
// to `precomputed_states` states (the benchmark's JSON Schemas have 460 to 1,381 states in all
// and get every one); run time then only looks them up. Transitions are kept
// per byte class (bytes that every byte set of the grammar treats alike), which makes that
// search and a state's row (a few dozen entries, not 256) small.
//
// Thread-safe (one mutex): handler threads share compiled grammars through GrammarCompiler's
// cache while the engine advances and masks. Bounded: past kMaxStates states or kMaxStacks
// stacks in one state the grammar is rejected (GrammarError) as too ambiguous, where the matcher
// meets them (not while precomputing); the distinct unions of several tops (each as ids or a
// mask, whichever is smaller) are kept up to kMaxUnionBytes per grammar, at most half of it filled
// by precomputation (a state whose union is not kept computes its mask each time).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_classification.h"
#include "grammar/token_set.h"
#include "grammar/vocabulary.h"

namespace mls::grammar {

class CompiledGrammar {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr size_t kMaxStates = 1 << 17;
  static constexpr size_t kMaxStacks = 4096;
  static constexpr size_t kMaxUnionBytes = size_t{4} << 20;
  static constexpr size_t kPrecomputedStates = 2048;

  CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab,
                  size_t precomputed_states = kPrecomputedStates);

  const Vocabulary& vocab() const { return *vocab_; }
  int32_t initial_state() const { return 0; }

  // The state after `byte`, or kDead.
  int32_t next(int32_t state, uint8_t byte);
  // The state after every byte of `bytes`, or kDead.
  int32_t next(int32_t state, std::string_view bytes);
  // The output so far is a sentence of the grammar.
  bool accepting(int32_t state);
  // Accepting, and no byte can follow.
  bool terminated(int32_t state);
  // Bit t of `mask` (vocab().mask_words() words) set iff token t is matchable and its bytes
  // lead from `state` to a live state.
  void fill_mask(int32_t state, std::span<uint32_t> mask);

  size_t num_states() const;
  // Bytes held by the states, their transitions, unions and kept tokens, and the classification's
  // sets (containers' payloads; not the allocator's overhead).
  size_t memory_bytes() const;
  // Classes of bytes that lead from every state to the same state.
  size_t num_byte_classes() const { return class_bytes_.size(); }
  const TokenClassification& classification() const { return classes_; }

  // The matchable tokens that can complete `trigger` in free output (GrammarMatcher's lazy
  // trigger): those containing it, and per k in 1..|trigger|-1 those starting with its bytes
  // from k on (completing a match of k bytes).
  struct TriggerTokens {
    std::vector<int32_t> containing;
    std::vector<std::vector<int32_t>> completing;  // [k]
  };
  // Built on a trigger's first use and kept with the grammar, which the GrammarCompiler's cache
  // holds per tools list: a repeated list skips the vocabulary pass (1.2 ms for 154,880 ids).
  std::shared_ptr<const TriggerTokens> trigger_tokens(const std::string& trigger);

 private:
  using Stack = std::vector<int32_t>;
  struct State {
    std::vector<Stack> stacks;  // sorted, distinct; an empty stack = accepting
    int32_t tops = -1;          // index into tops_
    bool accepting = false;
    bool mask_known = false;
    std::vector<int32_t> live;  // once mask_known: its union's dependent tokens that pass
  };
  static constexpr int32_t kUnknown = -2;

  void expand(Stack& stack, std::vector<Stack>& out) const;
  int32_t intern(std::vector<Stack> stacks);
  int32_t next_locked(int32_t state, uint8_t byte);
  void precompute(size_t max_states);
  // What a state's mask starts from, per distinct set of stack tops.
  struct TopUnion {
    // The tops' accepted sets together, shared by the sets of tops with an equal union; null for
    // one top (its set makes the mask) or none.
    std::shared_ptr<const TokenSet> accepted;
    std::vector<int32_t> dependent;  // their context-dependent tokens not accepted, by bytes
  };
  struct Tops {
    std::vector<int32_t> positions;       // the non-empty stacks' tops, sorted, distinct
    std::unique_ptr<TopUnion> top_union;  // lazily; kept within kMaxUnionBytes
  };
  // Cached (within kMaxUnionBytes; past that built into `scratch`).
  const TopUnion& top_union(int32_t tops, TopUnion& scratch);
  // An equal union kept before, or `mask`'s tokens (`kept`: found, or stored within the budget).
  std::shared_ptr<const TokenSet> shared_union(std::vector<uint32_t> mask, bool& kept);
  // Sets `mask` to the accepted sets of the tops.
  void accepted_mask(int32_t tops, const TopUnion& u, std::span<uint32_t> mask) const;
  // The dependent tokens of `u` that lead from `state` to a live state.
  std::vector<int32_t> live_dependent(int32_t state, const TopUnion& u);
  // The same, kept in the state when `u` is a kept union (else walked into `scratch`).
  const std::vector<int32_t>& passing(int32_t state, const TopUnion& u, bool kept,
                                      std::vector<int32_t>& scratch);
  TokenClassification::Verdict rest_verdict(int32_t state, std::string_view rest);

  Grammar g_;
  std::shared_ptr<const Vocabulary> vocab_;
  TokenClassification classes_;
  mutable std::mutex mu_;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<uint8_t> class_bytes_;  // one byte of each class
  std::vector<State> states_;
  // Row per state, an entry per byte class. A deque: growing it never copies the table (a
  // first-seen state's cost).
  std::deque<int32_t> trans_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<Tops> tops_;
  std::unordered_map<std::string, int32_t> tops_ids_;  // key: the sorted tops' bytes
  std::unordered_multimap<size_t, std::shared_ptr<const TokenSet>> union_sets_;  // by hash
  size_t union_bytes_ = 0;  // of the kept unions' accepted sets
  std::unordered_map<std::string, std::shared_ptr<const TriggerTokens>> trigger_tokens_;
};

}  // namespace mls::grammar
