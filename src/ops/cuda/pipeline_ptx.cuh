// Inline PTX for warp-specialised pipelines on Hopper (sm_90a): shared-memory mbarriers (with
// transaction bytes for bulk copies), the arrival of a thread's cp.async copies on one, named
// barriers, bulk copies from shared to global memory, and warpgroup register reallocation
// (within the CTA's budget, register_budget.h).
// Phases: a barrier starts in phase 0; mbar_wait(bar, p) returns once the phase of parity p has
// completed, so on a fresh barrier a wait for parity 1 returns at once (a producer's first pass
// over an empty ring).
#pragma once

#include <cstdint>

#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/register_budget.h"

namespace mls::ops::cuda::kernels {

__device__ __forceinline__ void mbar_init(uint64_t* bar, int arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}

// One arrival, releasing this thread's earlier shared-memory accesses to the phase's waiters.
// `bar` is the barrier's shared-window address (smem_addr), which a loop converts once.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// An expect-tx of `bytes` (bulk copies, tma_ptx.cuh, will complete them on this barrier), then
// one arrival: the phase completes once its arrivals are in and those bytes have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One arrival once every cp.async this thread issued so far has landed (it counts as one of the
// arrivals the barrier was initialised with).
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}

// Blocks until the phase of parity `parity` has completed (try_wait suspends the thread in
// hardware between polls). `bar` as for mbar_arrive.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// A barrier of `threads` threads (a multiple of 32) on named barrier `id` (1 to 15; 0 is
// __syncthreads'), ordering their shared-memory accesses like __syncthreads.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// An arrival on named barrier `id` without waiting: it completes once `threads` threads arrived
// or synced there (a producer's signal to a named_barrier_sync of its consumers).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// A bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from shared to global
// memory in the thread's bulk group: it runs asynchronously, and the shared source may be reused
// (or the CTA exit) once bulk_wait_read returns. The shared writes it copies must precede it
// behind fence_proxy_async_smem (wgmma_ptx.cuh) and a barrier.
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Warpgroup register reallocation: every warp of the warpgroup executes it; the count is a
// multiple of 8 in [24, 256].
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace mls::ops::cuda::kernels
