// The engine's TokenConstraint over a CompiledGrammar: the request's position is one DFA state
// id. With a gate marker (a reasoning model's "</think>"), the output is unconstrained until
// the marker has been generated, as vLLM leaves reasoning sections free; the grammar applies to
// what follows it (bytes of the marker's token after the marker included).
#pragma once

#include <memory>
#include <string>

#include "engine/token_constraint.h"
#include "grammar/compiled_grammar.h"

namespace mls::grammar {

class GrammarMatcher final : public TokenConstraint {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::string gate = "");

  std::unique_ptr<TokenConstraint> clone() const override;
  void fill_mask(std::span<uint32_t> mask) override;
  bool can_end() const override;
  bool advance(int32_t token) override;
  bool is_terminated() const override;

  // The current DFA state (tests).
  int32_t state() const { return state_; }
  bool gated() const { return !gate_.empty(); }

 private:
  std::shared_ptr<CompiledGrammar> g_;
  int32_t state_;
  std::string gate_;  // "" once passed (or when none)
  std::string tail_;  // output bytes that may start the marker
};

}  // namespace mls::grammar
