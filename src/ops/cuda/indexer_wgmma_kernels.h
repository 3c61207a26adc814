// DSA indexer scores of prompt rows on Hopper's warpgroup MMA (indexer_wgmma_kernels.cu): the
// token-group path of launch_indexer_scores at the shape of DeepSeek-V3.2 and GLM-5 (128-wide
// index heads). Plain types only (included by nvcc-compiled code).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/indexer_topk_kernels.h"

namespace mls::ops::cuda::kernels {

// Whether the token-group scores of `p` take the wgmma kernel: Di is 128, the heads rounded up
// to 16 are 16, 32 or 64, q and k rows are 16-byte aligned, and `device` has the shared memory.
bool indexer_wgmma_applies(const IndexerParams& p, int device);

// The token-group scores of query rows [t0, t0 + nt), as launch_indexer_scores writes them: the
// same floats as the one-token kernel.
cudaError_t launch_indexer_scores_wgmma(const IndexerParams& p, int t0, int nt, float* scores,
                                        int64_t ld, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
