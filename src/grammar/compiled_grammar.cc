#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>

#include "grammar/grammar_error.h"

namespace mls::grammar {

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const Vocabulary> vocab,
                                 size_t precomputed_states)
    : g_(std::move(g)), vocab_(std::move(vocab)), classes_(g_, *vocab_) {
  // Byte classes: refine the partition of the 256 bytes by each byte set in turn.
  size_t n = 1;
  for (const ByteSet& set : g_.sets()) {
    std::array<int16_t, 512> renumber;
    renumber.fill(-1);
    int16_t m = 0;
    for (int b = 0; b < 256; ++b) {
      int16_t& c = renumber[2 * byte_class_[b] + (set.test(static_cast<uint8_t>(b)) ? 1 : 0)];
      if (c < 0) c = m++;
      byte_class_[b] = static_cast<uint8_t>(c);
    }
    n = static_cast<size_t>(m);
  }
  class_bytes_.assign(n, 0);
  for (int b = 255; b >= 0; --b) class_bytes_[byte_class_[b]] = static_cast<uint8_t>(b);
  std::vector<Stack> init;
  for (int32_t alt : g_.alternatives(g_.root())) {
    Stack s{alt};
    expand(s, init);
  }
  std::lock_guard lock(mu_);
  if (intern(std::move(init)) != 0) raise<InternalError>("the initial state must be state 0");
  precompute(precomputed_states);
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
  std::vector<int32_t> tops;
  for (const Stack& s : stacks)
    if (!s.empty()) tops.push_back(s.back());
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  std::string tops_key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(int32_t));
  const auto [t, added] =
      tops_ids_.emplace(std::move(tops_key), static_cast<int32_t>(tops_.size()));
  if (added) tops_.push_back({std::move(tops), nullptr});
  st.tops = t->second;
  st.stacks = std::move(stacks);
  states_.push_back(std::move(st));
  trans_.resize(trans_.size() + class_bytes_.size(), kUnknown);
  ids_.emplace(std::move(key), id);
  return id;
}

int32_t CompiledGrammar::next_locked(int32_t state, uint8_t byte) {
  // A reference into the deque stays valid while intern appends rows.
  int32_t& t = trans_[static_cast<size_t>(state) * class_bytes_.size() + byte_class_[byte]];
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
  t = intern(std::move(out));
  return t;
}

