#include "grammar/token_classification.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar_error.h"

namespace mls::grammar {
namespace {

// A continuation: the root has returned, the output is complete.
constexpr int32_t kAccept = -1;
constexpr int32_t kDead = -1;
constexpr int32_t kUnknown = -2;

// [crossed, R, frames...]: `crossed` is 1 once the walk has returned into a continuation it
// could not know (the rest is then a superset of the real stack); R is the rule whose
// continuation lies below the frames (kAccept: none, the output is complete). With no frames the
// stack is a marker: R has just returned; it consumes nothing.
using LocalStack = std::vector<int32_t>;

}  // namespace

class TokenClassification::LocalAutomaton {
 public:
  explicit LocalAutomaton(const Grammar& g) : g_(g) {
    const auto& elems = g.elements();
    rule_of_.assign(elems.size(), -1);
    for (size_t r = 0; r < g.num_rules(); ++r)
      for (int32_t p : g.alternatives(static_cast<int32_t>(r)))
        for (;; ++p) {
          rule_of_[p] = static_cast<int32_t>(r);
          if (elems[p].kind == Grammar::kEnd) break;
        }
    // Where each rule returns to: after a reference, or (a tail reference, whose caller's frame
    // the callee replaces) wherever the caller returns to.
    std::vector<std::unordered_set<int32_t>> ret(g.num_rules());
    std::vector<std::vector<int32_t>> tail_callers(g.num_rules());
    ret[g.root()].insert(kAccept);
    for (size_t q = 0; q < elems.size(); ++q) {
      if (elems[q].kind != Grammar::kRef || rule_of_[q] < 0) continue;
      if (elems[q + 1].kind == Grammar::kEnd)
        tail_callers[elems[q].arg].push_back(rule_of_[q]);
      else
        ret[elems[q].arg].insert(static_cast<int32_t>(q + 1));
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < g.num_rules(); ++r)
        for (int32_t caller : tail_callers[r])
          for (int32_t c : ret[caller]) changed = ret[r].insert(c).second || changed;
    }
    ret_.resize(g.num_rules());
    for (size_t r = 0; r < g.num_rules(); ++r) {
      ret_[r].assign(ret[r].begin(), ret[r].end());
      std::sort(ret_[r].begin(), ret_[r].end());
    }
  }

  int32_t rule_of(int32_t pos) const { return rule_of_[pos]; }

  int32_t start(int32_t pos) { return intern({{0, rule_of_[pos], pos}}); }

  int32_t next(int32_t state, uint8_t byte) {
    int32_t t = trans_[static_cast<size_t>(state) * 256 + byte];
    if (t != kUnknown) return t;
    const auto& elems = g_.elements();
    const auto& sets = g_.sets();
    std::vector<LocalStack> out;
    std::unordered_set<int32_t> visited;
    for (const LocalStack& s : states_[state].stacks) {
      if (s.size() == 2 || !sets[elems[s.back()].arg].test(byte)) continue;
      LocalStack n = s;
      n.back() += 1;
      expand(n, out, visited);
    }
    t = intern(std::move(out));
    trans_[static_cast<size_t>(state) * 256 + byte] = t;
    return t;
  }

