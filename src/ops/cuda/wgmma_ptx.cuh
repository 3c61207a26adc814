// Inline PTX for Hopper's warpgroup MMA (wgmma, sm_90a): the e4m3 m64n128k32 MMA and the bf16
// m64n64k16 and m64n256k16 MMAs, all with fp32 accumulators and operands in shared memory, laid
// out and described as wgmma_layout.cuh says; the bf16 m64n256k16 also with A in registers.
#pragma once

#include <cstdint>

#include "ops/cuda/mma_ptx.cuh"
#include "ops/cuda/wgmma_layout.cuh"

namespace mls::ops::cuda::kernels {

// An MMA's fp32 fragment d as asm operands, read and written, in order: d[i .. i + 7] (D8),
// d[i .. i + 31] (D32), a whole 64- or 128-float fragment. The wrappers' PTX text numbers them
// %0 upwards.
#define MLS_WGMMA_D8(d, i)                                                                    \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define MLS_WGMMA_D32(d, i) \
  MLS_WGMMA_D8(d, i), MLS_WGMMA_D8(d, i + 8), MLS_WGMMA_D8(d, i + 16), MLS_WGMMA_D8(d, i + 24)
#define MLS_WGMMA_D64(d) MLS_WGMMA_D32(d, 0), MLS_WGMMA_D32(d, 32)
#define MLS_WGMMA_D128(d) MLS_WGMMA_D64(d), MLS_WGMMA_D32(d, 64), MLS_WGMMA_D32(d, 96)
// The same fragments' operand numbers in the PTX text: "%0, %1, ..." up to 31, 63, 127.
#define MLS_WGMMA_D32_REGS                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MLS_WGMMA_D64_REGS                                                                \
  MLS_WGMMA_D32_REGS                                                                      \
  ", "                                                                                    \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MLS_WGMMA_D128_REGS                                                                  \
  MLS_WGMMA_D64_REGS                                                                         \
  ", "                                                                                       \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "    \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, "    \
  "%98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, " \
  "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "     \
  "%127"

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Pins the accumulator registers at this point of the program: without it the compiler may
// move their reads above wgmma_wait or their writes below a wgmma issue (the asm's register
// operands say nothing of the asynchronous proxy).
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&a)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[i])::"memory");
}
// Orders this thread's generic-proxy shared-memory writes (st.shared, cp.async) before later
// async-proxy reads (wgmma, TMA) once a barrier follows.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// d (+)= A · Bᵀ for a warpgroup: A 64×32 e4m3 and B 128×32 e4m3, both K-major in shared memory;
// accumulate == 0 overwrites d. d: the warpgroup's 64×128 fp32 accumulator fragment (thread
// (warp w, lane l) holds rows 16w + l/4 (+8) and columns 8j + 2(l%4) (+1) at d[4j .. 4j + 3]).
__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float (&d)[64], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" MLS_WGMMA_D64_REGS
      "}, %64, %65, p, 1, 1;\n}\n"
      : MLS_WGMMA_D64(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (+)= A · Bᵀ: A 64×16 and B 64×16 bf16, both K-major in shared memory (d as above, 32 floats).
__device__ __forceinline__ void wgmma_bf16_m64n64k16(float (&d)[32], uint64_t desc_a,
                                                     uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" MLS_WGMMA_D32_REGS
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : MLS_WGMMA_D32(d, 0)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (+)= A · B: A 64×16 bf16 K-major; B in shared memory either 256×16 K-major (kBNMajor = 0,
// d (+)= A · Bᵀ as above) or 16×256 N-major (kBNMajor = 1: rows of B contiguous along N); d the
// 64×256 fp32 fragment (128 floats, layout as above).
template <int kBNMajor>
__device__ __forceinline__ void wgmma_bf16_m64n256k16(float (&d)[128], uint64_t desc_a,
                                                      uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MLS_WGMMA_D128_REGS
      "}, %128, %129, p, 1, 1, 0, %131;\n}\n"
      : MLS_WGMMA_D128(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kBNMajor));
}

// d (+)= A · B with A 64×16 bf16 in registers: a[0 .. 3] of thread (warp w, lane l) hold rows
// 16w + l/4, 16w + l/4 + 8, 16w + l/4, 16w + l/4 + 8 at columns 2(l%4) (+1), 2(l%4) (+1), then
// 8 + 2(l%4) (+1) twice, which is how an accumulator fragment holds its columns 8j .. 8j + 15
// (so a product's P feeds the next MMA without shared memory); B and d as wgmma_bf16_m64n256k16.
// The registers stay read until the wait for the MMA.
template <int kBNMajor>
__device__ __forceinline__ void wgmma_bf16_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4],
                                                         uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MLS_WGMMA_D128_REGS
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
      : MLS_WGMMA_D128(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kBNMajor));
}

}  // namespace mls::ops::cuda::kernels
