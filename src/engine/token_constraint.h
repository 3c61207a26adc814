// A per-request constraint on which tokens may be sampled (structured outputs: a JSON Schema,
// regex, choice list, grammar or tool-call syntax; grammar/ implements it). The engine keeps
// one per sample: before each draw it asks for the allowed-token mask (computed on a host
// thread while the step's forward runs) and hands it to the sampler with the logits; after each
// accepted token it advances the constraint. Stop tokens (EOS, stop_token_ids) are not the
// constraint's: it says when the output may end (can_end) and the engine then allows them, so
// the grammar decides when EOS is allowed and min_tokens still holds it back. A sequence whose
// constraint is terminated (complete, nothing may follow) finishes with "stop".
//
// Preemption recomputes the cache but keeps a sequence's tokens, so the state stays valid; an
// n > 1 request clones the prototype per sample.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace mls {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // A copy at the same point (for another sample of the request).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
  // Sets `mask` (ceil(vocab / 32) words; bit t % 32 of word t / 32 is token t) to the tokens
  // that keep the output completable. Stop tokens are not included. May run on any thread (one
  // call at a time per constraint).
  virtual void fill_mask(std::span<uint32_t> mask) = 0;
  // The output so far is complete: stop tokens may be sampled.
  virtual bool can_end() const = 0;
  // Accepts a sampled token; false when the constraint does not allow it (the state is then
  // unspecified and the sample is ended).
  virtual bool advance(int32_t token) = 0;
  // Complete, and no further token is allowed.
  virtual bool is_terminated() const = 0;
};

}  // namespace mls
