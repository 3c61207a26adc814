#include <algorithm>
#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/sampling_kernels.h"
#include "ops/sampling.h"

namespace mls::ops::cuda {

void sample_rows(const Tensor& logits, std::span<const RowSampling> rows, Tensor& ids,
                 Tensor& logprobs) {
  const auto R = static_cast<int64_t>(rows.size());
  const int64_t V = logits.dim(1);
  if (R == 0) return;
  kernels::SampleArgs a{};
  a.stride = logits.stride(0);
  a.V = static_cast<int>(V);
  a.ids_stride = ids.stride(0);
  a.lp_stride = logprobs.stride(0);
  // The scratch of ops::sample_rows_scratch: greedy rows' slice partials when the call is split.
  a.splits = static_cast<int>(scratch::sample_greedy_splits(R, V));
  const int64_t floats = scratch::sample_scratch_floats(R, V);
  Tensor partials;
  if (floats > 0) {
    partials = Tensor::empty({floats}, DType::kF32, MemTag::kActivation, mls::cuda::allocator());
    a.partials = partials.data<float>();
  }
  for (int64_t first = 0; first < R; first += kernels::kSampleRowsPerLaunch) {
    a.R = static_cast<int>(std::min<int64_t>(kernels::kSampleRowsPerLaunch, R - first));
    a.logits = logits.data<float>() + first * a.stride;
    a.ids = ids.data<int32_t>() + first * a.ids_stride;
    a.logprobs = logprobs.data<float>() + first * a.lp_stride;
    for (int i = 0; i < a.R; ++i) {
      const RowSampling& p = rows[first + i];
      kernels::SampleRow& k = a.rows[i];
      k.greedy = p.temperature <= 0;
      // Any top_k at or above V leaves every candidate in, as the CPU op does.
      k.top_k = p.top_k > 0 && p.top_k < V ? static_cast<int32_t>(p.top_k) : 0;
      k.inv_t = k.greedy ? 0.0f : static_cast<float>(1.0 / p.temperature);
      k.min_p = static_cast<float>(p.min_p);
      k.top_p = p.top_p;
      // The CPU op's draw_target: r = u · 2^53, clamped below 2^53.
      k.r = static_cast<uint64_t>(std::clamp(p.uniform * 0x1p53, 0.0, 0x1p53 - 1));
    }
    mls::cuda::check(kernels::launch_sample_rows(a, mls::cuda::stream()), "sample_rows");
  }
}

void apply_token_mask(Tensor& logits, const Tensor& mask) {
  mls::cuda::check(
      kernels::launch_apply_token_mask(
          logits.data<float>(), logits.stride(0), static_cast<int>(logits.dim(1)),
          static_cast<int>(logits.dim(0)), reinterpret_cast<const uint32_t*>(mask.data<int32_t>()),
          mls::cuda::stream()),
      "apply_token_mask");
}

}  // namespace mls::ops::cuda
