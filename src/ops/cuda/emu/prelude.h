// The CUDA kernel emulator: compiles a kernel source (.cu) as host C++ and runs it on the CPU,
// for tests of a kernel's logic (its addressing, layouts, barriers and hand-overs) on machines
// without a GPU. cmake/emulated_kernel_source.cmake writes the translation unit: this header,
// then the .cu file with each extern __shared__ array made a pointer to the CTA's window; it
// builds with src/ops/cuda/emu/include ahead of src on its include path, so the PTX headers
// (mma_ptx.cuh, wgmma_ptx.cuh, pipeline_ptx.cuh), launch.cuh and device_facts.h there replace the
// real ones with emulations; every other header (layouts, descriptors, key addressing) is the
// real one.
// What it checks and what it does not:
//   - values: every MMA, copy and shuffle computes what the PTX defines, MMAs in double
//     precision (the device's FP8 MMAs keep fewer bits: a numerics question for the GPU tests);
//   - ordering: asynchronous copies and MMAs land at the latest point their PTX waits allow
//     (cta_runtime.h), uninitialised shared memory reads as NaN, and a kernel that cannot finish
//     is reported instead of hanging;
//   - not: memory-model fences (threads see each other's writes at once), timing, registers
//     (except a warpgroup reallocation's budget).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/cuda/emu/cta_runtime.h"

#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __grid_constant__
#define __grid_constant__
// A kernel's static shared variables are shared by the CTA's threads (which run one CTA at a
// time): function statics.
#undef __shared__
#define __shared__ static

#define threadIdx (::mls::ops::cuda::emu::coords().thread)
#define blockIdx (::mls::ops::cuda::emu::coords().block)
#define blockDim (::mls::ops::cuda::emu::coords().block_dim)
#define gridDim (::mls::ops::cuda::emu::coords().grid_dim)

// The runtime calls of a launcher: device 0, and errors thrown (KernelFault) rather than left.
#define cudaGetDevice(dev) (*(dev) = 0, cudaSuccess)
#define cudaGetLastError() cudaSuccess
#define cudaFuncSetAttribute(kernel, attribute, value) cudaSuccess
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, kernel, threads, smem) \
  (*(n) = 1, cudaSuccess)

namespace mls::ops::cuda::emu {

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace mls::ops::cuda::emu

inline void __syncthreads() {
  ::mls::ops::cuda::emu::cta_barrier(0);
}
inline int __syncthreads_or(int p) {
  return ::mls::ops::cuda::emu::cta_barrier(p) > 0;
}
inline int __syncthreads_and(int p) {
  return ::mls::ops::cuda::emu::cta_barrier(!p) == 0;
}
inline int __syncthreads_count(int p) {
  return ::mls::ops::cuda::emu::cta_barrier(p);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::mls::ops::cuda::emu::warp_exchange(mask, 0);
}

// Shuffles within segments of `width` lanes, as the intrinsics define them.
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  namespace e = ::mls::ops::cuda::emu;
  const int lane = e::coords().linear & 31;
  const uint64_t* s = e::warp_exchange(mask, e::to_bits(v));
  return e::from_bits<T>(s[(lane & ~(width - 1)) + (src & (width - 1))]);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  namespace e = ::mls::ops::cuda::emu;
  const int lane = e::coords().linear & 31;
  const uint64_t* s = e::warp_exchange(mask, e::to_bits(v));
  const int src = lane ^ lane_mask;
  return (src & ~(width - 1)) > (lane & ~(width - 1)) ? v : e::from_bits<T>(s[src]);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  namespace e = ::mls::ops::cuda::emu;
  const int lane = e::coords().linear & 31;
  const uint64_t* s = e::warp_exchange(mask, e::to_bits(v));
  return (lane & (width - 1)) >= static_cast<int>(delta) ? e::from_bits<T>(s[lane - delta]) : v;
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  namespace e = ::mls::ops::cuda::emu;
  const int lane = e::coords().linear & 31;
  const uint64_t* s = e::warp_exchange(mask, e::to_bits(v));
  return (lane & (width - 1)) + static_cast<int>(delta) < width ? e::from_bits<T>(s[lane + delta])
                                                                : v;
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  namespace e = ::mls::ops::cuda::emu;
  const uint64_t* s = e::warp_exchange(mask, pred != 0);
  unsigned bits = 0;
  for (int i = 0; i < 32; ++i)
    if ((mask >> i & 1) && s[i]) bits |= 1u << i;
  return bits;
}
inline int __any_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) != 0;
}
inline int __all_sync(unsigned mask, int pred) {
  return __ballot_sync(mask, pred) == mask;
}

