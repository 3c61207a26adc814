#include <algorithm>
#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/sample_row_params.h"
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
    for (int i = 0; i < a.R; ++i) a.rows[i] = sample_row_params(rows[first + i], V);
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
