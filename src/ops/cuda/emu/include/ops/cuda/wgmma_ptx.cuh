// Emulation (prelude.h) of ops/cuda/wgmma_ptx.cuh: each thread's MMA is queued and, when the
// thread waits for its commit group, checks that its shared-memory operands still hold what they
// held at its issue and computes that thread's accumulator fragment (thread
// (warp w, lane l) of the warpgroup: rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1) at
// d[4j .. 4j + 3]) from shared memory, read through the descriptor as the device reads it:
// start address, leading and stride byte offsets, 128-byte swizzle on the address bits.
// Descriptors come from the real ops/cuda/wgmma_layout.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/wgmma_layout.cuh"

namespace mls::ops::cuda::kernels {

inline void wgmma_fence() {}
inline void wgmma_commit() {
  emu::async_commit(emu::AsyncKind::kMma);
}
// wgmma.wait_group is warp-synchronous (.sync.aligned): a warp's lanes leave it together, each
// with its part of the MMAs done, so what one lane does next (release a slot, say) stands for
// its warp. Other warps of the warpgroup are not waited for.
template <int N>
inline void wgmma_wait() {
  emu::async_wait(emu::AsyncKind::kMma, N);
  emu::warp_exchange(0xffffffffu, 0);
}
template <int N>
inline void wgmma_fence_operands(float (&)[N]) {}
template <int N>
inline void wgmma_fence_operands(uint32_t (&)[N]) {}
inline void fence_proxy_async_smem() {}

namespace emu_detail {

struct Desc {
  uint32_t start, lbo, sbo;
};
inline Desc decode(uint64_t d) {
  if ((d >> 62) != 1)
    throw emu::KernelFault("wgmma descriptor without the 128-byte swizzle: layout " +
                           std::to_string(d >> 62));
  return {static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>(d >> 16 & 0x3FFF) << 4,
          static_cast<uint32_t>(d >> 32 & 0x3FFF) << 4};
}
// The 128-byte swizzle: address bits 4-6 XOR bits 7-9.
inline const void* swizzled(uint32_t addr) {
  return emu::smem_pointer(addr ^ ((addr >> 7 & 7) << 4));
}
template <typename In>
float load(uint32_t addr) {
  return static_cast<float>(*static_cast<const In*>(swizzled(addr)));
}
// Element (row, k) of a K-major operand: rows in 128-byte lines, 8-row atoms SBO apart.
template <typename In>
float k_major(const Desc& d, int row, int k) {
  return load<In>(d.start + (row / 8) * d.sbo + (row % 8) * 128 + k * sizeof(In));
}
// Element (k, n) of an N-major operand: 64 columns a 128-byte line (one k), 8-line atoms along
// K SBO apart, the next 64 columns LBO further on.
template <typename In>
float n_major(const Desc& d, int k, int n) {
  return load<In>(d.start + (n / 64) * d.lbo + (k / 8) * d.sbo + (k % 8) * 128 + (n % 64) * 2);
}

// d (+)= A · B for this thread's fragment of the 64 × N result, K = 32 bytes of In; a_at(row, k)
// gives A (rows of this thread's warp).
template <typename In, int N, bool kBNMajor, typename AAt>
void mma(float* d, const AAt& a_at, uint64_t desc_b, int accumulate) {
  constexpr int K = 32 / sizeof(In);
  const Desc b = decode(desc_b);
  const int x = emu::coords().linear & 127, w = x / 32, l = x % 32;
  float arow[2][K];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < K; ++k) arow[h][k] = a_at(16 * w + l / 4 + 8 * h, k);
  for (int j = 0; j < N / 8; ++j)
    for (int c = 0; c < 2; ++c) {
      const int col = 8 * j + 2 * (l % 4) + c;
      float bcol[K];
      for (int k = 0; k < K; ++k)
        bcol[k] = kBNMajor ? n_major<In>(b, k, col) : k_major<In>(b, col, k);
      for (int h = 0; h < 2; ++h) {
        double s = 0.0;
        for (int k = 0; k < K; ++k) s += static_cast<double>(arow[h][k]) * bcol[k];
        float& out = d[4 * j + 2 * h + c];
        const double sum = accumulate ? out + s : s;
        out = static_cast<float>(std::is_same_v<In, __nv_fp8_e4m3> ? emu::fp8_mma_sum(sum) : sum);
      }
    }
}

// A digest of the shared-memory operands this thread's fragment reads: its rows of A (when A is
// in shared memory: desc_a non-null) and its columns of B.
template <typename In, int N, bool kBNMajor>
uint64_t operand_digest(const uint64_t* desc_a, uint64_t desc_b) {
  constexpr int K = 32 / sizeof(In);
  const Desc b = decode(desc_b);
  const int x = emu::coords().linear & 127, w = x / 32, l = x % 32;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the values' bits
  const auto mix = [&h](float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h = (h ^ bits) * 1099511628211ull;
  };
  if (desc_a) {
    const Desc a = decode(*desc_a);
    for (int r = 0; r < 2; ++r)
      for (int k = 0; k < K; ++k) mix(k_major<In>(a, 16 * w + l / 4 + 8 * r, k));
  }
  for (int j = 0; j < N / 8; ++j)
    for (int c = 0; c < 2; ++c)
      for (int k = 0; k < K; ++k) {
        const int col = 8 * j + 2 * (l % 4) + c;
        mix(kBNMajor ? n_major<In>(b, k, col) : k_major<In>(b, col, k));
      }
  return h;
}

// The device may read an MMA's shared-memory operands at any time between its issue and its
// wait, the emulator reads them at the wait: so they are also read at the issue, and a
// difference (a write racing the MMA's reads, before or after them) is reported.
inline void check_operands_stable(uint64_t at_issue, uint64_t at_wait) {
  if (at_issue != at_wait)
    throw emu::KernelFault(
        "wgmma: a shared-memory operand changed between the MMA's issue and its wait (a write "
        "racing its reads)");
}

template <typename In, int N, bool kBNMajor, int R>
void issue(float (&d)[R], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  static_assert(R == N / 2, "a 64 × N fragment is N / 2 floats a thread");
  float* dp = d;
  const uint64_t at_issue = operand_digest<In, N, kBNMajor>(&desc_a, desc_b);
  emu::mma_async([dp, desc_a, desc_b, accumulate, at_issue] {
    check_operands_stable(at_issue, operand_digest<In, N, kBNMajor>(&desc_a, desc_b));
    const Desc a = decode(desc_a);
    mma<In, N, kBNMajor>(
        dp, [&a](int row, int k) { return k_major<In>(a, row, k); }, desc_b, accumulate);
  });
}

// A in registers: each warp's 16 rows come from its own lanes (mma_m16n8's A layout), so the
// warp's lanes exchange them when it issues (a warp executes the instruction together) and the
// MMA keeps the copy, as the registers must not change before the wait.
template <int N, bool kBNMajor, int R>
void issue_rs(float (&d)[R], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
  static_assert(R == N / 2, "a 64 × N fragment is N / 2 floats a thread");
  const Lanes a01 = exchange(a[0] | uint64_t{a[1]} << 32);
  const Lanes a23 = exchange(a[2] | uint64_t{a[3]} << 32);
  std::array<float, 16 * 16> tile;  // the warp's rows 0 .. 15, k 0 .. 15
  for (int lane = 0; lane < 32; ++lane)
    for (int reg = 0; reg < 4; ++reg) {
      const uint32_t word =
          static_cast<uint32_t>((reg < 2 ? a01 : a23).v[lane] >> (32 * (reg % 2)));
      for (int e = 0; e < 2; ++e) {
        __nv_bfloat16 v;
        std::memcpy(&v, reinterpret_cast<const unsigned char*>(&word) + 2 * e, 2);
        const int row = lane / 4 + 8 * (reg % 2), k = 2 * (lane % 4) + 8 * (reg / 2) + e;
        tile[row * 16 + k] = static_cast<float>(v);
      }
    }
  float* dp = d;
  const uint64_t at_issue = operand_digest<__nv_bfloat16, N, kBNMajor>(nullptr, desc_b);
  emu::mma_async([dp, tile, desc_b, accumulate, at_issue] {
    check_operands_stable(at_issue, operand_digest<__nv_bfloat16, N, kBNMajor>(nullptr, desc_b));
    mma<__nv_bfloat16, N, kBNMajor>(
        dp, [&tile](int row, int k) { return tile[(row % 16) * 16 + k]; }, desc_b, accumulate);
  });
}

}  // namespace emu_detail

inline void wgmma_e4m3_m64n128k32(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                  int accumulate) {
  emu_detail::issue<__nv_fp8_e4m3, 128, false>(d, desc_a, desc_b, accumulate);
}
inline void wgmma_bf16_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate) {
  emu_detail::issue<__nv_bfloat16, 64, false>(d, desc_a, desc_b, accumulate);
}
template <int kBNMajor>
inline void wgmma_bf16_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                  int accumulate) {
  emu_detail::issue<__nv_bfloat16, 256, kBNMajor != 0>(d, desc_a, desc_b, accumulate);
}

template <int kBNMajor>
inline void wgmma_bf16_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b,
                                     int accumulate) {
  emu_detail::issue_rs<256, kBNMajor != 0>(d, a, desc_b, accumulate);
}

}  // namespace mls::ops::cuda::kernels