inline unsigned __match_any_sync(unsigned mask, uint64_t value) {
  namespace e = ::mls::ops::cuda::emu;
  const uint64_t* s = e::warp_exchange(mask, value);
  unsigned bits = 0;
  for (int i = 0; i < 32; ++i)
    if ((mask >> i & 1) && s[i] == value) bits |= 1u << i;
  return bits;
}

// Fibers run one at a time and yield only at collectives: a read-modify-write is atomic, and
// every write is visible to the others at once (fences order nothing more here).
namespace mls::ops::cuda::emu {
template <typename T>
T fetch_add(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
}  // namespace mls::ops::cuda::emu
inline int atomicAdd(int* p, int v) {
  return ::mls::ops::cuda::emu::fetch_add(p, v);
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return ::mls::ops::cuda::emu::fetch_add(p, v);
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return ::mls::ops::cuda::emu::fetch_add(p, v);
}
inline int atomicMin(int* p, int v) {
  const int old = *p;
  *p = v < old ? v : old;
  return old;
}
inline float atomicAdd(float* p, float v) {
  return ::mls::ops::cuda::emu::fetch_add(p, v);
}
inline void __threadfence() {}
inline void __threadfence_block() {}
template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline int __ffs(int x) {
  return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1;
}
inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
inline float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}

// Warp reductions (sm_80+) over the lanes of the mask.
template <typename T, typename Op>
T reduce_sync(unsigned mask, T v, Op op) {
  const uint64_t* s = ::mls::ops::cuda::emu::warp_exchange(mask, ::mls::ops::cuda::emu::to_bits(v));
  bool first = true;
  T r{};
  for (int i = 0; i < 32; ++i)
    if (mask >> i & 1) {
      const T x = ::mls::ops::cuda::emu::from_bits<T>(s[i]);
      r = first ? x : op(r, x);
      first = false;
    }
  return r;
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
  return reduce_sync(mask, v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int __reduce_max_sync(unsigned mask, int v) {
  return reduce_sync(mask, v, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) {
  return reduce_sync(mask, v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
inline int __reduce_min_sync(unsigned mask, int v) {
  return reduce_sync(mask, v, [](int a, int b) { return a < b ? a : b; });
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  return reduce_sync(mask, v, [](unsigned a, unsigned b) { return a + b; });
}
inline int __reduce_add_sync(unsigned mask, int v) {
  return reduce_sync(mask, v, [](int a, int b) { return a + b; });
}

inline int __clz(unsigned x) {
  return std::countl_zero(x);
}
// Round-to-nearest float operations that the device keeps from fusing: plain ones on the host
// (which does not contract them across statements either).
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline double __dsub_rn(double a, double b) {
  return a - b;
}
inline double __dmul_rn(double a, double b) {
  return a * b;
}
// Conversions in the host's default rounding (to nearest) or truncating casts (toward zero).
inline double __ull2double_rn(unsigned long long x) {
  return static_cast<double>(x);
}
inline unsigned long long __double2ull_rz(double x) {
  return static_cast<unsigned long long>(x);
}
inline float __double2float_rn(double x) {
  return static_cast<float>(x);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
using std::isinf;
using std::isnan;

inline float __expf(float x) {
  return std::exp(x);
}
// CUDA's integer min and max (device code calls them unqualified).
using std::max;
using std::min;
