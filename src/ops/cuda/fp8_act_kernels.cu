// The FP8 linears' activation quantisation (fp8_act_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ops/cuda/fp8_act_kernels.h"
#include "ops/cuda/fp8_act_rows.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/silu.cuh"

namespace mls::ops::cuda::kernels {
namespace {

constexpr int kQuantBlock = 256;   // 8 warps
constexpr int kGroupsPerWarp = 4;  // 128-groups of one token per warp, loaded together

// Where the quantised values come from: x itself (row t, or row rows[t] when given: a negative
// index is a zero row), or silu(gate) · up (x is gate), which the kernel also writes to `out` in
// bf16 exactly as ops::silu_mul does, and quantises as stored.
struct QuantSource {
  const __nv_bfloat16* x;
  int64_t ldx;
  const int32_t* rows = nullptr;
  const __nv_bfloat16* up = nullptr;
  int64_t ldu = 0;
  __nv_bfloat16* out = nullptr;
  int64_t ldo = 0;
};

// Four values of row `row` from column k0 (zero past K).
__device__ __forceinline__ void load4(const __nv_bfloat16* row, int64_t k0, int64_t K, bool vec,
                                      float* v) {
  if (vec && k0 + 4 <= K) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(row + k0));
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    v[0] = __low2float(lo);
    v[1] = __high2float(lo);
    v[2] = __low2float(hi);
    v[3] = __high2float(hi);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = k0 + i < K ? __bfloat162float(row[k0 + i]) : 0.0f;
  }
}

// One warp per kGroupsPerWarp consecutive 128-groups of a token; lane l holds elements
// 4l..4l+3 of each group (one 8-byte load when the row allows it).
template <bool kSilu>
__global__ void quantize_fp8_act_kernel(const QuantSource src, int64_t T, int64_t K, int64_t KB,
                                        int64_t ldq, int64_t t_lead, bool vec,
                                        uint8_t* __restrict__ q, float* __restrict__ s) {
  pdl_begin();
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_token = (KB + kGroupsPerWarp - 1) / kGroupsPerWarp;
  const int64_t t = gw / warps_per_token;
  if (t >= T) return;
  const int64_t kb0 = gw % warps_per_token * kGroupsPerWarp;
  const int64_t row = src.rows ? src.rows[t] : t;
  float v[kGroupsPerWarp][4];
#pragma unroll
  for (int g = 0; g < kGroupsPerWarp; ++g) {
    const int64_t k0 = (kb0 + g) * 128 + lane * 4;
    load4(src.x + row * src.ldx, k0, row < 0 ? 0 : K, vec, v[g]);
    if constexpr (kSilu) {
      float u[4];
      load4(src.up + t * src.ldu, k0, K, vec, u);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __nv_bfloat16 r = __float2bfloat16_rn(silu_mul_value(v[g][i], u[i]));
        if (k0 + i < K) src.out[t * src.ldo + k0 + i] = r;
        v[g][i] = __bfloat162float(r);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kGroupsPerWarp; ++g) {
    const int64_t kb = kb0 + g;
    if (kb >= KB) break;
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[g][i]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = fp8_act::group_scale(amax);
    const int64_t k0 = kb * 128 + lane * 4;
    if (k0 < ldq)
      *reinterpret_cast<uint32_t*>(q + t * ldq + k0) =
          static_cast<uint32_t>(fp8_act::pack<4>(v[g], scale));
    if (lane == 0) s[fp8_act::scale_index(t, kb, T, KB, t_lead)] = scale;
  }
}

template <bool kSilu>
cudaError_t launch_quantize(const QuantSource& src, int64_t T, int64_t K, int64_t ldq,
                            int64_t t_lead, uint8_t* q, float* s, cudaStream_t stream) {
  const int64_t KB = (K + 127) / 128;
  const int64_t warps = T * ((KB + kGroupsPerWarp - 1) / kGroupsPerWarp);
  if (warps == 0) return cudaSuccess;
  const int64_t blocks = (warps * 32 + kQuantBlock - 1) / kQuantBlock;
  const auto rows4 = [](const void* p, int64_t ld) {
    return ld % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 8 == 0;
  };
  const bool vec = rows4(src.x, src.ldx) && (!kSilu || rows4(src.up, src.ldu));
  launch(quantize_fp8_act_kernel<kSilu>, static_cast<unsigned>(blocks), kQuantBlock, 0, stream, src,
         T, K, KB, ldq, t_lead, vec, q, s);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_quantize_fp8_act(const void* x, int64_t ldx, int64_t T, int64_t K, int64_t ldq,
                                    int64_t t_lead, uint8_t* q, float* s, cudaStream_t stream) {
  return launch_quantize<false>({.x = static_cast<const __nv_bfloat16*>(x), .ldx = ldx}, T, K, ldq,
                                t_lead, q, s, stream);
}

cudaError_t launch_quantize_fp8_act_rows(const void* x, int64_t ldx, const int32_t* rows, int64_t T,
                                         int64_t K, int64_t ldq, int64_t t_lead, uint8_t* q,
                                         float* s, cudaStream_t stream) {
  return launch_quantize<false>(
      {.x = static_cast<const __nv_bfloat16*>(x), .ldx = ldx, .rows = rows}, T, K, ldq, t_lead, q,
      s, stream);
}

cudaError_t launch_silu_mul_quantize(const void* gate, int64_t ldg, const void* up, int64_t ldu,
                                     void* out, int64_t ldo, int64_t T, int64_t K, int64_t ldq,
                                     int64_t t_lead, uint8_t* q, float* s, cudaStream_t stream) {
  return launch_quantize<true>({.x = static_cast<const __nv_bfloat16*>(gate),
                                .ldx = ldg,
                                .up = static_cast<const __nv_bfloat16*>(up),
                                .ldu = ldu,
                                .out = static_cast<__nv_bfloat16*>(out),
                                .ldo = ldo},
                               T, K, ldq, t_lead, q, s, stream);
}

}  // namespace mls::ops::cuda::kernels
