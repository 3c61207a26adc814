// Turns one row of logits into the next token of one sequence, vLLM semantics and order:
//   1. logprobs are those of the raw model distribution (log_softmax of the logits before any
//      penalty or temperature; vLLM's default "raw_logprobs"),
//   2. allowed_token_ids (every other id -inf), bad_words (the completing token of a banned
//      sequence -inf), logit_bias (added), min_tokens (EOS and stop ids -inf until min_tokens
//      tokens exist): vLLM's logits processors, in its order,
//      a structured output's mask then sets every token it does not allow to -inf,
//   3. repetition penalty over prompt + output tokens (positive logits divided, negative ones
//      multiplied), then frequency (× count) and presence (once) penalties over output tokens,
//   4. greedy: argmax (the first maximum); otherwise temperature, min_p, top_k, top_p, and one
//      draw from the remaining distribution: ops::cpu::sample_row (ops/sampling.h states the
//      arithmetic), which the device op reproduces.
// Draws come from a counter-based generator keyed by (seed, sample index, output position), so
// a seeded sample is the same whatever else is in the batch and after preemption.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"
#include "engine/sampling_params.h"
#include "ops/sampling.h"

namespace mls {

struct SampleInput {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;
  std::span<const int32_t> output;
  uint64_t seed = 0;  // the request's seed (or a random one when none was given)
  int sample_index = 0;
  std::span<const int64_t> suppressed;  // ids masked to -inf (min_tokens not reached yet)
  // Structured output: ceil(vocab / 32) words, bit t % 32 of word t / 32 set when token t may
  // be drawn (every other logit becomes -inf); empty: no constraint.
  std::span<const uint32_t> allowed;
};

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);

  // Samples from `logits` (vocab_size values, left untouched); fills `logprobs` when asked.
  int32_t sample(const float* logits, const SampleInput& in, Logprobs* logprobs);
  // The distribution sample() draws from (steps 2-4; step 4's through ops::cpu::row_distribution):
  // `probs` (vocab_size values) gets each token's probability. Speculative decoding applies it to
  // the target's and the draft's logits alike (engine/rejection_sampler.h).
  void distribution(const float* logits, const SampleInput& in, std::span<double> probs);

  // The steps above as building blocks (the tests check each on hand-made logits).
  void apply_constraints(std::span<float> logits, const SampleInput& in);
  void apply_penalties(std::span<float> logits, const SampleInput& in);
  static void log_softmax(std::span<const float> logits, std::span<float> out);
  // Uniform in [0, 1) for draw `step` of the stream (seed, sample_index).
  static double uniform(uint64_t seed, int sample_index, int64_t step);
  // Step 4's parameters for one draw (the op's view of the request; penalties are not in it).
  static ops::RowSampling row_sampling(const SampleInput& in);
  // `token`'s raw logprob and rank, and the k most likely tokens (prompt logprobs use it too).
  void fill_logprobs(const float* logits, int32_t token, int k, Logprobs& out);

 private:
  // Steps 2-3 into work_.
  void transform(const float* logits, const SampleInput& in);

  int64_t vocab_;
  std::vector<float> work_;      // penalised logits
  std::vector<float> scratch_;   // log-softmax
  std::vector<int32_t> counts_;  // output token counts (zeroed after use)
  std::vector<uint8_t> seen_;    // prompt ∪ output membership (zeroed after use)
  std::vector<float> kept_;      // allowed_token_ids' logits while the row is masked
  std::vector<int32_t> order_;   // ids sorted by logprob
  ops::cpu::SampleScratch draw_;
};

}  // namespace mls
