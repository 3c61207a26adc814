// A probe of the emulated TMA (tma_probe.cu), for the emulator's own test (tma_emu_test.cc): one
// CTA copies one box of a byte tensor into shared memory with the 128-byte swizzle and writes
// it back unswizzled, row by row, to `out` (box_rows × box_cols bytes).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// The map's encoding error, if any. With wait false the CTA exits without waiting for its copy.
cudaError_t launch_tma_probe(const void* base, uint64_t cols, uint64_t rows, uint64_t ld,
                             uint32_t box_cols, uint32_t box_rows, int x, int y, bool wait,
                             uint8_t* out);

}  // namespace mls::ops::cuda::kernels
