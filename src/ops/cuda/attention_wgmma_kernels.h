// Absorbed-MLA attention on Hopper's warpgroup MMA (attention_wgmma_kernels.cu): the latent path
// of launch_attention for CTAs of 64 heads over 576-wide latent keys whose first 512 columns are
// the values (DeepSeek-V3/V3.2, GLM-5). Plain types only (included by nvcc-compiled code).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention_kernels.h"

namespace mls::ops::cuda::kernels {

inline constexpr int kMlaWgmmaHeads = 64;
inline constexpr int kMlaWgmmaDk = 576;
inline constexpr int kMlaWgmmaDv = 512;

// Whether a step cut into head groups of `head_group` heads takes the wgmma kernel: the group is
// 64 heads, q/k are [.., 576] with v the first 512 columns of k (the latent cache), the device
// is a Hopper with the shared memory the kernel needs, and every row is 16-byte aligned.
bool mla_wgmma_applies(const AttentionParams& p, int head_group, int device);

// The attention of the step's queries (the grid: p.T queries × splits × head groups of 64), with
// the cut and split outputs of launch_attention's latent kernel: with splits > 1, unnormalised
// partial outputs part_o [splits, T, H, Dv] and their (max in the log2 domain, sum) part_ml
// [splits, T, H, 2] for the combine kernel; with one split, out directly.
cudaError_t launch_mla_wgmma(const AttentionParams& p, int splits, int64_t keys_per_split,
                             int groups, float* part_o, float* part_ml, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