  // Some stack of the state got here without crossing into an unknown continuation.
  bool uncrossed(int32_t state) const { return states_[state].uncrossed; }
  // The positions atop the state's stacks (markers have none), sorted, distinct.
  void tops(int32_t state, std::vector<int32_t>& out) const {
    out.clear();
    for (const LocalStack& s : states_[state].stacks)
      if (s.size() > 2) out.push_back(s.back());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  size_t num_states() const { return states_.size(); }

 private:
  struct State {
    std::vector<LocalStack> stacks;
    bool uncrossed = false;
  };

  bool returns_to_one_place(int32_t r) const { return ret_[r].size() == 1 && ret_[r][0] >= 0; }

  // As CompiledGrammar::expand (a tail reference replaces its caller's frame), until the top is
  // a byte set; when the frames run out, R's continuation takes over: the one place it returns
  // to, or (crossing) each place it may return to, after leaving a marker if not crossed yet.
  // `visited` holds the continuations entered during this transition (the same one twice gives
  // the same stacks).
  void expand(LocalStack& s, std::vector<LocalStack>& out, std::unordered_set<int32_t>& visited) {
    const auto& elems = g_.elements();
    for (;;) {
      if (out.size() > CompiledGrammar::kMaxStacks)
        raise<GrammarError>("grammar: too ambiguous (more than {} parses at one point)",
                            CompiledGrammar::kMaxStacks);
      if (s.size() == 2) {
        const int32_t r = s[1];
        const bool crossed = s[0] != 0;
        if (r == kAccept) {
          out.push_back(std::move(s));
          return;
        }
        if (!crossed && returns_to_one_place(r)) {
          const int32_t c = ret_[r][0];
          if (!visited.insert(2 * c).second) return;
          s = {0, rule_of_[c], c};
          continue;
        }
        if (!crossed) out.push_back(s);
        for (int32_t c : ret_[r]) {
          if (c == kAccept) {
            out.push_back({1, kAccept});
            continue;
          }
          if (!visited.insert(2 * c + 1).second) continue;
          LocalStack n{1, rule_of_[c], c};
          expand(n, out, visited);
        }
        return;
      }
      const int32_t pos = s.back();
      const Grammar::Element& el = elems[pos];
      if (el.kind == Grammar::kEnd) {
        s.pop_back();
        continue;
      }
      if (el.kind == Grammar::kSet) {
        out.push_back(std::move(s));
        return;
      }
      s.back() = pos + 1;
      if (elems[pos + 1].kind == Grammar::kEnd) s.pop_back();
      for (int32_t alt : g_.alternatives(el.arg)) {
        LocalStack n = s;
        n.push_back(alt);
        expand(n, out, visited);
      }
      return;
    }
  }

  int32_t intern(std::vector<LocalStack> stacks) {
    if (stacks.empty()) return kDead;
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    std::string key;
    for (const LocalStack& s : stacks) {
      const auto n = static_cast<int32_t>(s.size());
      key.append(reinterpret_cast<const char*>(&n), sizeof n);
      key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
    }
    const auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    if (states_.size() >= TokenClassification::kMaxLocalStates)
      raise<GrammarError>("grammar: more than {} distinct token classification states",
                          TokenClassification::kMaxLocalStates);
    const auto id = static_cast<int32_t>(states_.size());
    State st;
    for (const LocalStack& s : stacks) st.uncrossed = st.uncrossed || s[0] == 0;
    st.stacks = std::move(stacks);
    states_.push_back(std::move(st));
    trans_.resize(trans_.size() + 256, kUnknown);
    ids_.emplace(std::move(key), id);
    return id;
  }

  const Grammar& g_;
  std::vector<int32_t> rule_of_;
  std::vector<std::vector<int32_t>> ret_;  // sorted; kAccept first when present
  std::vector<State> states_;
  std::vector<int32_t> trans_;
  std::unordered_map<std::string, int32_t> ids_;
};

namespace {

// The rules the root can reach.
std::vector<bool> reachable_rules(const Grammar& g) {
  std::vector<bool> seen(g.num_rules(), false);
  std::vector<int32_t> todo{g.root()};
  seen[g.root()] = true;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    for (int32_t p : g.alternatives(r))
      for (; g.elements()[p].kind != Grammar::kEnd; ++p) {
        const Grammar::Element& el = g.elements()[p];
        if (el.kind == Grammar::kRef && !seen[el.arg]) {
          seen[el.arg] = true;
          todo.push_back(el.arg);
        }
      }
  }
  return seen;
}

}  // namespace

TokenClassification::~TokenClassification() = default;

