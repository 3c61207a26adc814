// Rows of a paged cache on the device, for the kernel parameter blocks that name the paging
// fields alike (AttentionParams, IndexerParams; filled by paged_keys_cuda.h): position j of
// sequence `seq` is row block_tables[seq][j / block_size] · block_size + j % block_size, or row j
// when unpaged. A paged row takes a load of the block table: paged_lookup issues it and
// paged_resolve consumes it, so a kernel can keep the load in flight over a tile's compute. The
// loaded value stays 32-bit until resolved: a widening right after a load would wait for it.
#pragma once

#include <cstdint>

namespace mls::ops::cuda::kernels {

struct PendingRow {
  int32_t block;  // the block-table entry; the position itself when unpaged; -1 when masked
  int32_t offset;
};

// Position j >= 0 of sequence `seq` (any value when unpaged).
template <class Params>
__device__ __forceinline__ PendingRow paged_lookup(const Params& p, int64_t seq, int32_t j) {
  if (!p.block_tables) return {j, 0};
  // Positions and block sizes fit in 31 bits: 32-bit division is several times cheaper.
  const uint32_t bs = static_cast<uint32_t>(p.block_size), jj = static_cast<uint32_t>(j);
  const uint32_t blk = jj / bs;
  if (blk >= p.max_blocks) return {-1, 0};
  return {p.block_tables[seq * p.bt_ld + blk], static_cast<int32_t>(jj - blk * bs)};
}

// The row, or -1 for a masked position or an address outside the cache.
template <class Params>
__device__ __forceinline__ int64_t paged_resolve(const Params& p, PendingRow e) {
  const int64_t row =
      p.block_tables ? static_cast<int64_t>(e.block) * p.block_size + e.offset : e.block;
  return e.block >= 0 && row < p.num_rows ? row : -1;
}

}  // namespace mls::ops::cuda::kernels
