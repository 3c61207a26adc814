#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <cstring>

#include "grammar/grammar_error.h"

namespace mls::grammar {

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)), classes_(g_, *vocab_) {
  std::vector<Stack> init;
  for (int32_t alt : g_.alternatives(g_.root())) {
    Stack s{alt};
    expand(s, init);
  }
  std::lock_guard lock(mu_);
  if (intern(std::move(init)) != 0) raise<InternalError>("the initial state must be state 0");
}

// Moves `stack` to where its top is a terminal (or it is empty), following references and
// returning from finished alternatives; every resulting stack goes to `out`. A reference that
// ends its alternative replaces its caller's frame instead of returning to it, so right
// recursion (repetition) runs in constant stack depth.
void CompiledGrammar::expand(Stack& stack, std::vector<Stack>& out) const {
  const auto& elems = g_.elements();
  for (;;) {
    if (stack.empty()) {
      out.push_back(stack);
      return;
    }
    const int32_t pos = stack.back();
    const Grammar::Element& el = elems[pos];
    if (el.kind == Grammar::kEnd) {
      stack.pop_back();
      continue;
    }
    if (el.kind == Grammar::kSet) {
      out.push_back(stack);
      return;
    }
    stack.back() = pos + 1;
    if (elems[pos + 1].kind == Grammar::kEnd) stack.pop_back();
    const auto& alts = g_.alternatives(el.arg);
    for (size_t i = 0; i < alts.size(); ++i) {
      Stack s = stack;
      s.push_back(alts[i]);
      expand(s, out);
      if (out.size() > kMaxStacks)
        raise<GrammarError>("grammar: too ambiguous (more than {} parses at one point)",
                            kMaxStacks);
    }
    return;
  }
}

