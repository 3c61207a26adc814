#include "engine/speculative_round.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mls {

double speculative_uniform(uint64_t seed, int sample_index, SpeculativeStream s,
                           int64_t output_index) {
  return Sampler::uniform(seed, sample_index, (static_cast<int64_t>(s) << 48) | output_index);
}

std::vector<uint32_t> constraint_mask(TokenConstraint& tc, std::span<const int64_t> stop_ids,
                                      int64_t vocab) {
  std::vector<uint32_t> mask(static_cast<size_t>((vocab + 31) / 32));
  tc.fill_mask(mask);
  if (tc.can_end())
    for (int64_t id : stop_ids)
      if (id >= 0 && id < vocab) mask[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
  return mask;
}

std::vector<double> token_distribution(Sampler& sampler, const SpeculativeSequence& s,
                                       const float* logits, std::span<const int32_t> tokens,
                                       std::span<const uint32_t> mask) {
  SampleInput in;
  in.params = s.params;
  in.prompt = tokens.first(static_cast<size_t>(s.prompt_len));
  in.output = tokens.subspan(static_cast<size_t>(s.prompt_len));
  in.seed = s.seed;
  if (static_cast<int64_t>(in.output.size()) < s.params->min_tokens) in.suppressed = s.stop_ids;
  in.allowed = mask;
  std::vector<double> probs(static_cast<size_t>(s.vocab));
  sampler.distribution(logits, in, probs);
  return probs;
}

void DraftRound::truncate(int64_t k) {
  if (k >= size()) return;
  tokens.resize(static_cast<size_t>(k));
  q.resize(static_cast<size_t>(k));
  if (!masks.empty()) masks.resize(static_cast<size_t>(k) + 1);
}

void DraftRound::clear() {
  tokens.clear();
  q.clear();
  masks.clear();
}

Drafter::Drafter(const SpeculativeSequence& s, std::span<const int32_t> committed,
                 const TokenConstraint* constraint, int64_t max_drafts, DraftOverride override)
    : s_(s),
      ext_(committed.begin(), committed.end()),
      output_index_(static_cast<int64_t>(committed.size()) - s.prompt_len),
      fork_(constraint ? constraint->clone() : nullptr),
      max_drafts_(max_drafts),
      override_(std::move(override)) {
  if (max_drafts_ <= 0) end();
}

std::span<const uint32_t> Drafter::mask() {
  if (ended_) raise<InternalError>("a draft's mask was asked for after the draft ended");
  if (!fork_) return {};
  if (round_.masks.size() == round_.tokens.size())
    round_.masks.push_back(constraint_mask(*fork_, s_.stop_ids, s_.vocab));
  return round_.masks.back();
}

bool Drafter::add(Sampler& sampler, const float* mtp_logits, SpeculativeStats& stats) {
  if (ended_) raise<InternalError>("a draft was added after the draft ended");
  const std::span<const uint32_t> allowed = mask();
  // A row that is not finite (the MTP layer attending over cache entries no catch-up wrote, in
  // blocks taken from the prefix cache) or leaves no mass drafts nothing: drafts only ever cost
  // acceptance, never the output.
  if (!std::all_of(mtp_logits, mtp_logits + s_.vocab, [](float v) { return std::isfinite(v); })) {
    end();
    return false;
  }
  std::vector<double> qi = token_distribution(sampler, s_, mtp_logits, ext_, allowed);
  double mass = 0;
  for (double v : qi) mass += v;
  if (!(mass > 0) || !std::isfinite(mass)) {
    end();
    return false;
  }
  const int32_t d =
      draw_token(qi, speculative_uniform(s_.seed, s_.sample_index, SpeculativeStream::kDraft,
                                         output_index_ + round_.size()));
  return take_draft(d, std::move(qi), stats);
}

bool Drafter::add_drawn(int32_t token, float logprob, SpeculativeStats& stats) {
  if (ended_) raise<InternalError>("a draft was added after the draft ended");
  if (!s_.params->greedy())
    raise<InternalError>("a device-drawn draft for a sequence that samples");
  if (fork_ && round_.masks.size() == round_.tokens.size())
    raise<InternalError>("a device-drawn draft without its mask");
  // As add(): a row without a finite maximum (all masked, or not finite) drafts nothing.
  if (!std::isfinite(logprob) || token < 0 || token >= s_.vocab) {
    end();
    return false;
  }
  return take_draft(token, {}, stats);
}

bool Drafter::take_draft(int32_t d, std::vector<double> q, SpeculativeStats& stats) {
  if (override_) {
    d = override_(static_cast<int64_t>(ext_.size()), d);
    if (d < 0 || d >= s_.vocab)
      raise<InvalidArgument>("a forced draft is id {} of a vocabulary of {}", d, s_.vocab);
    q.clear();  // the point mass at the forced token
  }
  // Structure: a stop id needs the constraint's consent, any other token must advance it.
  const bool stop = std::find(s_.stop_ids.begin(), s_.stop_ids.end(), d) != s_.stop_ids.end();
  if (fork_ && !(stop ? fork_->can_end() : fork_->advance(d))) {
    ++stats.num_structure_rejected;
    end();
    return false;
  }
  round_.tokens.push_back(d);
  round_.q.push_back(std::move(q));
  ext_.push_back(d);
  if (round_.size() == max_drafts_ || stop ||
      (fork_ && fork_->is_terminated() && s_.stop_ids.empty()))
    end();
  return !ended_;
}

void Drafter::end() {
  ended_ = true;
  if (fork_ && round_.masks.size() == round_.tokens.size())
    round_.masks.push_back(constraint_mask(*fork_, s_.stop_ids, s_.vocab));
}

DraftRound Drafter::take() {
  if (!ended_) end();
  return std::move(round_);
}

namespace {

void count_round(SpeculativeStats& stats, int64_t drafted, int64_t accepted) {
  if (drafted == 0) return;
  ++stats.num_drafts;
  stats.num_draft_tokens += drafted;
  stats.num_accepted_tokens += accepted;
  for (int64_t i = 0; i < accepted; ++i) ++stats.accepted_per_position[static_cast<size_t>(i)];
}

}  // namespace

RejectionOutcome accept_round(Sampler& sampler, const SpeculativeSequence& s,
                              const float* target_logits, std::span<const int32_t> committed,
                              const DraftRound& round, SpeculativeStats& stats) {
  const int64_t drafted = round.size();
  const int64_t n = static_cast<int64_t>(committed.size()) - s.prompt_len;  // output index
  if (!round.masks.empty() && static_cast<int64_t>(round.masks.size()) != drafted + 1)
    raise<InternalError>("a round of {} drafts with {} verify masks", drafted, round.masks.size());
  std::vector<int32_t> ext(committed.begin(), committed.end());
  ext.insert(ext.end(), round.tokens.begin(), round.tokens.end());
  std::vector<std::vector<double>> p;
  for (int64_t i = 0; i <= drafted; ++i) {
    const std::span<const uint32_t> mask =
        round.masks.empty() ? std::span<const uint32_t>()
                            : std::span<const uint32_t>(round.masks[static_cast<size_t>(i)]);
    p.push_back(token_distribution(sampler, s, target_logits + i * s.vocab,
                                   std::span(ext).first(committed.size() + static_cast<size_t>(i)),
                                   mask));
  }
  std::vector<std::vector<double>> q = round.q;
  for (int64_t i = 0; i < drafted; ++i) {
    std::vector<double>& qi = q[static_cast<size_t>(i)];
    if (!qi.empty()) continue;
    qi.assign(static_cast<size_t>(s.vocab), 0.0);
    qi[static_cast<size_t>(round.tokens[static_cast<size_t>(i)])] = 1.0;
  }
  std::vector<double> accept_u;
  for (int64_t i = 0; i < drafted; ++i)
    accept_u.push_back(
        speculative_uniform(s.seed, s.sample_index, SpeculativeStream::kAccept, n + i));
  const RejectionOutcome o =
      rejection_sample(round.tokens, q, p, accept_u,
                       speculative_uniform(s.seed, s.sample_index, SpeculativeStream::kFinal, n));
  count_round(stats, drafted, o.accepted);
  return o;
}

RejectionOutcome accept_greedy_round(std::span<const int32_t> target_ids, const DraftRound& round,
                                     SpeculativeStats& stats) {
  const int64_t drafted = round.size();
  if (static_cast<int64_t>(target_ids.size()) != drafted + 1)
    raise<InternalError>("a round of {} drafts with {} verify ids", drafted, target_ids.size());
  RejectionOutcome o;
  while (o.accepted < drafted && round.tokens[static_cast<size_t>(o.accepted)] ==
                                     target_ids[static_cast<size_t>(o.accepted)])
    ++o.accepted;
  o.token = target_ids[static_cast<size_t>(o.accepted)];
  count_round(stats, drafted, o.accepted);
  return o;
}

}  // namespace mls
