// Device dispatch for ops: each op declares its per-device implementations in namespaces
// ops::cpu and ops::cuda and forwards through MLS_DISPATCH. An op whose output has no backing
// memory (the allocator's meta mode) does nothing: the planner traces allocations only.
#pragma once

#include "core/error.h"
#include "core/tensor.h"

namespace mls::ops {

inline bool is_meta(const Tensor& out) {
  return out.raw() == nullptr && out.numel() > 0;
}

}  // namespace mls::ops

#ifdef MLASERVE_CUDA
#define MLS_DISPATCH(out, fn, ...)                            \
  do {                                                        \
    if (::mls::ops::is_meta(out)) return;                     \
    if ((out).device().is_cpu()) return cpu::fn(__VA_ARGS__); \
    return cuda::fn(__VA_ARGS__);                             \
  } while (0)
#else
#define MLS_DISPATCH(out, fn, ...)                                                 \
  do {                                                                             \
    if (::mls::ops::is_meta(out)) return;                                          \
    if (!(out).device().is_cpu())                                                  \
      ::mls::raise<::mls::Unsupported>("{}: this build has no CUDA backend", #fn); \
    return cpu::fn(__VA_ARGS__);                                                   \
  } while (0)
#endif
