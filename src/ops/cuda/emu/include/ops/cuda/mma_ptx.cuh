// Emulation (prelude.h) of ops/cuda/mma_ptx.cuh: shared addresses are offsets into the CTA's
// window; cp.async copies are queued on the thread and land when it waits for their group;
// ldmatrix and the warp-level MMAs are warp collectives, each lane computing its own fragment
// from the lanes' registers as the PTX fragment layouts place them (MMAs in double precision).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#include "ops/cuda/emu/cta_runtime.h"

namespace mls::ops::cuda::kernels {

inline uint32_t smem_addr(const void* ptr) {
  return emu::smem_offset(ptr);
}

inline void cp_async16(void* dst, const void* src, int bytes) {
  emu::copy_async(dst, src, 16, bytes);
}
template <int kOffset>
inline void cp_async16_at(uint32_t dst, const void* src, int bytes) {
  emu::copy_async(emu::smem_pointer(dst + kOffset), src, 16, bytes);
}
inline uint64_t l2_evict_last_policy() {
  return 0;
}
inline uint64_t l2_evict_first_policy() {
  return 0;
}
template <int kOffset>
inline void cp_async16_at_l2(uint32_t dst, const void* src, int bytes, uint64_t) {
  cp_async16_at<kOffset>(dst, src, bytes);
}
inline void cp_async4(void* dst, const void* src, int bytes) {
  emu::copy_async(dst, src, 4, bytes);
}
inline void cp_async_commit() {
  emu::async_commit(emu::AsyncKind::kCopy);
}
template <int N>
inline void cp_async_wait() {
  emu::async_wait(emu::AsyncKind::kCopy, N);
}

namespace emu_detail {

// The 32 lanes' values of a warp collective, copied out of the exchange's slots.
struct Lanes {
  uint64_t v[32];
};
inline Lanes exchange(uint64_t value) {
  Lanes l;
  std::memcpy(l.v, emu::warp_exchange(0xffffffffu, value), sizeof(l.v));
  return l;
}
inline int lane_id() {
  return emu::coords().linear & 31;
}

// Four 8 × 8 matrices of b16: lanes 8i .. 8i + 7 give the rows of matrix i; register j of lane l
// holds matrix j's row l / 4, columns 2(l % 4) and 2(l % 4) + 1 (transposed: column l / 4 of
// rows 2(l % 4) and 2(l % 4) + 1).
inline void ldmatrix(uint32_t (&r)[4], const void* ptr, bool trans) {
  const Lanes rows = exchange(reinterpret_cast<uint64_t>(ptr));
  const int l = lane_id();
  const auto at = [&](int matrix, int row, int col) {
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const uint16_t*>(rows.v[8 * matrix + row]) + col, 2);
    return uint32_t{v};
  };
  for (int j = 0; j < 4; ++j)
    r[j] = trans ? at(j, 2 * (l % 4), l / 4) | at(j, 2 * (l % 4) + 1, l / 4) << 16
                 : at(j, l / 4, 2 * (l % 4)) | at(j, l / 4, 2 * (l % 4) + 1) << 16;
}

// d += A · B for an m16n8 fragment with K = 16 bf16 or 32 e4m3 (kPer elements a register):
// A's register i of lane l holds row l / 4 + 8 (i % 2), k = kPer (l % 4) + 4 kPer (i / 2) + e;
// B's register i holds k = kPer (l % 4) + 4 kPer i + e, column l / 4; d[c] is row l / 4 + 8 (c /
// 2), column 2 (l % 4) + c % 2.
template <typename In>
void mma_m16n8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  constexpr int kPer = 4 / sizeof(In), K = 8 * kPer;
  const Lanes a01 = exchange(a[0] | uint64_t{a[1]} << 32),
              a23 = exchange(a[2] | uint64_t{a[3]} << 32), b = exchange(b0 | uint64_t{b1} << 32);
  const auto element = [](uint64_t regs, int reg, int e) {
    const uint32_t word = static_cast<uint32_t>(regs >> (32 * reg));
    In x;
    std::memcpy(&x, reinterpret_cast<const unsigned char*>(&word) + e * sizeof(In), sizeof(In));
    return static_cast<double>(static_cast<float>(x));
  };
  const auto a_at = [&](int row, int k) {
    const int lane = (row % 8) * 4 + (k % (4 * kPer)) / kPer, reg = row / 8 + 2 * (k / (4 * kPer));
    return element(reg < 2 ? a01.v[lane] : a23.v[lane], reg % 2, k % kPer);
  };
  const auto b_at = [&](int k, int col) {
    return element(b.v[col * 4 + (k % (4 * kPer)) / kPer], k / (4 * kPer), k % kPer);
  };
  const int l = lane_id();
  for (int c = 0; c < 4; ++c) {
    const int row = l / 4 + 8 * (c / 2), col = 2 * (l % 4) + c % 2;
    double s = d[c];
    for (int k = 0; k < K; ++k) s += a_at(row, k) * b_at(k, col);
    d[c] = static_cast<float>(s);
  }
}

}  // namespace emu_detail

inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* ptr) {
  emu_detail::ldmatrix(r, ptr, false);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* ptr) {
  emu_detail::ldmatrix(r, ptr, true);
}
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu_detail::mma_m16n8<__nv_bfloat16>(d, a, b0, b1);
}
inline void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                     uint32_t b1) {
  const uint32_t a[4] = {a0, a1, a2, a3};
  emu_detail::mma_m16n8<__nv_fp8_e4m3>(d, a, b0, b1);
}

}  // namespace mls::ops::cuda::kernels
