#include "grammar/grammar_matcher.h"

#include <algorithm>

namespace mls::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::string gate,
                               std::string trigger)
    : g_(std::move(grammar)),
      state_(g_->initial_state()),
      gate_(std::move(gate)),
      trigger_(std::move(trigger)) {
  if (!trigger_.empty()) trigger_tokens_ = g_->trigger_tokens(trigger_);
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