// Breadth-first: states_ grows behind the cursor. A state whose union the cache cannot keep
// (half of it is left to states first met at run time) keeps no tokens either: fill_mask
// computes its mask each time, as for such a state met at run time.
void CompiledGrammar::precompute(size_t max_states) {
  std::vector<int32_t> scratch_live;
  try {
    for (size_t s = 0; s < states_.size() && s < max_states; ++s) {
      const auto state = static_cast<int32_t>(s);
      for (uint8_t b : class_bytes_) next_locked(state, b);
      if (states_[s].mask_known) continue;
      const Tops& tops = tops_[states_[s].tops];
      if (tops.positions.size() > 1 && !tops.top_union && union_bytes_ >= kMaxUnionBytes / 2)
        continue;
      TopUnion scratch;
      const TopUnion& u = top_union(states_[s].tops, scratch);
      if (&u != &scratch) passing(state, u, true, scratch_live);
    }
  } catch (const GrammarError&) {
    // Too ambiguous somewhere: the error belongs to a request whose output gets there (it may
    // never), as without precomputation; the states built so far are complete and stay.
  }
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

size_t CompiledGrammar::memory_bytes() const {
  std::lock_guard lock(mu_);
  size_t bytes = classes_.stats().bytes + trans_.size() * sizeof(int32_t) + union_bytes_;
  for (const State& st : states_) {
    bytes += sizeof(State) + st.live.size() * sizeof(int32_t);
    // Each stack twice: in the state and in its interning key.
    for (const Stack& s : st.stacks) bytes += sizeof(Stack) + 2 * (s.size() + 1) * sizeof(int32_t);
  }
  for (const Tops& t : tops_) {
    bytes += sizeof(Tops) + 2 * t.positions.size() * sizeof(int32_t);
    if (t.top_union) bytes += sizeof(TopUnion) + t.top_union->dependent.size() * sizeof(int32_t);
  }
  return bytes;
}

const CompiledGrammar::TopUnion& CompiledGrammar::top_union(int32_t tops, TopUnion& scratch) {
  if (tops_[tops].top_union) return *tops_[tops].top_union;
  TopUnion u;
  const std::vector<int32_t>& positions = tops_[tops].positions;
  // One top's accepted set makes the mask as it is (it excludes its own dependent tokens);
  // several are ORed once. The dependent tokens not accepted go by bytes (through their ranks),
  // so that a walk shares the previous token's prefix; distinct.
  std::vector<uint32_t> accepted;
  if (positions.size() > 1) {
    accepted.assign(static_cast<size_t>(vocab_->mask_words()), 0u);
    for (int32_t p : positions) classes_.accepted(p).add_to(accepted);
  }
  for (int32_t p : positions)
    for (int32_t t : classes_.context_dependent(p))
      if (accepted.empty() || !((accepted[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u))
        u.dependent.push_back(vocab_->rank(t));
  std::sort(u.dependent.begin(), u.dependent.end());
  u.dependent.erase(std::unique(u.dependent.begin(), u.dependent.end()), u.dependent.end());
  for (int32_t& t : u.dependent) t = vocab_->token_ids()[static_cast<size_t>(t)];
  if (!accepted.empty()) {
    bool kept = false;
    u.accepted = shared_union(std::move(accepted), kept);
    if (!kept) {
      scratch = std::move(u);
      return scratch;
    }
  }
  tops_[tops].top_union = std::make_unique<TopUnion>(std::move(u));
  return *tops_[tops].top_union;
}

// Sets of tops at different places often accept the same tokens (the members of two objects,
// the contents of two strings): one copy serves them.
std::shared_ptr<const TokenSet> CompiledGrammar::shared_union(std::vector<uint32_t> mask,
                                                              bool& kept) {
  const size_t h = std::hash<std::string_view>()(
      std::string_view(reinterpret_cast<const char*>(mask.data()), mask.size() * sizeof(uint32_t)));
  std::vector<uint32_t> other(mask.size());
  for (auto [it, end] = union_sets_.equal_range(h); it != end; ++it) {
    it->second->copy_to(other);
    if (other == mask) {
      kept = true;
      return it->second;
    }
  }
  auto set = std::make_shared<const TokenSet>(TokenSet::from_mask(std::move(mask), *vocab_));
  kept = union_bytes_ + set->bytes() <= kMaxUnionBytes;
  if (kept) {
    union_bytes_ += set->bytes();
    union_sets_.emplace(h, set);
  }
  return set;
}

void CompiledGrammar::accepted_mask(int32_t tops, const TopUnion& u,
                                    std::span<uint32_t> mask) const {
  const std::vector<int32_t>& positions = tops_[tops].positions;
  if (positions.size() > 1)
    u.accepted->copy_to(mask);
  else if (positions.empty())
    std::fill(mask.begin(), mask.end(), 0u);
  else
    classes_.accepted(positions[0]).copy_to(mask);
}

std::vector<int32_t> CompiledGrammar::live_dependent(int32_t state, const TopUnion& u) {
  // A context-dependent token goes through the DFA (next_locked may grow states_) only until
  // the classification at the reached state's tops decides its rest. path[d] is the state after
  // d bytes of the previous token.
  std::vector<int32_t> live;
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
    for (size_t i = common;; ++i) {
      const int32_t s = path[i];
      if (s == kDead) break;
      if (i == bytes.size()) {
        live.push_back(t);
        break;
      }
      if (i > 0) {
        const TokenClassification::Verdict v = rest_verdict(s, std::string_view(bytes).substr(i));
        if (v != TokenClassification::Verdict::kContextDependent) {
          if (v == TokenClassification::Verdict::kAccepted) live.push_back(t);
          break;
        }
      }
      path.push_back(next_locked(s, static_cast<uint8_t>(bytes[i])));
    }
  }
  return live;
}

// Accepted if some stack top accepts `rest`, rejected if every one rejects it.
TokenClassification::Verdict CompiledGrammar::rest_verdict(int32_t state, std::string_view rest) {
  using V = TokenClassification::Verdict;
  V out = V::kRejected;
  for (int32_t p : tops_[states_[state].tops].positions) {
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
  TopUnion scratch;
  const TopUnion& u = top_union(states_[state].tops, scratch);
  accepted_mask(states_[state].tops, u, mask);
  std::vector<int32_t> scratch_live;
  for (int32_t t : passing(state, u, &u != &scratch, scratch_live))
    mask[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
}

// A union past the bound is rebuilt each time: so is the state's walk.
const std::vector<int32_t>& CompiledGrammar::passing(int32_t state, const TopUnion& u, bool kept,
                                                     std::vector<int32_t>& scratch) {
  if (states_[state].mask_known) return states_[state].live;
  std::vector<int32_t> live = live_dependent(state, u);
  if (!kept) {
    scratch = std::move(live);
    return scratch;
  }
  State& st = states_[state];  // after the walk, which may grow states_
  st.live = std::move(live);
  st.mask_known = true;
  return st.live;
}

std::shared_ptr<const CompiledGrammar::TriggerTokens> CompiledGrammar::trigger_tokens(
    const std::string& trigger) {
  {
    const std::lock_guard lock(mu_);
    if (const auto it = trigger_tokens_.find(trigger); it != trigger_tokens_.end())
      return it->second;
  }
  auto tt = std::make_shared<TriggerTokens>();
  tt->completing.resize(trigger.size());
  // Only a token starting with one of the trigger's bytes past the first can complete a match.
  std::array<bool, 256> later{};
  for (size_t k = 1; k < trigger.size(); ++k) later[static_cast<uint8_t>(trigger[k])] = true;
  const std::string_view t(trigger);
  const Vocabulary& v = *vocab_;
  for (int32_t id = 0; id < v.size(); ++id) {
    const Vocabulary::Token& tok = v.token(id);
    if (!tok.matchable) continue;
    const std::string_view b(tok.bytes);
    if (b.size() >= t.size() && b.find(t) != std::string_view::npos) tt->containing.push_back(id);
    if (!later[static_cast<uint8_t>(b[0])]) continue;
    for (size_t k = 1; k < t.size(); ++k)
      if (b.starts_with(t.substr(k))) tt->completing[k].push_back(id);
  }
  const std::lock_guard lock(mu_);
  return trigger_tokens_.emplace(trigger, std::move(tt)).first->second;
}

}  // namespace mls::grammar