int32_t CompiledGrammar::intern(std::vector<Stack> stacks) {
  if (stacks.empty()) return kDead;
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  std::string key;
  for (const Stack& s : stacks) {
    const auto n = static_cast<int32_t>(s.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
  }
  const auto it = ids_.find(key);
  if (it != ids_.end()) return it->second;
  if (states_.size() >= kMaxStates)
    raise<GrammarError>("grammar: more than {} distinct matcher states", kMaxStates);
  const auto id = static_cast<int32_t>(states_.size());
  State st;
  st.accepting = stacks.front().empty();
  for (const Stack& s : stacks)
    if (!s.empty()) st.tops.push_back(s.back());
  std::sort(st.tops.begin(), st.tops.end());
  st.tops.erase(std::unique(st.tops.begin(), st.tops.end()), st.tops.end());
  st.stacks = std::move(stacks);
  states_.push_back(std::move(st));
  trans_.resize(trans_.size() + 256, kUnknown);
  ids_.emplace(std::move(key), id);
  return id;
}

int32_t CompiledGrammar::next_locked(int32_t state, uint8_t byte) {
  int32_t& t = trans_[static_cast<size_t>(state) * 256 + byte];
  if (t != kUnknown) return t;
  std::vector<Stack> out;
  const auto& elems = g_.elements();
  const auto& sets = g_.sets();
  for (const Stack& s : states_[state].stacks) {
    if (s.empty() || !sets[elems[s.back()].arg].test(byte)) continue;
    Stack n = s;
    n.back() += 1;
    expand(n, out);
    if (out.size() > kMaxStacks)
      raise<GrammarError>("grammar: too ambiguous (more than {} parses at one point)", kMaxStacks);
  }
  const int32_t id = intern(std::move(out));
  // `t` may dangle after intern grew trans_.
  trans_[static_cast<size_t>(state) * 256 + byte] = id;
  return id;
}

int32_t CompiledGrammar::next(int32_t state, uint8_t byte) {
  std::lock_guard lock(mu_);
  return next_locked(state, byte);
}

int32_t CompiledGrammar::next(int32_t state, std::string_view bytes) {
  std::lock_guard lock(mu_);
  for (char c : bytes) {
    state = next_locked(state, static_cast<uint8_t>(c));
    if (state == kDead) return kDead;
  }
  return state;
}

bool CompiledGrammar::accepting(int32_t state) {
  std::lock_guard lock(mu_);
  return states_[state].accepting;
}

// Every byte set is non-empty and every stack can complete, so a state allows no further byte
// exactly when its only stack is the empty one.
bool CompiledGrammar::terminated(int32_t state) {
  std::lock_guard lock(mu_);
  const std::vector<Stack>& stacks = states_[state].stacks;
  return stacks.size() == 1 && stacks[0].empty();
}

size_t CompiledGrammar::num_states() const {
  std::lock_guard lock(mu_);
  return states_.size();
}

const CompiledGrammar::TopUnion& CompiledGrammar::top_union(const std::vector<int32_t>& tops,
                                                            TopUnion& scratch) {
  const std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(int32_t));
  const auto it = top_unions_.find(key);
  if (it != top_unions_.end()) return it->second;
  TopUnion u;
  u.accepted.assign(static_cast<size_t>(vocab_->mask_words()), 0u);
  for (int32_t p : tops) classes_.accepted(p).add_to(u.accepted);
  for (int32_t p : tops)
    for (int32_t t : classes_.context_dependent(p))
      if (!((u.accepted[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u)) u.dependent.push_back(t);
  // By bytes, so that a walk shares the previous token's prefix; distinct.
  std::sort(u.dependent.begin(), u.dependent.end(), [&](int32_t a, int32_t b) {
    return vocab_->token(a).bytes < vocab_->token(b).bytes ||
           (vocab_->token(a).bytes == vocab_->token(b).bytes && a < b);
  });
  u.dependent.erase(std::unique(u.dependent.begin(), u.dependent.end()), u.dependent.end());
  if (top_unions_.size() >= kMaxTopUnions) {
    scratch = std::move(u);
    return scratch;
  }
  return top_unions_.emplace(key, std::move(u)).first->second;
}

void CompiledGrammar::compute_mask(int32_t state, std::span<uint32_t> mask) {
  TopUnion scratch;
  const TopUnion& u = top_union(states_[state].tops, scratch);
  std::memcpy(mask.data(), u.accepted.data(), mask.size() * sizeof(uint32_t));
  // A context-dependent token goes through the DFA (next_locked may grow states_) only until
  // the classification at the reached state's tops decides its rest. path[d] is the state after
  // d bytes of the previous token.
  std::vector<int32_t> path{state};
  const std::string* prev = nullptr;
  for (int32_t t : u.dependent) {
    const std::string& bytes = vocab_->token(t).bytes;
    size_t common = 0;
    if (prev)
      while (common + 1 < path.size() && common < bytes.size() && (*prev)[common] == bytes[common])
        ++common;
    path.resize(common + 1);
    prev = &bytes;
    bool live = false;
    for (size_t i = common;; ++i) {
      const int32_t s = path[i];
      if (s == kDead) break;
      if (i == bytes.size()) {
        live = true;
        break;
      }
      if (i > 0) {
        const TokenClassification::Verdict v = rest_verdict(s, std::string_view(bytes).substr(i));
        if (v != TokenClassification::Verdict::kContextDependent) {
          live = v == TokenClassification::Verdict::kAccepted;
          break;
        }
      }
      path.push_back(next_locked(s, static_cast<uint8_t>(bytes[i])));
    }
    if (live) mask[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
  }
}

// Accepted if some stack top accepts `rest`, rejected if every one rejects it.
TokenClassification::Verdict CompiledGrammar::rest_verdict(int32_t state, std::string_view rest) {
  using V = TokenClassification::Verdict;
  V out = V::kRejected;
  for (int32_t p : states_[state].tops) {
    const V v = classes_.classify(p, rest);
    if (v == V::kAccepted) return v;
    if (v == V::kContextDependent) out = v;
  }
  return out;
}

void CompiledGrammar::fill_mask(int32_t state, std::span<uint32_t> mask) {
  if (static_cast<int64_t>(mask.size()) != vocab_->mask_words())
    raise<InternalError>("fill_mask: {} words for a vocabulary of {}", mask.size(), vocab_->size());
  std::lock_guard lock(mu_);
  const std::vector<uint32_t>& cached = states_[state].mask;
  if (!cached.empty()) {
    std::memcpy(mask.data(), cached.data(), mask.size() * sizeof(uint32_t));
    return;
  }
  compute_mask(state, mask);
  if (cached_masks_ < kMaxCachedMasks) {
    states_[state].mask.assign(mask.begin(), mask.end());
    ++cached_masks_;
  }
}

}  // namespace mls::grammar
