// Emulation (prelude.h) of ops/cuda/tma_ptx.cuh. A map holds here what the copies need (base,
// sizes, box), checked as the driver's encoder checks them; a copy reads the map when issued
// and lands as cta_runtime.h's bulk copies do, each byte at its 128-byte-swizzled address
// (address bits 4-6 XOR bits 7-9, as the emulated wgmma reads them), zeros past the edges.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/pipeline_ptx.cuh"

namespace mls::ops::cuda::kernels {

struct alignas(64) TmaMap {
  const uint8_t* base;
  uint64_t cols, rows, ld;
  uint32_t box_cols, box_rows;
  unsigned char unused[88];
};
static_assert(sizeof(TmaMap) == 128, "a CUtensorMap's size");

inline cudaError_t encode_tma_2d_u8(TmaMap* map, const void* base, uint64_t cols, uint64_t rows,
                                    uint64_t ld, uint32_t box_cols, uint32_t box_rows) {
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % 16 != 0 || ld % 16 != 0 || cols == 0 ||
      rows == 0 || box_cols == 0 || box_cols > 128 || box_rows == 0 || box_rows > 256)
    return cudaErrorInvalidValue;
  *map = {static_cast<const uint8_t*>(base), cols, rows, ld, box_cols, box_rows, {}};
  return cudaSuccess;
}

inline void tma_load_2d(uint32_t dst, const TmaMap* map, uint32_t bar, int x, int y) {
  if (dst % 1024 != 0)
    throw emu::KernelFault("TMA copy with the 128-byte swizzle to shared address " +
                           std::to_string(dst) + ": not 1,024-byte aligned");
  const TmaMap m = *map;
  emu::bulk_copy_async(bar, [m, dst, bar, x, y] {
    for (uint32_t r = 0; r < m.box_rows; ++r)
      for (uint32_t c = 0; c < m.box_cols; ++c) {
        const int64_t gx = int64_t{x} + c, gy = int64_t{y} + r;
        const bool in = gx >= 0 && gy >= 0 && static_cast<uint64_t>(gx) < m.cols &&
                        static_cast<uint64_t>(gy) < m.rows;
        const uint32_t addr = dst + r * m.box_cols + c;
        *static_cast<uint8_t*>(emu::smem_pointer(addr ^ ((addr >> 7 & 7) << 4))) =
            in ? m.base[gy * static_cast<int64_t>(m.ld) + gx] : 0;
      }
    mbar_complete_tx(bar, m.box_rows * m.box_cols);
  });
}

inline void tma_map_retarget(TmaMap* staged, const void* base) {
  staged->base = static_cast<const uint8_t*>(base);
}

// Warp-synchronous, as the PTX: the lanes meet, then one copies.
inline void tma_map_publish(TmaMap* dst, const TmaMap* staged) {
  emu::warp_exchange(0xffffffffu, 0);
  if ((emu::coords().linear & 31) == 0) std::memcpy(dst, staged, sizeof(TmaMap));
}

inline void tma_map_acquire(const TmaMap*) {}

}  // namespace mls::ops::cuda::kernels
