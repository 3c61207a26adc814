#include "engine/rejection_sampler.h"

#include <algorithm>

#include "core/error.h"

namespace mls {

int32_t draw_token(std::span<const double> weights, double u) {
  double total = 0;
  for (double w : weights) total += w;
  if (!(total > 0)) raise<InvalidArgument>("draw_token: the weights have no mass");
  const double target = u * total;
  double acc = 0;
  int32_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    acc += weights[i];
    last = static_cast<int32_t>(i);
    if (target < acc) return last;
  }
  return last;  // u · total rounded up to the sum
}

RejectionOutcome rejection_sample(std::span<const int32_t> drafts,
                                  std::span<const std::vector<double>> draft_probs,
                                  std::span<const std::vector<double>> target_probs,
                                  std::span<const double> accept_uniforms, double final_uniform) {
  const size_t k = drafts.size();
  if (draft_probs.size() != k || target_probs.size() != k + 1 || accept_uniforms.size() != k)
    raise<InvalidArgument>(
        "rejection_sample: {} drafts need as many draft rows and uniforms and one more target "
        "row; found {} draft rows, {} target rows, {} uniforms",
        k, draft_probs.size(), target_probs.size(), accept_uniforms.size());
  RejectionOutcome out;
  for (; out.accepted < static_cast<int64_t>(k); ++out.accepted) {
    const auto i = static_cast<size_t>(out.accepted);
    const std::vector<double>& p = target_probs[i];
    const std::vector<double>& q = draft_probs[i];
    const int32_t x = drafts[i];
    if (x < 0 || static_cast<size_t>(x) >= p.size() || q.size() != p.size())
      raise<InvalidArgument>("rejection_sample: draft {} is id {} of a vocabulary of {}", i, x,
                             p.size());
    // u < p / q without dividing: q = 0 accepts iff p > 0.
    if (accept_uniforms[i] * q[static_cast<size_t>(x)] < p[static_cast<size_t>(x)]) continue;
    std::vector<double> residual(p.size());
    double mass = 0;
    for (size_t t = 0; t < p.size(); ++t) {
      residual[t] = std::max(0.0, p[t] - q[t]);
      mass += residual[t];
    }
    out.token = draw_token(mass > 0 ? std::span<const double>(residual) : p, final_uniform);
    return out;
  }
  out.token = draw_token(target_probs[k], final_uniform);
  return out;
}

}  // namespace mls
