// Emulation (prelude.h) of ops/cuda/launch.cuh: a launch runs the grid on the CPU
// (emu::run_grid) before it returns; a fault throws emu::KernelFault. Dependent launch is moot.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <tuple>
#include <utility>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/register_budget.h"

namespace mls::ops::cuda::kernels {

inline void pdl_wait() {}
inline void pdl_trigger() {}
inline void pdl_begin() {}
inline bool pdl_enabled() {
  return true;
}

// The registers a warpgroup reallocation moves within: those of __launch_bounds__(threads, 1),
// which every kernel that reallocates declares.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t,
            Args&&... args) {
  const std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
  const int threads = static_cast<int>(block.x * block.y * block.z);
  emu::run_grid({grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, smem,
                launch_regs_per_thread(threads), [&] { std::apply(kernel, params); });
}

// The same as launch: emulated launches run one after another anyway.
template <typename... Params, typename... Args>
void launch_serial(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  launch(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace mls::ops::cuda::kernels
