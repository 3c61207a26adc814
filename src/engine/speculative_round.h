// One sequence's speculative round, the rules shared by the reference loop
// (speculative_generator.h) and the serving engine (engine.h): drafting through a fork of the
// request's output constraint (Drafter) and accepting the verified drafts (accept_round), with
// the seeded uniform streams that make a seed repeat its output. docs/speculative-decoding.md
// states the rules; nothing here runs a model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/rejection_sampler.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/speculative_stats.h"
#include "engine/token_constraint.h"

namespace mls {

// Test seam: replaces the token the MTP layer drafted for sequence position `position` (forces
// drafts right or wrong, so that every acceptance length is exercised on random MTP weights).
// With it every draft's q is the point mass at the token it returns, as a deterministic
// drafter's (exact for sampled output when the token does not depend on `drafted`).
using DraftOverride = std::function<int32_t(int64_t position, int32_t drafted)>;

// What one sequence's distributions depend on (one sample of its request).
struct SpeculativeSequence {
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;                  // the draws' streams
  int sample_index = 0;               // which sample of an n > 1 request: its own streams
  std::span<const int64_t> stop_ids;  // stop_token_ids plus EOS
  int64_t prompt_len = 0;
  int64_t vocab = 0;
};

// The draws' uniform streams, keyed by the output index they decide: a draft's draw and its
// acceptance test at that index, and the one residual or bonus draw of the round starting there.
// A round only consumes uniforms at indices up to the one it emits last, and the next round
// starts past it, so every draw that decides the output is fresh. The samples of an n > 1
// request draw from streams of their own (Sampler::uniform's sample index; sample 0's are an
// n = 1 request's), so they stay independent.
enum class SpeculativeStream : int64_t { kDraft = 1, kAccept = 2, kFinal = 3 };
double speculative_uniform(uint64_t seed, int sample_index, SpeculativeStream s,
                           int64_t output_index);

// The engine's mask of a constraint: its tokens, and the stop ids once the output may end.
std::vector<uint32_t> constraint_mask(TokenConstraint& tc, std::span<const int64_t> stop_ids,
                                      int64_t vocab);

// The distribution of the token after `tokens` (prompt, output and drafts) from one logits row,
// as the engine's Sampler draws it (min_tokens suppression from the output's length).
std::vector<double> token_distribution(Sampler& sampler, const SpeculativeSequence& s,
                                       const float* logits, std::span<const int32_t> tokens,
                                       std::span<const uint32_t> mask);

// A round's drafts as the next target step verifies them.
struct DraftRound {
  std::vector<int32_t> tokens;  // x_1..x_k'
  // The distribution each was drawn from; empty for a greedy draft drawn on the device, whose
  // distribution is the point mass at its token.
  std::vector<std::vector<double>> q;
  // Constrained: per verify row (k' + 1), the fork's mask before that draft (the masks the
  // drafts were drawn under; the last one after every draft). Empty: unconstrained.
  std::vector<std::vector<uint32_t>> masks;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Keeps the first `k` drafts (a step's token budget verifies fewer).
  void truncate(int64_t k);
  void clear();
};

// Draws one sequence's drafts, one MTP logits row at a time, through a fork of its constraint:
// the first draft the fork refuses (a token its grammar cannot take there, or a stop id before
// the output may end) ends the draft unverified; a stop id ends it after itself, as does a
// terminated constraint without stop ids and the k-th draft. Either add() draws from a logits
// row on the host, or a greedy draft drawn on the device under mask() is taken by add_drawn().
class Drafter {
 public:
  // `committed`: prompt and output; `constraint`: the request's (forked here, not advanced), or
  // null; at most `max_drafts` drafts. `override` (test seam) sees the sequence position
  // committed.size() + i for draft i.
  Drafter(const SpeculativeSequence& s, std::span<const int32_t> committed,
          const TokenConstraint* constraint, int64_t max_drafts, DraftOverride override = nullptr);

  // Draws the next draft from its MTP logits row; false once the draft has ended (no further
  // MTP step is needed for this sequence).
  bool add(Sampler& sampler, const float* mtp_logits, SpeculativeStats& stats);
  // The allowed-token mask of the next draft (the fork's, with the stop ids once it may end;
  // ops::apply_token_mask layout), empty without a constraint. Computed once per draft.
  std::span<const uint32_t> mask();
  // A greedy sequence's next draft, the first maximum of its MTP logits row under mask(), drawn
  // on the device with that row's logprob: a row without a finite maximum drafts nothing.
  // Otherwise as add().
  bool add_drawn(int32_t token, float logprob, SpeculativeStats& stats);
  bool ended() const { return ended_; }
  int32_t last() const { return round_.tokens.back(); }  // the latest draft
  // The round (the last verify row's mask added).
  DraftRound take();

 private:
  void end();
  // Takes draft `d` drawn from `q` (empty: the point mass at d), after the test seam.
  bool take_draft(int32_t d, std::vector<double> q, SpeculativeStats& stats);

  SpeculativeSequence s_;
  std::vector<int32_t> ext_;  // committed tokens, then the drafts
  int64_t output_index_;      // the first draft's output index
  std::unique_ptr<TokenConstraint> fork_;
  int64_t max_drafts_;
  DraftOverride override_;
  DraftRound round_;
  bool ended_ = false;
};

// Accepts one sequence's verified round: `target_logits` holds round.size() + 1 rows of vocab
// logits (row i: the target after the committed tokens and the first i drafts). Row i's
// distribution is plain decoding's after the first i drafts, under round.masks[i] (none when
// the round has none); the rejection rule then keeps a prefix of the drafts and draws one more
// token. Counts the round in `stats` when it verified drafts.
RejectionOutcome accept_round(Sampler& sampler, const SpeculativeSequence& s,
                              const float* target_logits, std::span<const int32_t> committed,
                              const DraftRound& round, SpeculativeStats& stats);

// The same for a greedy sequence whose verify rows were drawn on the device: `target_ids`
// holds round.size() + 1 ids, row i's first maximum under round.masks[i]. The rejection rule
// over point masses keeps the drafts up to the first that differs from its row's id and emits
// that row's id after them (the bonus when all match): accept_round's outcome, from ids alone.
RejectionOutcome accept_greedy_round(std::span<const int32_t> target_ids, const DraftRound& round,
                                     SpeculativeStats& stats);

}  // namespace mls
