// Device dispatch for ops: each op declares its per-device implementations in namespaces
// ops::cpu and ops::cuda, its contract `<op>_contract` with the op's own parameters
// (ops/contract.h), and forwards through MLS_DISPATCH, which checks the contract first on every
// device and in meta mode alike (one check per op, not one per backend). An op whose output has
// no backing memory (the allocator's meta mode) then computes nothing. An op that takes device
// scratch forwards through MLS_DISPATCH_SCRATCH with its host-only scratch plan (sizes from
// ops/scratch_sizes.h): in meta mode the dispatcher takes and returns that scratch from the
// output's allocator, so the meta trace holds every byte the device op would allocate, at the same
// point of the forward. After an op has run, ops::after_op names it to a probe, if one is set
// (ops/op_probe.h).
#pragma once

#include <array>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/contract.h"
#include "ops/op_probe.h"
#include "ops/scratch_sizes.h"

namespace mls::ops {

inline bool is_meta(const Tensor& out) {
  return out.raw() == nullptr && out.numel() > 0;
}

// Scratch one call takes, in the order the device op allocates it (all held at once).
struct ScratchNeed {
  int64_t elems = 0;
  DType dtype = DType::kF32;
  MemTag tag = MemTag::kActivation;
};
using ScratchPlan = std::array<ScratchNeed, 2>;

// Meta mode: allocates the plan's tensors from out's allocator and frees them again.
inline void trace_scratch(const Tensor& out, const ScratchPlan& plan) {
  Allocator* alloc = out.allocator();
  if (!alloc) raise<InternalError>("meta tensor {} has no allocator", out.str());
  std::array<Tensor, 2> held;
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].elems > 0)
      held[i] = Tensor::empty({plan[i].elems}, plan[i].dtype, plan[i].tag, *alloc);
}

}  // namespace mls::ops

#ifdef MLASERVE_CUDA
#define MLS_DISPATCH_BODY(out, fn, ...) \
  if ((out).device().is_cpu())          \
    cpu::fn(__VA_ARGS__);               \
  else                                  \
    cuda::fn(__VA_ARGS__);              \
  ::mls::ops::after_op(#fn)
#else
#define MLS_DISPATCH_BODY(out, fn, ...)                                          \
  if (!(out).device().is_cpu())                                                  \
    ::mls::raise<::mls::Unsupported>("{}: this build has no CUDA backend", #fn); \
  cpu::fn(__VA_ARGS__);                                                          \
  ::mls::ops::after_op(#fn)
#endif

#define MLS_DISPATCH(out, fn, ...)           \
  do {                                       \
    fn##_contract(__VA_ARGS__);              \
    if (::mls::ops::is_meta(out)) return;    \
    MLS_DISPATCH_BODY(out, fn, __VA_ARGS__); \
  } while (0)

// `plan`: an expression of type ScratchPlan, evaluated only in meta mode on a device.
#define MLS_DISPATCH_SCRATCH(out, plan, fn, ...)                          \
  do {                                                                    \
    fn##_contract(__VA_ARGS__);                                           \
    if (::mls::ops::is_meta(out)) {                                       \
      if (!(out).device().is_cpu()) ::mls::ops::trace_scratch(out, plan); \
      return;                                                             \
    }                                                                     \
    MLS_DISPATCH_BODY(out, fn, __VA_ARGS__);                              \
  } while (0)
