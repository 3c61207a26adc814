// The experts kernel's consumer loop, isolated: one or two consumer warpgroups of a persistent
// CTA per SM run the MMA / promotion pattern of moe_fp8_tc_kernels.cu on a static shared-memory
// ring (no producer) and time themselves with clock64. Modes separate the MMAs alone (one or two
// groups in flight), the promotions' FFMAs alone, the kernel's pattern, and rings of four
// m64n64k32 fragments with two or three groups in flight (bench/RESULTS.md, session 25).
//   wgmma_probe [steps]   clocks per sub-step (an m64n128k32, two in mode 10, and its 64 FFMAs
//                         a warpgroup).
// Every MMA's result must reach the output: ptxas removes an MMA whose accumulator nothing reads
// (the MMA-only modes accumulate, and their sums are kept).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "ops/cuda/pipeline_ptx.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

using namespace mls::ops::cuda::kernels;

namespace {

// d (+)= A · Bᵀ, A 64×32 and B 64×32 e4m3 in shared memory (kAccumulate: d += ...).
template <int kAccumulate>
__device__ __forceinline__ void wgmma_e4m3_m64n64k32(float (&d)[32], uint64_t desc_a,
                                                     uint64_t desc_b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" MLS_WGMMA_D32_REGS
               "}, %32, %33, %34, 1, 1;\n"
               : MLS_WGMMA_D32(d, 0)
               : "l"(desc_a), "l"(desc_b), "n"(kAccumulate));
}

constexpr int kSlots = 4, kTile = 128 * 128;
constexpr int kSmem = kSlots * 2 * kTile + 1024;

template <int N>
__device__ __forceinline__ void promote(float (&acc)[N], float (&p)[N], float f0, float f1) {
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    acc[4 * j + 0] += p[4 * j + 0] * f0;
    acc[4 * j + 1] += p[4 * j + 1] * f0;
    acc[4 * j + 2] += p[4 * j + 2] * f1;
    acc[4 * j + 3] += p[4 * j + 3] * f1;
  }
}

