// Emulation (prelude.h) of ops/cuda/pipeline_ptx.cuh. An mbarrier's 64 bits hold here its
// pending arrivals (bits 0-31), its arrivals per phase (32-62) and its phase parity (63).
#pragma once

#include <cstdint>
#include <string>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/register_budget.h"

namespace mls::ops::cuda::kernels {

inline void mbar_init(uint64_t* bar, int arrivals) {
  *bar = static_cast<uint64_t>(arrivals) << 32 | static_cast<uint32_t>(arrivals);
}

inline void mbar_arrive(uint32_t bar) {
  uint64_t& b = *static_cast<uint64_t*>(emu::smem_pointer(bar));
  const uint64_t pending = b & 0xffffffffu, expected = b >> 32 & 0x7fffffffu;
  if (pending == 0 || expected == 0)
    throw emu::KernelFault("mbarrier at shared address " + std::to_string(bar) +
                           ": an arrival on an uninitialised barrier");
  if (pending > 1)
    b -= 1;
  else
    b = ((b >> 63 ^ 1) << 63) | expected << 32 | expected;
}

inline void cp_async_mbar_arrive(uint64_t* bar) {
  emu::async_flush_copies();
  mbar_arrive(smem_addr(bar));
}

inline void mbar_wait(uint32_t bar, uint32_t parity) {
  const uint64_t* b = static_cast<const uint64_t*>(emu::smem_pointer(bar));
  emu::block_until([b, parity] { return (*b >> 63) != (parity & 1); });
}

inline void named_barrier_sync(int id, int threads) {
  emu::named_barrier(id, threads);
}

inline void named_barrier_arrive(int id, int threads) {
  emu::named_barrier_arrive(id, threads);
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
