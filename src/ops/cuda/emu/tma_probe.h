// Probes of the emulated TMA (tma_probe.cu), for the emulator's own test (tma_emu_test.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mls::ops::cuda::kernels {

// The map's encoding error, if any. With wait false the CTA exits without waiting for its copy.
// One CTA copies one box of a byte tensor into shared memory with the 128-byte swizzle and writes
// it back unswizzled, row by row, to `out` (box_rows × box_cols bytes).
cudaError_t launch_tma_probe(const void* base, uint64_t cols, uint64_t rows, uint64_t ld,
                             uint32_t box_cols, uint32_t box_rows, int x, int y, bool wait,
                             uint8_t* out);

// One thread bulk-stores 16 bytes of ones from shared memory to `out`; with `overwrite`, another
// warp writes twos into the source once the store is issued, before its thread waits for the
// read (a race on the device; here, what the emulated store reads).
cudaError_t launch_bulk_store_probe(bool overwrite, uint8_t* out);

}  // namespace mls::ops::cuda::kernels