// Mode: 0 MMA, wait<0> each; 1 MMA, two fragments, wait<1>; 2 the kernel's pattern (issue, wait<1>,
// promote the previous); 3 promotions only; 4 a ring of four m64n64k32 fragments, wait<3>, each
// unit promoted (two units a sub-step); 5 as 4 with wait<2>; 6 as 0 in two m64n64k32 halves;
// 7 and 8 as 1 with, where 2 promotes, 64 FFMAs (7) or IMADs (8) that read no MMA's registers:
// whether any FP32 work, or any work, waits for the MMAs as the promotions do; 9 as 2 with the
// kernel's proxy fence (MEMBAR.ALL.CTA and FENCE.VIEW.ASYNC.S) once every four sub-steps; 10 as 2
// with two chained MMAs a sub-step (the kernel promoting every 64 K).
template <int kMode>
__device__ void consume(uint8_t* smem, int steps, float* out, long long* clocks, int wg) {
  const uint64_t da = wgmma_desc_sw128(smem + (wg - 1) * 64 * 128),
                 db = wgmma_desc_sw128(smem + kSlots * kTile);
  const uint32_t hi = static_cast<uint32_t>(da >> 32), a_lo = static_cast<uint32_t>(da),
                 b_lo = static_cast<uint32_t>(db);
  const auto desc = [hi](uint32_t lo) { return uint64_t{hi} << 32 | lo; };
  const float f0 = 1.0f + threadIdx.x * 1e-7f, f1 = 1.0f - threadIdx.x * 1e-7f;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  const long long t0 = clock64();
  if constexpr (kMode != 4 && kMode != 5) {
    float p0[64], p1[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) p0[i] = p1[i] = 0.0f;
    const auto off = [](int s) {
      return static_cast<uint32_t>((s & 3) * (kTile >> 4) + 2 * ((s >> 2) & 3));
    };
    // The MMA-only modes (0, 1) accumulate in the tensor cores, so each MMA's result is read.
    constexpr int kAccumulate = kMode == 2 || kMode == 9 || kMode == 10 ? 0 : 1;
    const auto issue = [&](float(&p)[64], int s) {
      wgmma_fence_operands(p);
      wgmma_fence();
      if constexpr (kMode == 10) {  // K 0-63 or 64-127 of the slot's block, chained
        const uint32_t o = static_cast<uint32_t>((s & 3) * (kTile >> 4) + 4 * ((s >> 2) & 1));
        wgmma_e4m3_m64n128k32(p, desc(a_lo + o), desc(b_lo + o), 0);
        wgmma_e4m3_m64n128k32(p, desc(a_lo + o + 2), desc(b_lo + o + 2), 1);
      } else {
        wgmma_e4m3_m64n128k32(p, desc(a_lo + off(s)), desc(b_lo + off(s)), kAccumulate);
      }
      wgmma_commit();
    };
    if constexpr (kMode == 3) {
      for (int s = 0; s < steps; s += 2) {
        promote(acc, p0, f0, f1);
        wgmma_fence_operands(acc);
        promote(acc, p1, f0, f1);
        wgmma_fence_operands(acc);
      }
    } else if constexpr (kMode == 0) {
      for (int s = 0; s < steps; ++s) {
        issue(p0, s);
        wgmma_wait<0>();
        wgmma_fence_operands(p0);
      }
      promote(acc, p0, f0, f1);
    } else if constexpr (kMode == 6) {  // two m64n64k32 halves a sub-step, each waited for
      float(&h)[32] = *reinterpret_cast<float(*)[32]>(&p0[0]);
      for (int s = 0; s < steps; ++s)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          wgmma_fence_operands(h);
          wgmma_fence();
          wgmma_e4m3_m64n64k32<1>(h, desc(a_lo + off(s)),
                                  desc(b_lo + off(s) + c * (64 * 128 >> 4)));
          wgmma_commit();
          wgmma_wait<0>();
          wgmma_fence_operands(h);
        }
      promote(acc, p0, f0, f1);
    } else {
      // As the kernel: sub-step 0 issued ahead; then each issue is followed by the wait for the
      // previous one and its promotion. The loop takes four, the rest a ladder whose every exit
      // waits for and promotes the one fragment in flight (else ptxas serialises the MMAs).
      const auto st = [&](float(&cur)[64], float(&prev)[64], int s) {
        issue(cur, s);
        wgmma_wait<1>();
        wgmma_fence_operands(prev);
        if constexpr (kMode == 2 || kMode == 9 || kMode == 10) promote(acc, prev, f0, f1);
        if constexpr (kMode == 7) {  // as many FFMAs, none reading an MMA's registers
#pragma unroll
          for (int i = 0; i < 64; ++i) acc[i] = acc[i] * f0 + f1;
        }
        if constexpr (kMode == 8) {  // as many integer multiply-adds (IMAD), on acc's bits
#pragma unroll
          for (int i = 0; i < 64; ++i)
            acc[i] = __int_as_float(__float_as_int(acc[i]) * 3 + static_cast<int>(threadIdx.x));
        }
      };
      const auto last = [&](float(&p)[64]) {
        wgmma_wait<0>();
        wgmma_fence_operands(p);
        promote(acc, p, f0, f1);
      };
      issue(p0, 0);
      int s = 1;
      for (; s + 4 <= steps; s += 4) {
        if constexpr (kMode == 9) fence_proxy_async_smem();  // the kernel's, once a K block
        st(p1, p0, s);
        st(p0, p1, s + 1);
        st(p1, p0, s + 2);
        st(p0, p1, s + 3);
      }
      if (s == steps) {
        last(p0);
      } else {
        st(p1, p0, s);
        if (s + 1 == steps) {
          last(p1);
        } else {
          st(p0, p1, s + 1);
          if (s + 2 == steps) {
            last(p0);
          } else {
            st(p1, p0, s + 2);
            last(p1);
          }
        }
      }
      if constexpr (kMode == 1 || kMode == 7 || kMode == 8) {  // both fragments' sums
        wgmma_fence_operands(p0);
        wgmma_fence_operands(p1);
        promote(acc, p0, f0, f1);
        promote(acc, p1, f0, f1);
      }
    }
  } else {
    // Units of m64n64k32: unit u is column half u % 2 of sub-step u / 2, into fragment u % 4.
    float q[4][32];
#pragma unroll
    for (int f = 0; f < 4; ++f)
#pragma unroll
      for (int i = 0; i < 32; ++i) q[f][i] = 0.0f;
    constexpr int kWait = kMode == 4 ? 3 : 2;
    const auto issue = [&]<int F>(int u) {
      const int s = u >> 1;
      const uint32_t o = static_cast<uint32_t>((s & 3) * (kTile >> 4) + 2 * ((s >> 2) & 3));
      wgmma_fence_operands(q[F]);
      wgmma_fence();
      wgmma_e4m3_m64n64k32<0>(q[F], desc(a_lo + o), desc(b_lo + o + (u & 1) * (64 * 128 >> 4)));
      wgmma_commit();
    };
    // Unit u into fragment F = u % 4, then the wait for unit u - kWait and its promotion.
    const auto unit = [&]<int F>(int u) {
      issue.template operator()<F>(u);
      wgmma_wait<kWait>();
      constexpr int P = (F + 4 - kWait) % 4;
      wgmma_fence_operands(q[P]);
      float(&a)[32] = *reinterpret_cast<float(*)[32]>(&acc[32 * (P & 1)]);
      promote(a, q[P], f0, f1);
    };
    // Every exit waits for and promotes the kWait fragments in flight, known at compile time:
    // F is the fragment the next unit would take.
    const auto drain = [&]<int F>() {
      wgmma_wait<0>();
      [&]<int... I>(std::integer_sequence<int, I...>) {
        (([&] {
           constexpr int P = (F + 4 - kWait + I) % 4;
           wgmma_fence_operands(q[P]);
           float(&a)[32] = *reinterpret_cast<float(*)[32]>(&acc[32 * (P & 1)]);
           promote(a, q[P], f0, f1);
         }()),
         ...);
      }
      (std::make_integer_sequence<int, kWait>{});
    };
    issue.template operator()<0>(0);
    issue.template operator()<1>(1);
    if constexpr (kWait == 3) issue.template operator()<2>(2);
    const int n = 2 * steps;
    int u = kWait;
    constexpr int F0 = kWait % 4, F1 = (kWait + 1) % 4, F2 = (kWait + 2) % 4, F3 = (kWait + 3) % 4;
    for (; u + 4 <= n; u += 4) {
      unit.template operator()<F0>(u);
      unit.template operator()<F1>(u + 1);
      unit.template operator()<F2>(u + 2);
      unit.template operator()<F3>(u + 3);
    }
    if (u == n) {
      drain.template operator()<F0>();
    } else {
      unit.template operator()<F0>(u);
      if (u + 1 == n) {
        drain.template operator()<F1>();
      } else {
        unit.template operator()<F1>(u + 1);
        if (u + 2 == n) {
          drain.template operator()<F2>();
        } else {
          unit.template operator()<F2>(u + 2);
          drain.template operator()<F3>();
        }
      }
    }
  }
  const long long t1 = clock64();
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s += acc[i];
  if (s == 12345.0f) out[threadIdx.x] = s;  // keeps the arithmetic
  if (threadIdx.x % 128 == 0) clocks[blockIdx.x * 2 + wg - 1] = t1 - t0;
}

