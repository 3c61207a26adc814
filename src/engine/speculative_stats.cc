#include "engine/speculative_stats.h"

#include "core/error.h"

namespace mls {

SpeculativeStats::SpeculativeStats(int64_t k) : accepted_per_position(static_cast<size_t>(k), 0) {}

SpeculativeStats& SpeculativeStats::operator+=(const SpeculativeStats& o) {
  if (o.accepted_per_position.size() != accepted_per_position.size())
    raise<InvalidArgument>("speculative stats of {} and {} draft positions do not add",
                           accepted_per_position.size(), o.accepted_per_position.size());
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  num_structure_rejected += o.num_structure_rejected;
  for (size_t i = 0; i < accepted_per_position.size(); ++i)
    accepted_per_position[i] += o.accepted_per_position[i];
  return *this;
}

double SpeculativeStats::acceptance_rate() const {
  return num_draft_tokens == 0
             ? 0.0
             : static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens);
}

double SpeculativeStats::mean_acceptance_length() const {
  return num_drafts == 0
             ? 1.0
             : 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts);
}

}  // namespace mls
