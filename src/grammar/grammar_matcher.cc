#include "grammar/grammar_matcher.h"

#include <algorithm>

namespace mls::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::string gate)
    : g_(std::move(grammar)), state_(g_->initial_state()), gate_(std::move(gate)) {}

std::unique_ptr<TokenConstraint> GrammarMatcher::clone() const {
  return std::make_unique<GrammarMatcher>(*this);
}

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) {
  if (gate_.empty()) return g_->fill_mask(state_, mask);
  // Unconstrained: every id of the vocabulary (padding bits of the last word stay clear).
  std::fill(mask.begin(), mask.end(), ~0u);
  const int64_t v = g_->vocab().size();
  if (v % 32) mask.back() = (1u << (v % 32)) - 1;
}

bool GrammarMatcher::can_end() const {
  return !gate_.empty() || g_->accepting(state_);
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
    state_ = g_->next(state_, rest);
    return state_ != CompiledGrammar::kDead;
  }
  if (!t.matchable) return false;
  state_ = g_->next(state_, t.bytes);
  return state_ != CompiledGrammar::kDead;
}

bool GrammarMatcher::is_terminated() const {
  return gate_.empty() && g_->terminated(state_);
}

}  // namespace mls::grammar