template <int kMode>
__global__ void __launch_bounds__(384, 1)
    probe(int steps, int active_wgs, float* out, long long* clocks) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = align_smem_1024(smem_raw);
  for (int i = threadIdx.x; i < kSlots * 2 * kTile / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(smem)[i] =
        make_uint4(0x38383838u, 0x38383838u, 0x38383838u, 0x38383838u);
  fence_proxy_async_smem();
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
  if (wg == 0) {
    warpgroup_reg_dealloc<56>();
    return;
  }
  warpgroup_reg_alloc<224>();
  if (wg > active_wgs) {
    if (threadIdx.x % 128 == 0) clocks[blockIdx.x * 2 + wg - 1] = 0;
    return;
  }
  consume<kMode>(smem, steps, out, clocks, wg);
}

template <int kMode>
void run(const char* name, int steps, int sms, int wgs, float* out, long long* clocks,
         long long* host) {
  constexpr int kMmas = kMode == 10 ? 2 : 1;  // m64n128k32 MMAs a sub-step
  cudaFuncSetAttribute(probe<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  probe<kMode><<<sms, 384, kSmem>>>(steps, wgs, out, clocks);
  cudaEventRecord(a);
  probe<kMode><<<sms, 384, kSmem>>>(steps, wgs, out, clocks);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaMemcpy(host, clocks, sizeof(long long) * 2 * sms, cudaMemcpyDeviceToHost);
  double sum = 0;
  int n = 0;
  for (int i = 0; i < 2 * sms; ++i)
    if (host[i] > 0) {
      sum += host[i];
      ++n;
    }
  const double per = sum / n / steps;
  // Useful work: a sub-step is kMmas x 64 x 128 x 32 MACs a warpgroup.
  const double tflops = 2.0 * 64 * 128 * 32 * kMmas * steps * wgs * sms / (ms * 1e-3) / 1e12;
  std::printf("%-44s wgs %d: %7.1f clocks/sub-step, %8.3f ms, %6.0f TFLOP/s  %s\n", name, wgs, per,
              ms, tflops, cudaGetErrorString(cudaGetLastError()));
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 16384;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* out;
  long long* clocks;
  cudaMalloc(&out, 4096);
  cudaMalloc(&clocks, sizeof(long long) * 2 * sms);
  long long* host = new long long[2 * sms];
  for (int wgs = 1; wgs <= 2; ++wgs) {
    run<0>("0 MMA m64n128k32, wait<0> each", steps, sms, wgs, out, clocks, host);
    run<1>("1 MMA, two fragments, wait<1>", steps, sms, wgs, out, clocks, host);
    run<3>("3 promotions only (64 FFMA a sub-step)", steps, sms, wgs, out, clocks, host);
    run<2>("2 the kernel: issue, wait<1>, promote prev", steps, sms, wgs, out, clocks, host);
    run<4>("4 ring: 4 x m64n64k32, wait<3>", steps, sms, wgs, out, clocks, host);
    run<5>("5 ring: 4 x m64n64k32, wait<2>", steps, sms, wgs, out, clocks, host);
    run<6>("6 MMA 2 x m64n64k32, wait<0> each", steps, sms, wgs, out, clocks, host);
    run<7>("7 as 1, plus 64 FFMA not on MMA registers", steps, sms, wgs, out, clocks, host);
    run<8>("8 as 1, plus 64 IMAD", steps, sms, wgs, out, clocks, host);
    run<9>("9 as 2, a proxy fence every 4 sub-steps", steps, sms, wgs, out, clocks, host);
    run<10>("10 as 2, two chained MMAs a sub-step", steps, sms, wgs, out, clocks, host);
  }
  return 0;
}
