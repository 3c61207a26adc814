#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <cstring>

#include "grammar/grammar_error.h"

namespace mls::grammar {

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)) {
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

bool CompiledGrammar::terminated(int32_t state) {
  std::lock_guard lock(mu_);
  State* st = &states_[state];
  if (st->terminated < 0) {
    bool any = false;
    for (int b = 0; b < 256 && !any; ++b)
      any = next_locked(state, static_cast<uint8_t>(b)) != kDead;
    st = &states_[state];
    st->terminated = st->accepting && !any ? 1 : 0;
  }
  return st->terminated == 1;
}

size_t CompiledGrammar::num_states() const {
  std::lock_guard lock(mu_);
  return states_.size();
}

void CompiledGrammar::walk_trie(int32_t state, std::span<uint32_t> mask) {
  std::fill(mask.begin(), mask.end(), 0u);
  const auto& trie = vocab_->trie();
  const auto& ids = vocab_->token_ids();
  walk_stack_.resize(static_cast<size_t>(vocab_->max_depth()) + 1);
  walk_stack_[0] = state;
  const auto n = static_cast<int32_t>(trie.size());
  for (int32_t i = 0; i < n;) {
    const Vocabulary::Node& node = trie[i];
    const int32_t from = walk_stack_[node.depth - 1];
    int32_t to = trans_[static_cast<size_t>(from) * 256 + node.byte];
    if (to == kUnknown) to = next_locked(from, node.byte);
    if (to == kDead) {
      i = node.subtree_end;
      continue;
    }
    walk_stack_[node.depth] = to;
    for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k) {
      const int32_t t = ids[k];
      mask[t >> 5] |= 1u << (t & 31);
    }
    ++i;
  }
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
  walk_trie(state, mask);
  if (cached_masks_ < kMaxCachedMasks) {
    states_[state].mask.assign(mask.begin(), mask.end());
    ++cached_masks_;
  }
}

}  // namespace mls::grammar
