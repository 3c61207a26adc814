// Shared-memory layout of Hopper's warpgroup MMA operands (sm_90a), apart from the MMA
// instructions themselves (wgmma_ptx.cuh), so the CPU kernel emulator (emu/) builds its
// descriptors with this very code: tiles in 128-byte swizzled rows and their descriptors.
// Layout contract (the one TMA's 128-byte swizzle writes): a tile is rows of exactly 128 bytes,
// 8-row atoms of 1,024 bytes, the tile 1,024-byte aligned; the 16-byte chunk c of row r sits at
// chunk c ^ (r % 8) of that row. A K-major operand's rows run along K and its atoms stack along
// M (or N). An N-major B's rows run along N (64 bf16 columns each) and its atoms stack along K;
// wider N takes further such tiles at a fixed byte distance.
#pragma once

#include <cstdint>

#include "ops/cuda/mma_ptx.cuh"

namespace mls::ops::cuda::kernels {

// The first 1,024-byte-aligned byte of a dynamic shared-memory array (the swizzle atoms'
// alignment), found by pointer arithmetic on the shared array itself, so the compiler keeps its
// state space: accesses through the result are shared loads and stores, not generic ones.
template <typename T>
__device__ __forceinline__ T* align_smem_1024(T* smem_raw) {
  return smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023) / sizeof(T);
}

// Byte offset, inside a 128-byte-swizzled tile, of the 16-byte chunk `chunk` of row `row`.
__device__ __forceinline__ uint32_t swizzle128(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Descriptor of a K-major operand starting at `tile` (a 1,024-byte-aligned atom row): 128-byte
// swizzle, atoms 1,024 bytes apart. K steps inside the 128-byte row advance the start address
// (the swizzle applies to absolute address bits, hence the alignment).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// Descriptor of an N-major B operand starting at `tile` (1,024-byte aligned): each 128-byte row
// holds 64 bf16 columns of one K index, 8-row atoms follow each other along K (1,024 bytes
// apart), and the next 64 columns start `n_stride_bytes` further on.
__device__ __forceinline__ uint64_t wgmma_desc_sw128_nmajor(const void* tile,
                                                            uint32_t n_stride_bytes) {
  const uint64_t addr = smem_addr(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{(n_stride_bytes >> 4) & 0x3FFF} << 16) |
         (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

}  // namespace mls::ops::cuda::kernels
