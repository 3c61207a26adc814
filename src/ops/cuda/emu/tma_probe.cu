// The emulated TMA's probe (tma_probe.h); built only as an emulated kernel.
#include <cstdint>

#include "ops/cuda/emu/tma_probe.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/pipeline_ptx.cuh"
#include "ops/cuda/tma_ptx.cuh"
#include "ops/cuda/wgmma_layout.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

namespace mls::ops::cuda::kernels {
namespace {

constexpr int kThreads = 64;

__global__ void tma_probe_kernel(const __grid_constant__ TmaMap map, int bytes, int x, int y,
                                 bool wait, uint8_t* out) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t bar;
  uint8_t* box = align_smem_1024(smem_raw);
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    mbar_init(&bar, 1);
    mbar_arrive_expect_tx(b, bytes);
    tma_load_2d(smem_addr(box), &map, b, x, y);
  }
  __syncthreads();
  if (!wait) return;
  mbar_wait(b, 0);
  for (int i = threadIdx.x; i < bytes; i += kThreads) out[i] = box[i ^ ((i >> 7 & 7) << 4)];
}

__global__ void bulk_store_probe_kernel(bool overwrite, uint8_t* out) {
  __shared__ __align__(16) uint8_t src[16];
  __shared__ uint64_t bar;
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    for (int i = 0; i < 16; ++i) src[i] = 1;
    mbar_init(&bar, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_proxy_async_smem();
    bulk_store(out, smem_addr(src), 16);
    bulk_commit();
    mbar_arrive(b);  // the other warp may write now
    bulk_wait_read();
  } else if (threadIdx.x == 32 && overwrite) {
    mbar_wait(b, 0);
    for (int i = 0; i < 16; ++i) src[i] = 2;
  }
}

}  // namespace

cudaError_t launch_bulk_store_probe(bool overwrite, uint8_t* out) {
  launch(bulk_store_probe_kernel, 1, kThreads, 0, nullptr, overwrite, out);
  return cudaGetLastError();
}

cudaError_t launch_tma_probe(const void* base, uint64_t cols, uint64_t rows, uint64_t ld,
                             uint32_t box_cols, uint32_t box_rows, int x, int y, bool wait,
                             uint8_t* out) {
  TmaMap map;
  if (const cudaError_t e = encode_tma_2d_u8(&map, base, cols, rows, ld, box_cols, box_rows))
    return e;
  const int bytes = static_cast<int>(box_cols * box_rows);
  launch(tma_probe_kernel, 1, kThreads, bytes + 1024, nullptr, map, bytes, x, y, wait, out);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
