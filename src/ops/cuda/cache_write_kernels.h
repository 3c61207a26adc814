// Launchers for the fused cache writes (cache_write_kernels.cu). Plain types only: this header is
// included by nvcc-compiled code, which cannot see fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/norm_kernels.h"
#include "ops/cuda/rope_kernels.h"

namespace mls::ops::cuda::kernels {

// One fused cache write over `norm.rows` tokens of one dtype (bf16 or f32). Token t's row of
// `norm.x` is normalised (RMSNorm or LayerNorm over norm.n values, norm.w / norm.b) and written,
// rotated as the kind says, to row slots[t] of `cache` (none for slots[t] < 0). norm.y and
// norm.y_stride: the dense output rows (one per token) where there are any, else unused.
struct CacheWrite {
  NormRows norm;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  void* cache = nullptr;
  int64_t cache_stride = 0;
  RopeFreqs freqs;
  bool interleaved = false;
};

// The MLA latent row: [rms_norm(x[:n]), rope(x[n : n + 2·half])], x's row being [c | k_rot];
// the cache row is n + 2·half wide. norm.y unused.
cudaError_t launch_latent_cache_write(const CacheWrite& p, cudaStream_t stream);
// The indexer key: layer_norm(x) with its first 2·half values rotated; also into norm.y's rows
// when norm.y is set.
cudaError_t launch_indexer_key_write(const CacheWrite& p, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
