// Speculative decoding's acceptance rule for sampled output (Leviathan et al. 2023, Chen et al.
// 2023; vLLM's rejection sampler): with k drafts x_1..x_k drawn from the draft's distributions
// q_1..q_k and the target's distributions p_1..p_{k+1} at the same positions (both from
// Sampler::distribution, so under the same sampling transforms), draft x_i is accepted with
// probability min(1, p_i(x_i) / q_i(x_i)) while every earlier one was; at the first rejection
// the token is drawn from norm(max(0, p_i - q_i)), and when all k are accepted a bonus token is
// drawn from p_{k+1}. Each emitted token then follows the target's distribution exactly,
// whatever q is. Greedy rows are point masses, for which the rule is exact-match verification.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mls {

struct RejectionOutcome {
  int64_t accepted = 0;  // drafts kept, a prefix
  int32_t token = 0;     // drawn after them: from the residual at a rejection, else the bonus
};

// `drafts` [k], `draft_probs` k rows and `target_probs` k + 1 rows (each a probability per
// vocabulary id, one size). `accept_uniforms` [k] and `final_uniform` lie in [0, 1), independent
// of each other and of the drafts' draws (the caller's seeded streams make it deterministic).
// A draft with q = 0 (a forced draft) is accepted iff p > 0. A residual of zero mass (only
// through rounding) falls back to p_i.
RejectionOutcome rejection_sample(std::span<const int32_t> drafts,
                                  std::span<const std::vector<double>> draft_probs,
                                  std::span<const std::vector<double>> target_probs,
                                  std::span<const double> accept_uniforms, double final_uniform);

// The first id whose cumulative weight exceeds u · Σ weights (weights >= 0, not all zero; u in
// [0, 1)): one draw. Ids of zero weight are never drawn.
int32_t draw_token(std::span<const double> weights, double u);

}  // namespace mls
