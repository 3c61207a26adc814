#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mls {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

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
  const uint64_t r = mix(seed ^ mix(static_cast<uint64_t>(sample_index) ^
                                    mix(static_cast<uint64_t>(step) + 0x5851f42d4c957f2dULL)));
  return static_cast<double>(r >> 11) * 0x1.0p-53;
}

void Sampler::log_softmax(std::span<const float> logits, std::span<float> out) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i)
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - lse);
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

int32_t Sampler::sample(const float* logits, const SampleInput& in, Logprobs* logprobs) {
  const SamplingParams& p = *in.params;
  std::copy(logits, logits + vocab_, work_.begin());
  for (int64_t id : in.suppressed) work_[id] = kNegInf;
  apply_penalties(work_, in);

  int32_t token;
  if (p.greedy()) {
    token = argmax(work_);
  } else {
    const auto inv_t = static_cast<float>(1.0 / p.temperature);
    const float mx = *std::max_element(work_.begin(), work_.end()) * inv_t;
    // Unnormalised probabilities relative to the most likely token (which has 1).
    order_.clear();
    for (int64_t i = 0; i < vocab_; ++i) {
      const float e = std::exp(work_[i] * inv_t - mx);
      scratch_[i] = e;
      if (e > 0.0f && e >= static_cast<float>(p.min_p)) order_.push_back(static_cast<int32_t>(i));
    }
    const bool top_k = p.top_k > 0 && p.top_k < static_cast<int64_t>(order_.size());
    if (top_k || p.top_p < 1.0) {
      std::stable_sort(order_.begin(), order_.end(),
                       [&](int32_t a, int32_t b) { return scratch_[a] > scratch_[b]; });
      if (top_k) order_.resize(p.top_k);
    }
    double total = 0;
    for (int32_t i : order_) total += scratch_[i];
    if (p.top_p < 1.0) {
      // Keep a token while the mass ranked above it is below top_p (at least one survives).
      double above = 0;
      size_t keep = 0;
      while (keep < order_.size() && above < p.top_p * total) above += scratch_[order_[keep++]];
      order_.resize(keep);
      total = above;
    }
    const double target =
        uniform(in.seed, in.sample_index, static_cast<int64_t>(in.output.size())) * total;
    double acc = 0;
    token = order_.back();
    for (int32_t i : order_) {
      acc += scratch_[i];
      if (target < acc) {
        token = i;
        break;
      }
    }
  }
  if (logprobs) fill_logprobs(logits, token, p.logprobs, *logprobs);
  return token;
}

void Sampler::fill_logprobs(const float* logits, int32_t token, int k, Logprobs& out) {
  log_softmax({logits, static_cast<size_t>(vocab_)}, scratch_);
  const float lp = scratch_[token];
  out.sampled = {token, lp};
  out.rank = 1 + std::count_if(scratch_.begin(), scratch_.end(), [&](float x) { return x > lp; });
  order_.resize(vocab_);
  for (int64_t i = 0; i < vocab_; ++i) order_[i] = static_cast<int32_t>(i);
  const auto n = std::min<int64_t>(k, vocab_);
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](int32_t a, int32_t b) {
    return scratch_[a] > scratch_[b] || (scratch_[a] == scratch_[b] && a < b);
  });
  out.top.clear();
  for (int64_t i = 0; i < n; ++i) out.top.push_back({order_[i], scratch_[order_[i]]});
}

}  // namespace mls
