// The register budget of a CTA launched with __launch_bounds__(threads, 1), apart from the PTX
// that moves registers between its warpgroups (pipeline_ptx.cuh), so the CPU kernel emulator
// (emu/) holds a kernel to the same budget.
#pragma once

namespace mls::ops::cuda::kernels {

// Registers each thread of a CTA of `threads` threads holds at launch (__launch_bounds__(threads,
// 1)): the CTA's whole allocation. Warpgroup register reallocation only moves registers within
// it; an increase asking for more than the other warpgroups released waits forever.
constexpr int launch_regs_per_thread(int threads) {
  return 65536 / threads / 8 * 8;
}

}  // namespace mls::ops::cuda::kernels
