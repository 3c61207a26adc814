#include "engine/sampler.h"

#include <algorithm>
#include <limits>

#include "core/hash.h"

namespace mls {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

Sampler::Sampler(int64_t vocab_size)
    : vocab_(vocab_size),
      work_(vocab_size),
      scratch_(vocab_size),
      counts_(vocab_size, 0),
      seen_(vocab_size, 0) {
  order_.reserve(vocab_size);
}

double Sampler::uniform(uint64_t seed, int sample_index, int64_t step) {
  const uint64_t r = splitmix64(
      seed ^ splitmix64(static_cast<uint64_t>(sample_index) ^
                        splitmix64(static_cast<uint64_t>(step) + 0x5851f42d4c957f2dULL)));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

ops::RowSampling Sampler::row_sampling(const SampleInput& in) {
  const SamplingParams& p = *in.params;
  return {.temperature = p.greedy() ? 0.0 : p.temperature,
          .top_k = p.top_k,
          .top_p = p.top_p,
          .min_p = p.min_p,
          .uniform = uniform(in.seed, in.sample_index, static_cast<int64_t>(in.output.size()))};
}

void Sampler::log_softmax(std::span<const float> logits, std::span<float> out) {
  const double lse = ops::cpu::log_sum_exp(logits);
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - lse);
}

void Sampler::apply_constraints(std::span<float> logits, const SampleInput& in) {
  const SamplingParams& p = *in.params;
  if (!p.allowed_token_ids.empty()) {
    kept_.clear();
    for (int32_t id : p.allowed_token_ids) kept_.push_back(logits[id]);
    std::fill(logits.begin(), logits.end(), kNegInf);
    for (size_t i = 0; i < kept_.size(); ++i) logits[p.allowed_token_ids[i]] = kept_[i];
  }
  for (const std::vector<int32_t>& word : p.bad_words_token_ids) {
    const size_t prefix = word.size() - 1;
    if (prefix > in.output.size()) continue;
    if (std::equal(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(prefix),
                   in.output.end() - static_cast<std::ptrdiff_t>(prefix)))
      logits[word.back()] = kNegInf;
  }
  for (const auto& [id, bias] : p.logit_bias) logits[id] += bias;
  for (int64_t id : in.suppressed) logits[id] = kNegInf;
}

void Sampler::apply_penalties(std::span<float> logits, const SampleInput& in) {
  const SamplingParams& p = *in.params;
  if (p.repetition_penalty != 1.0) {
    const auto rp = static_cast<float>(p.repetition_penalty);
    auto mark = [&](int32_t t) {
      if (seen_[t]) return;
      seen_[t] = 1;
      logits[t] = logits[t] > 0 ? logits[t] / rp : logits[t] * rp;
    };
    for (int32_t t : in.prompt) mark(t);
    for (int32_t t : in.output) mark(t);
    for (int32_t t : in.prompt) seen_[t] = 0;
    for (int32_t t : in.output) seen_[t] = 0;
  }
  if (p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) {
    for (int32_t t : in.output) ++counts_[t];
    for (int32_t t : in.output) {
      if (counts_[t] == 0) continue;  // already applied for this id
      logits[t] -= static_cast<float>(p.frequency_penalty * counts_[t] + p.presence_penalty);
      counts_[t] = 0;
    }
  }
}

void Sampler::transform(const float* logits, const SampleInput& in) {
  std::copy(logits, logits + vocab_, work_.begin());
  apply_constraints(work_, in);
  for (size_t w = 0; w < in.allowed.size(); ++w) {
    const uint32_t m = in.allowed[w];
    if (m == ~0u) continue;
    const auto first = static_cast<int64_t>(w) * 32;
    for (int64_t t = first; t < std::min(vocab_, first + 32); ++t)
      if (!((m >> (t - first)) & 1u)) work_[t] = kNegInf;
  }
  apply_penalties(work_, in);
}

int32_t Sampler::sample(const float* logits, const SampleInput& in, Logprobs* logprobs) {
  transform(logits, in);
  const int32_t token = ops::cpu::sample_row(work_, row_sampling(in), draw_);
  if (logprobs) fill_logprobs(logits, token, in.params->logprobs, *logprobs);
  return token;
}

void Sampler::distribution(const float* logits, const SampleInput& in, std::span<double> probs) {
  transform(logits, in);
  const auto total =
      static_cast<double>(ops::cpu::row_distribution(work_, row_sampling(in), draw_));
  std::fill(probs.begin(), probs.end(), 0.0);
  for (size_t i = 0; i < draw_.order.size(); ++i)
    probs[draw_.order[i]] = static_cast<double>(draw_.mass[i]) / total;
}

void Sampler::fill_logprobs(const float* logits, int32_t token, int k, Logprobs& out) {
  log_softmax({logits, static_cast<size_t>(vocab_)}, scratch_);
  const float lp = scratch_[token];
  out.sampled = {token, lp};
  out.rank = 1 + std::count_if(scratch_.begin(), scratch_.end(), [&](float x) { return x > lp; });
  order_.resize(vocab_);
  for (int64_t i = 0; i < vocab_; ++i) order_[i] = static_cast<int32_t>(i);
  // k = -1 (no top list asked for) still reports the sampled token's own logprob.
  const auto n = std::clamp<int64_t>(k, 0, vocab_);
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  });
  out.top.clear();
  for (int64_t i = 0; i < n; ++i) out.top.push_back({order_[i], scratch_[order_[i]]});
}

}  // namespace mls
