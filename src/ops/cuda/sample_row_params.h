// A sampling row's parameters (ops::RowSampling) in the form the sampling kernel's arithmetic uses
// (kernels::SampleRow), written once for the CUDA op and the kernel's emulated test.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/cuda/sampling_kernels.h"
#include "ops/sampling.h"

namespace mls::ops::cuda {

inline kernels::SampleRow sample_row_params(const RowSampling& p, int64_t V) {
  kernels::SampleRow k{};
  k.greedy = p.temperature <= 0;
  // Any top_k at or above V leaves every candidate in, as the CPU op does.
  k.top_k = p.top_k > 0 && p.top_k < V ? static_cast<int32_t>(p.top_k) : 0;
  k.inv_t = k.greedy ? 0.0f : static_cast<float>(1.0 / p.temperature);
  k.min_p = static_cast<float>(p.min_p);
  k.top_p = p.top_p;
  // The CPU op's draw_target: r = u · 2^53, clamped below 2^53.
  k.r = static_cast<uint64_t>(std::clamp(p.uniform * 0x1p53, 0.0, 0x1p53 - 1));
  return k;
}

}  // namespace mls::ops::cuda
