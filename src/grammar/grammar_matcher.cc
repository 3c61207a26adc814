#include "grammar/grammar_matcher.h"

#include <algorithm>
#include <array>
#include <mutex>

namespace mls::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::string gate,
                               std::string trigger)
    : g_(std::move(grammar)),
      state_(g_->initial_state()),
      gate_(std::move(gate)),
      trigger_(std::move(trigger)) {
  if (!trigger_.empty()) trigger_tokens_ = shared_trigger_tokens(g_, trigger_);
}

std::shared_ptr<const GrammarMatcher::TriggerTokens> GrammarMatcher::shared_trigger_tokens(
    const std::shared_ptr<CompiledGrammar>& g, const std::string& trigger) {
  struct Entry {
    std::weak_ptr<CompiledGrammar> grammar;
    std::string trigger;
    std::shared_ptr<const TriggerTokens> tokens;
  };
  static std::mutex mu;
  static std::vector<Entry> kept;  // one per live grammar and trigger
  const std::lock_guard lock(mu);
  std::erase_if(kept, [](const Entry& e) { return e.grammar.expired(); });
  for (const Entry& e : kept)
    if (e.grammar.lock() == g && e.trigger == trigger) return e.tokens;
  kept.push_back({g, trigger, trigger_tokens(g->vocab(), trigger)});
  return kept.back().tokens;
}

std::shared_ptr<const GrammarMatcher::TriggerTokens> GrammarMatcher::trigger_tokens(
    const Vocabulary& v, const std::string& trigger) {
  auto tt = std::make_shared<TriggerTokens>();
  tt->completing.resize(trigger.size());
  // Only a token starting with one of the trigger's bytes past the first can complete a match.
  std::array<bool, 256> later{};
  for (size_t k = 1; k < trigger.size(); ++k) later[static_cast<uint8_t>(trigger[k])] = true;
  const std::string_view t(trigger);
  for (int32_t id = 0; id < v.size(); ++id) {
    const Vocabulary::Token& tok = v.token(id);
    if (!tok.matchable) continue;
    const std::string_view b(tok.bytes);
    if (b.size() >= t.size() && b.find(t) != std::string_view::npos) tt->containing.push_back(id);
    if (!later[static_cast<uint8_t>(b[0])]) continue;
    for (size_t k = 1; k < t.size(); ++k)
      if (b.starts_with(t.substr(k))) tt->completing[k].push_back(id);
  }
  return tt;
}

std::unique_ptr<TokenConstraint> GrammarMatcher::clone() const {
  return std::make_unique<GrammarMatcher>(*this);
}

void GrammarMatcher::fill_all(std::span<uint32_t> mask) const {
  // Every id of the vocabulary (padding bits of the last word stay clear).
  std::fill(mask.begin(), mask.end(), ~0u);
  const int64_t v = g_->vocab().size();
  if (v % 32) mask.back() = (1u << (v % 32)) - 1;
}

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) {
  if (!gate_.empty()) return fill_all(mask);
  if (trigger_.empty()) return g_->fill_mask(state_, mask);
  fill_all(mask);
  const auto refuse = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (!trigger_allows(id)) mask[static_cast<size_t>(id >> 5)] &= ~(1u << (id & 31));
  };
  refuse(trigger_tokens_->containing);
  for (size_t k = 1; k < trigger_.size() && k <= tail_.size(); ++k)
    if (tail_.compare(tail_.size() - k, k, trigger_, 0, k) == 0)
      refuse(trigger_tokens_->completing[k]);
}

bool GrammarMatcher::can_end() const {
  return !gate_.empty() || !trigger_.empty() || g_->accepting(state_);
}

bool GrammarMatcher::trigger_allows(int32_t token) {
  const std::string out = tail_ + g_->vocab().token(token).bytes;
  const size_t at = out.find(trigger_);
  return at == std::string::npos ||
         g_->next(state_, std::string_view(out).substr(at)) != CompiledGrammar::kDead;
}

bool GrammarMatcher::scan(std::string_view bytes) {
  tail_ += bytes;
  const size_t at = tail_.find(trigger_);
  if (at == std::string::npos) {
    if (tail_.size() >= trigger_.size()) tail_.erase(0, tail_.size() - (trigger_.size() - 1));
    return true;
  }
  const std::string from = tail_.substr(at);
  trigger_.clear();
  tail_.clear();
  state_ = g_->next(state_, from);
  return state_ != CompiledGrammar::kDead;
}

bool GrammarMatcher::advance(int32_t token) {
  if (token < 0 || token >= g_->vocab().size()) return false;
  const Vocabulary::Token& t = g_->vocab().token(token);
  if (!gate_.empty()) {
    tail_ += t.bytes;
    const size_t at = tail_.find(gate_);
    if (at == std::string::npos) {
      if (tail_.size() >= gate_.size()) tail_.erase(0, tail_.size() - (gate_.size() - 1));
      return true;
    }
    const std::string rest = tail_.substr(at + gate_.size());
    gate_.clear();
    tail_.clear();
    if (!trigger_.empty()) return scan(rest);
    state_ = g_->next(state_, rest);
    return state_ != CompiledGrammar::kDead;
  }
  if (!trigger_.empty()) return !t.matchable || scan(t.bytes);
  if (!t.matchable) return false;
  state_ = g_->next(state_, t.bytes);
  return state_ != CompiledGrammar::kDead;
}

bool GrammarMatcher::is_terminated() const {
  return gate_.empty() && trigger_.empty() && g_->terminated(state_);
}

}  // namespace mls::grammar
