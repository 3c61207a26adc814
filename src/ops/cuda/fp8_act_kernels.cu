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
constexpr int kGroupsPerWarp = 8;  // 128-groups of one token per warp, loaded together
constexpr int kLaneValues = 8;     // a half-warp per group: 16 bytes of bf16 a lane

// Where the quantised values come from: x itself (row t), or silu(gate) · up (x is gate), which the
// kernel also writes to `out` in bf16 exactly as ops::silu_mul does, and quantises as stored. Where
// they go: output row t, or, when `dest` is given, output rows dest[t · fan + i] (i < fan;
// negative: none) of out_rows.
struct QuantSource {
  const __nv_bfloat16* x;
  int64_t ldx;
  const int32_t* dest = nullptr;
  int fan = 1;
  int64_t out_rows = 0;
  const __nv_bfloat16* up = nullptr;
  int64_t ldu = 0;
  __nv_bfloat16* out = nullptr;
  int64_t ldo = 0;
};

// Eight bf16 values of row `row` from column k0 (zero past K), as they are in memory: value i
// in the low (even i) or high half of word i / 2.
struct Bf16x8 {
  uint32_t w[kLaneValues / 2];
  __device__ __forceinline__ float get(int i) const {
    return __uint_as_float(i % 2 ? w[i / 2] & 0xffff0000u : w[i / 2] << 16);
  }
  __device__ __forceinline__ __nv_bfloat16 at(int i) const {
    return __ushort_as_bfloat16(static_cast<unsigned short>(i % 2 ? w[i / 2] >> 16 : w[i / 2]));
  }
  __device__ __forceinline__ void set(int i, __nv_bfloat16 x) {
    const uint32_t bits = __bfloat16_as_ushort(x);
    w[i / 2] = i % 2 ? (w[i / 2] & 0xffffu) | bits << 16 : (w[i / 2] & 0xffff0000u) | bits;
  }
};
__device__ __forceinline__ Bf16x8 load8(const __nv_bfloat16* row, int64_t k0, int64_t K, bool vec) {
  Bf16x8 v;
  if (vec && k0 + kLaneValues <= K) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(row + k0));
    v.w[0] = raw.x;
    v.w[1] = raw.y;
    v.w[2] = raw.z;
    v.w[3] = raw.w;
  } else {
#pragma unroll
    for (int i = 0; i < kLaneValues / 2; ++i) v.w[i] = 0;
#pragma unroll
    for (int i = 0; i < kLaneValues; ++i)
      if (k0 + i < K) v.set(i, row[k0 + i]);
  }
  return v;
}

// One warp per kGroupsPerWarp consecutive 128-groups of a token, two groups at a time: half h
// of the warp takes group 2g + h, lane l of the half its elements 8l .. 8l + 7. The values stay
// bf16 in registers until quantised (more warps per SM, more loads in flight).
template <bool kSilu>
__global__ void quantize_fp8_act_kernel(const QuantSource src, int64_t T, int64_t K, int64_t KB,
                                        int64_t ldq, int64_t t_lead, bool vec,
                                        uint8_t* __restrict__ q, float* __restrict__ s) {
  pdl_begin();
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31, half = lane >> 4, hl = lane & 15;
  const int64_t warps_per_token = (KB + kGroupsPerWarp - 1) / kGroupsPerWarp;
  const int64_t t = gw / warps_per_token;
  if (t >= T) return;
  const int64_t kb0 = gw % warps_per_token * kGroupsPerWarp + half;
  constexpr int kPairs = kGroupsPerWarp / 2;
  Bf16x8 v[kPairs];
#pragma unroll
  for (int g = 0; g < kPairs; ++g) {
    const int64_t k0 = (kb0 + 2 * g) * 128 + hl * kLaneValues;
    v[g] = load8(src.x + t * src.ldx, k0, K, vec);
    if constexpr (kSilu) {
      const Bf16x8 u = load8(src.up + t * src.ldu, k0, K, vec);
#pragma unroll
      for (int i = 0; i < kLaneValues; ++i)
        v[g].set(i, __float2bfloat16_rn(silu_mul_value(v[g].get(i), u.get(i))));
      __nv_bfloat16* out = src.out + t * src.ldo + k0;
      if (vec && k0 + kLaneValues <= K) {
        *reinterpret_cast<uint4*>(out) = make_uint4(v[g].w[0], v[g].w[1], v[g].w[2], v[g].w[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kLaneValues; ++i)
          if (k0 + i < K) out[i] = v[g].at(i);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kPairs; ++g) {
    if (kb0 - half + 2 * g >= KB) break;  // both halves past the row
    float f[kLaneValues];
#pragma unroll
    for (int i = 0; i < kLaneValues; ++i) f[i] = v[g].get(i);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneValues; ++i) amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
    for (int off = 8; off > 0; off >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const int64_t kb = kb0 + 2 * g;
    if (kb >= KB) continue;
    const float scale = fp8_act::group_scale(amax);
    const int64_t k0 = kb * 128 + hl * kLaneValues;
    const uint64_t packed = fp8_act::pack<kLaneValues>(f, scale);
    const auto store = [&](int64_t r, int64_t rows) {
      if (k0 < ldq) *reinterpret_cast<uint64_t*>(q + r * ldq + k0) = packed;
      if (hl == 0) s[fp8_act::scale_index(r, kb, rows, KB, t_lead)] = scale;
    };
    if (src.dest) {
      for (int i = 0; i < src.fan; ++i)
        if (const int32_t r = src.dest[t * src.fan + i]; r >= 0) store(r, src.out_rows);
    } else {
      store(t, T);
    }
  }
}

template <bool kSilu>
cudaError_t launch_quantize(const QuantSource& src, int64_t T, int64_t K, int64_t ldq,
                            int64_t t_lead, uint8_t* q, float* s, cudaStream_t stream) {
  const int64_t KB = (K + 127) / 128;
  const int64_t warps = T * ((KB + kGroupsPerWarp - 1) / kGroupsPerWarp);
  if (warps == 0) return cudaSuccess;
  const int64_t blocks = (warps * 32 + kQuantBlock - 1) / kQuantBlock;
  const auto rows16 = [](const void* p, int64_t ld) {  // 16-byte loads: rows of 8 bf16 aligned
    return ld % kLaneValues == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  const bool vec =
      rows16(src.x, src.ldx) && (!kSilu || (rows16(src.up, src.ldu) && rows16(src.out, src.ldo)));
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

cudaError_t launch_quantize_fp8_act_scatter(const void* x, int64_t ldx, const int32_t* dest,
                                            int fan, int64_t T, int64_t K, int64_t out_rows,
                                            int64_t ldq, int64_t t_lead, uint8_t* q, float* s,
                                            cudaStream_t stream) {
  return launch_quantize<false>({.x = static_cast<const __nv_bfloat16*>(x),
                                 .ldx = ldx,
                                 .dest = dest,
                                 .fan = fan,
                                 .out_rows = out_rows},
                                T, K, ldq, t_lead, q, s, stream);
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
