// The engine's TokenConstraint over a CompiledGrammar: the request's position is one DFA state
// id. With a gate marker (a reasoning model's "</think>"), the output is unconstrained until
// the marker has been generated, as vLLM leaves reasoning sections free; the grammar applies to
// what follows it (bytes of the marker's token after the marker included).
//
// With a trigger (tool_choice "auto": the tool-call format's first marker, llama.cpp's lazy
// grammar), the output after the gate is free until the trigger appears, and the grammar applies
// from the trigger's first byte on (the trigger is the grammar's own start, unlike the gate): a
// token with text before the trigger has that text free and the rest matched. While free, the
// mask allows every token except those that would complete the trigger into bytes the grammar
// refuses, so a sampled token is never one advance() refuses. Special (non-matchable) tokens
// are free there and add no bytes, as the tool parser never sees them in the text.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/token_constraint.h"
#include "grammar/compiled_grammar.h"

namespace mls::grammar {

class GrammarMatcher final : public TokenConstraint {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::string gate = "",
                          std::string trigger = "");

  std::unique_ptr<TokenConstraint> clone() const override;
  void fill_mask(std::span<uint32_t> mask) override;
  bool can_end() const override;
  bool advance(int32_t token) override;
  bool is_terminated() const override;

  // The current DFA state (tests).
  int32_t state() const { return state_; }
  bool gated() const { return !gate_.empty(); }
  // Past the gate, the trigger not yet seen: the output is free.
  bool awaiting_trigger() const { return gate_.empty() && !trigger_.empty(); }

 private:
  // Free output: `bytes` join the tail; once it holds the trigger, the grammar takes the
  // trigger and what follows it. False when the grammar refuses them.
  bool scan(std::string_view bytes);
  // Whether `scan` would accept `token`'s bytes now (the matcher unchanged).
  bool trigger_allows(int32_t token);
  void fill_all(std::span<uint32_t> mask) const;

  std::shared_ptr<CompiledGrammar> g_;
  int32_t state_;
  std::string gate_;     // "" once passed (or when none)
  std::string trigger_;  // "" once seen (or when none)
  std::string tail_;     // output bytes that may start the marker awaited
  std::shared_ptr<const CompiledGrammar::TriggerTokens> trigger_tokens_;  // the grammar's
};

}  // namespace mls::grammar
