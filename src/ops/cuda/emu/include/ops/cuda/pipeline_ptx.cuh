// Emulation (prelude.h) of ops/cuda/pipeline_ptx.cuh. An mbarrier's 64 bits hold here its
// pending arrivals (bits 0-15), its arrivals per phase (16-31), its pending transaction bytes
// (32-62, two's complement) and its phase parity (63). A phase completes once neither arrivals
// nor bytes are pending.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/register_budget.h"

namespace mls::ops::cuda::kernels {

namespace emu_detail {
struct Mbar {
  uint32_t pending, expected;
  int32_t tx;
  uint32_t phase;
};
inline uint64_t& mbar_word(uint32_t bar) {
  return *static_cast<uint64_t*>(emu::smem_pointer(bar));
}
inline Mbar mbar_load(uint32_t bar) {
  const uint64_t b = mbar_word(bar);
  const auto tx = static_cast<uint32_t>(b >> 32 & 0x7fffffffu);
  return {static_cast<uint32_t>(b & 0xffffu), static_cast<uint32_t>(b >> 16 & 0xffffu),
          static_cast<int32_t>(tx << 1) >> 1, static_cast<uint32_t>(b >> 63)};
}
// Stores `m`, completing its phase first if nothing is pending.
inline void mbar_settle(uint32_t bar, Mbar m) {
  if (m.pending == 0 && m.tx == 0) {
    m.phase ^= 1;
    m.pending = m.expected;
  }
  mbar_word(bar) = uint64_t{m.phase} << 63 |
                   uint64_t{static_cast<uint32_t>(m.tx) & 0x7fffffffu} << 32 | m.expected << 16 |
                   m.pending;
}
}  // namespace emu_detail

inline void mbar_init(uint64_t* bar, int arrivals) {
  if (arrivals < 1 || arrivals > 0xffff)
    throw emu::KernelFault("mbarrier of " + std::to_string(arrivals) + " arrivals");
  *bar = static_cast<uint64_t>(arrivals) << 16 | static_cast<uint32_t>(arrivals);
}

namespace emu_detail {
// One arrival, after an expect-tx of `bytes`.
inline void arrive(uint32_t bar, uint32_t bytes) {
  Mbar m = mbar_load(bar);
  if (m.expected == 0)
    throw emu::KernelFault("mbarrier at shared address " + std::to_string(bar) +
                           ": an arrival on an uninitialised barrier");
  if (m.pending == 0)
    throw emu::KernelFault("mbarrier at shared address " + std::to_string(bar) +
                           ": an arrival past the phase's count (its bytes still pending)");
  m.tx += static_cast<int32_t>(bytes);
  --m.pending;
  mbar_settle(bar, m);
}
}  // namespace emu_detail

inline void mbar_arrive(uint32_t bar) {
  emu_detail::arrive(bar, 0);
}

inline void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  emu_detail::arrive(bar, bytes);
}

// A bulk copy's complete-tx of `bytes` (ops/cuda/tma_ptx.cuh's emulation).
inline void mbar_complete_tx(uint32_t bar, uint32_t bytes) {
  emu_detail::Mbar m = emu_detail::mbar_load(bar);
  m.tx -= static_cast<int32_t>(bytes);
  emu_detail::mbar_settle(bar, m);
}

inline void cp_async_mbar_arrive(uint64_t* bar) {
  emu::async_flush_copies();
  mbar_arrive(smem_addr(bar));
}

inline void mbar_wait(uint32_t bar, uint32_t parity) {
  const auto done = [bar, parity] { return emu_detail::mbar_load(bar).phase != (parity & 1); };
  emu::block_until([bar, done] {
    if (done()) return true;
    emu::land_bulk_copies(bar);
    return done();
  });
}

inline void named_barrier_sync(int id, int threads) {
  emu::named_barrier(id, threads);
}

inline void named_barrier_arrive(int id, int threads) {
  emu::named_barrier_arrive(id, threads);
}

// The copy when its thread waits for the read (the latest point it may read shared memory), so
// that a write to its source before that wait changes what it stores.
inline void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
  emu::store_async([dst, src, bytes] { std::memcpy(dst, emu::smem_pointer(src), bytes); });
}
inline void bulk_commit() {
  emu::async_commit(emu::AsyncKind::kStore);
}
inline void bulk_wait_read() {
  emu::async_wait(emu::AsyncKind::kStore, 0);
}

template <int kRegs>
inline void warpgroup_reg_dealloc() {
  emu::warpgroup_set_regs(kRegs, false);
}
template <int kRegs>
inline void warpgroup_reg_alloc() {
  emu::warpgroup_set_regs(kRegs, true);
}

}  // namespace mls::ops::cuda::kernels
