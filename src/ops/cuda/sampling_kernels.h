// Launcher for the sampling kernel (sampling_kernels.cu): one CTA per row of logits draws that
// row's token exactly as ops::cpu::sample_row does (ops/sampling.h); in a call of few rows the
// greedy rows are first reduced by several CTAs each (ops::scratch::sample_greedy_splits). No
// fmt-based project headers: this is included by nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// Rows per launch: their parameters travel in the kernel's argument block (8 KiB of the 32 KiB
// that CUDA 12.1+ allows on sm_70+).
inline constexpr int kSampleRowsPerLaunch = 256;
// The largest vocabulary (per-warp partial sums of one row live in 64 KiB of shared memory).
inline constexpr int kSampleMaxVocab = 1 << 18;

// One row's parameters, already in the form the arithmetic uses.
struct SampleRow {
  int32_t greedy;  // nonzero: the first maximum, nothing else
  int32_t top_k;   // 0: off (and any value >= the candidate count is off)
  float inv_t;     // float(1 / temperature)
  float min_p;     // float(min_p)
  double top_p;    // >= 1: off
  uint64_t r;      // the uniform as r · 2^-53, r < 2^53
};

struct SampleArgs {
  const float* logits;  // row i at logits + i · stride, V contiguous floats
  int64_t stride;
  int V, R;      // R <= kSampleRowsPerLaunch
  int32_t* ids;  // ids[i · ids_stride]
  int64_t ids_stride;
  float* logprobs;  // logprobs[i · lp_stride]
  int64_t lp_stride;
  // splits > 1: greedy rows are cut into that many slices, whose partials (R · splits ·
  // scratch::kSamplePartialFloats floats) the launch keeps in `partials`.
  int splits;
  float* partials;
  SampleRow rows[kSampleRowsPerLaunch];
};

cudaError_t launch_sample_rows(const SampleArgs& a, cudaStream_t stream);

// logits[r · stride + t] = -inf where bit (t % 32) of mask[r · words + t / 32] is clear, for
// R rows of V logits (words = ceil(V / 32)).
cudaError_t launch_apply_token_mask(float* logits, int64_t stride, int V, int R,
                                    const uint32_t* mask, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