TokenClassification::TokenClassification(const Grammar& g, const Vocabulary& v)
    : la_(std::make_unique<LocalAutomaton>(g)) {
  LocalAutomaton& la = *la_;
  const auto& elems = g.elements();
  const auto& trie = v.trie();
  const auto& ids = v.token_ids();
  const std::vector<bool> reachable = reachable_rules(g);
  slot_.assign(elems.size(), -1);
  std::vector<int32_t> path(static_cast<size_t>(v.max_depth()) + 1);
  std::vector<int32_t> acc, dep;
  for (size_t pos = 0; pos < elems.size(); ++pos) {
    if (elems[pos].kind != Grammar::kSet || !reachable[la.rule_of(static_cast<int32_t>(pos))])
      continue;
    acc.clear();
    dep.clear();
    const int32_t start = la.start(static_cast<int32_t>(pos));
    path[0] = start;
    const auto n = static_cast<int32_t>(trie.size());
    for (int32_t i = 0; i < n;) {
      const Vocabulary::Node& node = trie[i];
      const int32_t to = la.next(path[node.depth - 1], node.byte);
      if (to == kDead) {
        i = node.subtree_end;
        continue;
      }
      path[node.depth] = to;
      std::vector<int32_t>& into = la.uncrossed(to) ? acc : dep;
      into.insert(into.end(), ids.begin() + node.tokens_begin, ids.begin() + node.tokens_end);
      ++i;
    }
    std::sort(dep.begin(), dep.end());
    slot_[pos] = static_cast<int32_t>(entries_.size());
    entries_.push_back({TokenSet(acc, v), dep, start});
    stats_.positions += 1;
    stats_.accepted += acc.size();
    stats_.context_dependent += dep.size();
    stats_.bytes += entries_.back().accepted.bytes() + dep.size() * sizeof(int32_t);
  }
  prebuild(v);
  stats_.local_states = la.num_states();
}

// At run time a context-dependent token goes through the real DFA until the classification at
// the reached state's tops decides its rest. After i bytes from a state with top `pos`, those
// tops are among the local stacks' tops after the same bytes from `pos` (the local automaton
// follows a superset of the real stacks): classifying each rest from each of them here builds
// the local states the run time needs, so that a first-seen mask mostly looks transitions up.
void TokenClassification::prebuild(const Vocabulary& v) {
  LocalAutomaton& la = *la_;
  size_t budget = kMaxPrebuildSteps;
  std::vector<int32_t> tops;
  for (size_t pos = 0; pos < slot_.size(); ++pos) {
    if (slot_[pos] < 0) continue;
    const Entry& e = entries_[static_cast<size_t>(slot_[pos])];
    for (int32_t t : e.context_dependent) {
      const std::string_view bytes = v.token(t).bytes;
      int32_t s = e.start;
      for (size_t i = 1; i < bytes.size(); ++i) {
        s = la.next(s, static_cast<uint8_t>(bytes[i - 1]));
        if (s == kDead) break;
        la.tops(s, tops);
        for (int32_t q : tops) {
          if (slot_[static_cast<size_t>(q)] < 0) continue;
          if (budget < bytes.size() - i) return;
          budget -= bytes.size() - i;
          classify(q, bytes.substr(i));
        }
      }
    }
  }
}

TokenClassification::Verdict TokenClassification::classify(int32_t pos, std::string_view bytes) {
  int32_t s = entries_[slot(pos)].start;
  for (char c : bytes) {
    s = la_->next(s, static_cast<uint8_t>(c));
    if (s == kDead) return Verdict::kRejected;
  }
  return la_->uncrossed(s) ? Verdict::kAccepted : Verdict::kContextDependent;
}

size_t TokenClassification::slot(int32_t pos) const {
  const int32_t s = slot_[static_cast<size_t>(pos)];
  if (s < 0) raise<InternalError>("token classification: position {} is not a reachable set", pos);
  return static_cast<size_t>(s);
}

}  // namespace mls::grammar
