// The quantisation of the FP8 linears' activations (the arithmetic: fp8_act_rows.cuh). Plain
// launchers: raw pointers, the caller's stream, cudaGetLastError() after the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {

// A quantised [T, K] activation in one buffer of scratch::fp8_act_bytes(T, K) bytes: the e4m3
// rows scratch::fp8_act_ld(K) bytes apart, then the scales (16-byte aligned after them).
struct Fp8ActBuffer {
  uint8_t* q;
  int64_t ldq;
  float* scales;
};
inline Fp8ActBuffer fp8_act_buffer(void* base, int64_t T, int64_t K) {
  auto* q = static_cast<uint8_t*>(base);
  const int64_t ldq = scratch::fp8_act_ld(K);
  return {q, ldq, reinterpret_cast<float*>(q + T * ldq)};
}

// Activations are quantised per token in groups of 128 along K: scale = amax / 448 (1 for an
// all-zero group), q = x / scale rounded to e4m3 (saturating). x: bf16 [T, K], row stride ldx.
// q: e4m3 [T, ldq] with ldq = scratch::fp8_act_ld(K); bytes [K, ldq) are written as zero.
// Scales (KB = ceil(K/128)): tokens t < t_lead at s[kb * t_lead + t] (cuBLASLt's VEC128 layout,
// token-major per K block), the rest at s[KB * t_lead + kb * (T - t_lead) + (t - t_lead)].
cudaError_t launch_quantize_fp8_act(const void* x, int64_t ldx, int64_t T, int64_t K, int64_t ldq,
                                    int64_t t_lead, uint8_t* q, float* s, cudaStream_t stream);
// The same for rows scattered from x: token t of x's T is quantised once and written to output
// rows dest[t · fan + i] (i < fan; a negative entry: none) of out_rows, the scales laid out for
// out_rows rows; output rows no entry names are left as they are.
cudaError_t launch_quantize_fp8_act_scatter(const void* x, int64_t ldx, const int32_t* dest,
                                            int fan, int64_t T, int64_t K, int64_t out_rows,
                                            int64_t ldq, int64_t t_lead, uint8_t* q, float* s,
                                            cudaStream_t stream);
// out = silu(gate) · up in bf16 (gate, up, out bf16 [T, K] at their row strides; out may alias
// gate or up), as ops::silu_mul computes it, and out quantised as launch_quantize_fp8_act would
// quantise it, in one pass.
cudaError_t launch_silu_mul_quantize(const void* gate, int64_t ldg, const void* up, int64_t ldu,
                                     void* out, int64_t ldo, int64_t T, int64_t K, int64_t ldq,
                                     int64_t t_lead, uint8_t* q, float* s, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
