#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/sampling.h"

namespace mls::ops::cpu {
namespace {

// The integer mass of a relative probability (sampling.h step 4); sampling_kernels.cu computes
// it the same way.
uint64_t mass(float q) {
  return static_cast<uint64_t>(static_cast<double>(q) * 0x1p45);
}

// floor(r · total / 2^53) with u = r · 2^-53, r < 2^53: always below total.
uint64_t draw_target(double uniform, uint64_t total) {
  const double scaled = std::clamp(uniform * 0x1p53, 0.0, 0x1p53 - 1);
  const auto r = static_cast<uint64_t>(scaled);
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * total) >> 53);
}

}  // namespace

double log_sum_exp(std::span<const float> logits) {
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  return mx + std::log(sum);
}

uint64_t row_distribution(std::span<const float> logits, const RowSampling& p, SampleScratch& s) {
  const auto V = static_cast<int64_t>(logits.size());
  if (V == 0 || V > kSampleMaxVocab)
    raise<Unsupported>("sample_row: a vocabulary of {} (1..{} supported)", V, kSampleMaxVocab);
  const auto best =
      static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  s.order.clear();
  s.mass.clear();
  const auto only_best = [&] {
    s.order.assign(1, best);
    s.mass.assign(1, 1);
    return uint64_t{1};
  };
  if (p.temperature <= 0) return only_best();
  const auto inv_t = static_cast<float>(1.0 / p.temperature);
  const double mx = logits[best];
  const auto min_p = static_cast<float>(p.min_p);
  s.q.resize(V);
  for (int64_t i = 0; i < V; ++i) {
    const auto q = static_cast<float>(std::exp((static_cast<double>(logits[i]) - mx) * inv_t));
    s.q[i] = q;
    if (q > 0.0f && q >= min_p) s.order.push_back(static_cast<int32_t>(i));
  }
  if (s.order.empty()) return only_best();  // no finite logits
  const bool top_k = p.top_k > 0 && p.top_k < static_cast<int64_t>(s.order.size());
  if (top_k || p.top_p < 1.0) {
    // Descending q, ties to the lower id: the Sampler's stable sort of ascending ids.
    const auto before = [&](int32_t a, int32_t b) {
      return s.q[a] > s.q[b] || (s.q[a] == s.q[b] && a < b);
    };
    if (top_k) {
      std::partial_sort(s.order.begin(), s.order.begin() + p.top_k, s.order.end(), before);
      s.order.resize(p.top_k);
    } else {
      std::sort(s.order.begin(), s.order.end(), before);
    }
  }
  uint64_t total = 0;
  for (int32_t i : s.order) {
    s.mass.push_back(mass(s.q[i]));
    total += s.mass.back();
  }
  if (p.top_p < 1.0) {
    // Keep a token while the mass ranked above it is below top_p (at least one survives).
    const double bound = p.top_p * static_cast<double>(total);
    uint64_t above = 0;
    size_t keep = 0;
    while (keep < s.order.size() && static_cast<double>(above) < bound) above += s.mass[keep++];
    s.order.resize(keep);
    s.mass.resize(keep);
    total = above;
  }
  return total;
}

int32_t sample_row(std::span<const float> logits, const RowSampling& p, SampleScratch& s) {
  const uint64_t target = draw_target(p.uniform, row_distribution(logits, p, s));
  uint64_t acc = 0;
  for (size_t i = 0; i < s.order.size(); ++i) {
    acc += s.mass[i];
    if (target < acc) return s.order[i];
  }
  return s.order.back();
}

void sample_rows(const Tensor& logits, std::span<const RowSampling> rows, Tensor& ids,
                 Tensor& logprobs) {
  const auto R = static_cast<int64_t>(rows.size());
  const int64_t V = logits.dim(1);
  ThreadPool::global().parallel_for(R, 1, [&](int64_t b, int64_t e) {
    SampleScratch s;
    for (int64_t r = b; r < e; ++r) {
      const std::span<const float> row(logits.data<float>() + r * logits.stride(0),
                                       static_cast<size_t>(V));
      const int32_t token = sample_row(row, rows[r], s);
      ids.data<int32_t>()[r * ids.stride(0)] = token;
      logprobs.data<float>()[r * logprobs.stride(0)] =
          static_cast<float>(static_cast<double>(row[token]) - log_sum_exp(row));
    }
  });
}

void apply_token_mask(Tensor& logits, const Tensor& mask) {
  const int64_t R = logits.dim(0), V = logits.dim(1), W = mask.dim(1);
  for (int64_t r = 0; r < R; ++r) {
    float* row = logits.data<float>() + r * logits.stride(0);
    const auto* m = reinterpret_cast<const uint32_t*>(mask.data<int32_t>()) + r * W;
    for (int64_t w = 0; w < W; ++w) {
      if (m[w] == ~0u) continue;
      for (int64_t t = w * 32; t < std::min(V, w * 32 + 32); ++t)
        if (!((m[w] >> (t & 31)) & 1u)) row[t] = -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace mls::ops::cpu
