// Emulation (prelude.h) of ops/cuda/mma_ptx.cuh: shared addresses are offsets into the CTA's
// window; cp.async copies are queued on the thread and land when it waits for their group.
// The warp-level MMAs and ldmatrix are not emulated: a kernel using them does not build here.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/cuda/emu/cta_runtime.h"

namespace mls::ops::cuda::kernels {

inline uint32_t smem_addr(const void* ptr) {
  return emu::smem_offset(ptr);
}

namespace emu_detail {
// `size` bytes to dst, of which the first `bytes` from src and the rest zeros (cp.async's
// src-size), once the copy's group is waited for.
inline void copy_async(void* dst, const void* src, int size, int bytes) {
  emu::async_push(emu::AsyncKind::kCopy, [dst, src, size, bytes] {
    std::memcpy(dst, src, bytes);
    std::memset(static_cast<unsigned char*>(dst) + bytes, 0, size - bytes);
  });
}
}  // namespace emu_detail

inline void cp_async16(void* dst, const void* src, int bytes) {
  emu_detail::copy_async(dst, src, 16, bytes);
}
template <int kOffset>
inline void cp_async16_at(uint32_t dst, const void* src, int bytes) {
  emu_detail::copy_async(emu::smem_pointer(dst + kOffset), src, 16, bytes);
}
inline void cp_async4(void* dst, const void* src, int bytes) {
  emu_detail::copy_async(dst, src, 4, bytes);
}
inline void cp_async_commit() {
  emu::async_commit(emu::AsyncKind::kCopy);
}
template <int N>
inline void cp_async_wait() {
  emu::async_wait(emu::AsyncKind::kCopy, N);
}

}  // namespace mls::ops::cuda::kernels
