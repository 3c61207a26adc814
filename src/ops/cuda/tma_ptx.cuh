// The tensor memory accelerator (TMA, sm_90a): tiled bulk copies of a 2D box from global to shared
// memory, described by a tensor map and completed on an mbarrier in bytes (pipeline_ptx.cuh's
// mbar_arrive_expect_tx), and tensor maps retargeted at another base address on the device.
// Maps here are of bytes (e4m3) with the 128-byte swizzle, the layout wgmma_layout.cuh
// describes, and zeros read past the tensor's edges.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/mma_ptx.cuh"

namespace mls::ops::cuda::kernels {

using TmaMap = CUtensorMap;

// A map of `rows` rows of `cols` bytes, `ld` bytes apart from `base` (16-byte aligned, ld a
// multiple of 16), read in boxes of box_rows × box_cols (box_cols <= 128, the swizzle's span).
// Host only; the driver's encoder is found through the runtime (no link against libcuda).
inline cudaError_t encode_tma_2d_u8(TmaMap* map, const void* base, uint64_t cols, uint64_t rows,
                                    uint64_t ld, uint32_t box_cols, uint32_t box_rows) {
  using Encode =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                     cudaEnableDefault, &found) == cudaSuccess &&
                    found == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<Encode>(fn) : nullptr;
  }();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld};
  const cuuint32_t box[2] = {box_cols, box_rows}, steps[2] = {1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box,
             steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The box at column x, row y of `map` to shared address dst (1,024-byte aligned), completing
// its bytes (the whole box's, zeros included) on the mbarrier at shared address bar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, uint32_t bar, int x,
                                            int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// A map staged in shared memory (128-byte aligned) pointed at `base`.
__device__ __forceinline__ void tma_map_retarget(TmaMap* staged, const void* base) {
  asm volatile("tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n" ::"r"(
                   smem_addr(staged)),
               "l"(base)
               : "memory");
}

// The staged map copied to global memory (128-byte aligned) for the tensor-map proxy, released
// at GPU scope. Every lane of the warp executes it.
__device__ __forceinline__ void tma_map_publish(TmaMap* dst, const TmaMap* staged) {
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned"
      " [%0], [%1], 128;\n" ::"l"(dst),
      "r"(smem_addr(staged))
      : "memory");
}

// Acquires a published map before the first copy through it.
__device__ __forceinline__ void tma_map_acquire(const TmaMap* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map) : "memory");
}

}  // namespace mls::ops::cuda::kernels
