// Token sampling from rows of logits: the engine's Sampler (vLLM semantics and order) after its
// penalties, as an op, so that a step's tokens can be drawn where the logits are and only ids
// come back to the host. Per row x = logits[r] (V values) and its RowSampling:
//   greedy (temperature <= 0): the first maximum of x;
//   otherwise, in the Sampler's order:
//   1. temperature: q_i = float(exp((double(x_i) - double(max x)) · double(inv_t))),
//      inv_t = float(1 / temperature): the probability relative to the most likely token (1),
//      exp in double so that every libm rounds q alike;
//   2. min_p: candidates are the i with q_i > 0 and q_i >= float(min_p), in ascending id;
//   3. top_k (0 < top_k < #candidates): the candidates sorted by q descending (ties: lower id
//      first) and cut to top_k; top_p < 1 sorts them too;
//   4. top_p: with masses w_i = floor(q_i · 2^45) (u64, summed exactly) and W their total, keep
//      a token while the mass ranked above it is below P = top_p · double(W) (compared as
//      double(above) < P; at least one survives); W becomes the kept mass;
//   5. the draw: u = r · 2^-53 (Sampler::uniform), target = floor(r · W / 2^53) < W; the token
//      is the first, in the candidates' order, whose inclusive mass sum exceeds target.
// Integer masses make every sum exact and order-free, so the CPU and GPU ops pick the same token
// whenever they compute the same q (double exp within 1 ulp on both: they round to different
// floats only where exp lies within ~2^-52 relative of a float rounding midpoint). The logprob is
// that of the raw distribution: log_softmax(x)[token], as the Sampler reports it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/dispatch.h"

namespace mls::ops {

struct RowSampling {
  double temperature = 0.0;  // <= 0: greedy
  int64_t top_k = 0;         // <= 0: off
  double top_p = 1.0;        // >= 1: off
  double min_p = 0.0;        // <= 0: off
  double uniform = 0.0;      // in [0, 1): a multiple of 2^-53 (coarser bits are truncated)
};

// The largest V: masses of at most 2^45 each must sum below 2^64 (and the GPU op keeps per-warp
// partial sums of a row in shared memory).
inline constexpr int64_t kSampleMaxVocab = int64_t{1} << 18;

// logits f32 [R, V] (unit inner stride, 1 <= V <= kSampleMaxVocab), ids i32 [R], logprobs f32
// [R], one device.
inline void sample_rows_contract(const Tensor& logits, std::span<const RowSampling> rows,
                                 const Tensor& ids, const Tensor& logprobs) {
  const Contract c("sample_rows", ids);
  const auto R = static_cast<int64_t>(rows.size());
  c.rows("logits", logits, 2);
  c.need(logits.dim(0) == R, "logits", logits, "[{}, V] (one row per sampling row)", R);
  c.need(ids.ndim() == 1 && ids.dim(0) == R, "ids", ids, "[{}]", R);
  c.need(logprobs.ndim() == 1 && logprobs.dim(0) == R, "logprobs", logprobs, "[{}]", R);
  c.dtype("logits", logits, {DType::kF32});
  c.dtype("ids", ids, {DType::kI32});
  c.dtype("logprobs", logprobs, {DType::kF32});
  c.on_device("logits", logits);
  c.on_device("logprobs", logprobs);
  if (R > 0 && (logits.dim(1) == 0 || logits.dim(1) > kSampleMaxVocab))
    raise<Unsupported>("sample_rows: a vocabulary of {} (1..{} supported)", logits.dim(1),
                       kSampleMaxVocab);
}

// Allowed-token masks (structured outputs): mask i32 [R, ceil(V / 32)], bit (t % 32) of word
// t / 32 of row r set when token t may be drawn for row r; every other logit of the row becomes
// -inf, in place, before sample_rows. Rows of all ones are left as they are.
inline void apply_token_mask_contract(const Tensor& logits, const Tensor& mask) {
  const Contract c("apply_token_mask", logits);
  c.rows("logits", logits, 2);
  c.dtype("logits", logits, {DType::kF32});
  c.need(mask.ndim() == 2 && mask.dim(0) == logits.dim(0) &&
             mask.dim(1) == (logits.dim(1) + 31) / 32 && mask.is_contiguous(),
         "mask", mask, "contiguous [{}, {}]", logits.dim(0), (logits.dim(1) + 31) / 32);
  c.dtype("mask", mask, {DType::kI32});
  c.on_device("mask", mask);
}

namespace cpu {
// Reused storage for sample_row (one per thread).
struct SampleScratch {
  std::vector<float> q;
  std::vector<int32_t> order;
  std::vector<uint64_t> mass;  // of order[i]
};
// Steps 1-4 of one row (V = logits.size() <= kSampleMaxVocab): the distribution step 5 draws
// from. Leaves the candidates in draw order in s.order and their masses in s.mass, and returns
// their total W > 0: candidate i is drawn with probability s.mass[i] / W. Greedy (or no finite
// logit): the first maximum alone. Rejection sampling (engine/rejection_sampler.h) compares
// these distributions, so that it follows the very rules the draw does.
uint64_t row_distribution(std::span<const float> logits, const RowSampling& p, SampleScratch& s);
// One row, steps 1-5 above; the engine's Sampler calls it after applying penalties and
// suppression.
int32_t sample_row(std::span<const float> logits, const RowSampling& p, SampleScratch& s);
// log Σ exp(x_i) in double (the raw logprobs' normaliser).
double log_sum_exp(std::span<const float> logits);

void sample_rows(const Tensor& logits, std::span<const RowSampling> rows, Tensor& ids,
                 Tensor& logprobs);
void apply_token_mask(Tensor& logits, const Tensor& mask);
}  // namespace cpu
namespace cuda {
void sample_rows(const Tensor& logits, std::span<const RowSampling> rows, Tensor& ids,
                 Tensor& logprobs);
void apply_token_mask(Tensor& logits, const Tensor& mask);
}  // namespace cuda

// Device scratch of one call: partials of split greedy rows (ops/scratch_sizes.h).
inline ScratchPlan sample_rows_scratch(const Tensor& logits) {
  return {{{scratch::sample_scratch_floats(logits.dim(0), logits.dim(1)), DType::kF32,
            MemTag::kActivation},
           {}}};
}

// logits f32 [R, V] (unit inner stride), rows.size() == R → ids i32 [R], logprobs f32 [R] (the
// sampled token's raw logprob), all on one device.
inline void sample_rows(const Tensor& logits, std::span<const RowSampling> rows, Tensor& ids,
                        Tensor& logprobs) {
  MLS_DISPATCH_SCRATCH(ids, sample_rows_scratch(logits), sample_rows, logits, rows, ids, logprobs);
}

inline void apply_token_mask(Tensor& logits, const Tensor& mask) {
  MLS_DISPATCH(logits, apply_token_mask, logits, mask);
}

}  // namespace mls::ops
