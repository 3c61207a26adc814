// Launchers for the grouped block-FP8 expert GEMMs: every routed expert of a MoE layer in one
// launch per projection, each expert's rows read from the device-side offsets of
// ops::moe_align, so a step never waits on the host for expert counts. Two kernels of one
// contract: the skinny one for steps of few rows per expert (decode; moe_fp8_kernels.cu, batch
// invariant) and the tensor-core one for many (prefill; moe_fp8_tc_kernels.cu, wgmma).
// Included by nvcc: no project header with fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/fp8_sum_model.h"

namespace mls::ops::cuda::kernels {

// active[0] = the number of experts with rows, active[1 ..] = their ids in ascending order, from
// offsets [E + 1]. One CTA; E <= 1024.
cudaError_t launch_moe_active_experts(const int32_t* offsets, int E, int32_t* active,
                                      cudaStream_t stream);

// y[r, n] for each row r of expert e (offsets[e] <= r < offsets[e + 1]) and n < N:
//   plain:  Σ_kb sx[r, kb] · s1_e[n/128, kb] · Σ_{k in kb} xq[r, k] · w1_e[n, k]
//   gated:  silu(the same with w1_e) · (the same with w2_e)   (SwiGLU: w1 gate, w2 up)
// fp32 throughout, bf16 out. w*_e: e4m3 [N, K] contiguous at the address table[e]; s*_e: f32
// block scales [ceil(N/128), ·] with row stride sw_ld. xq/x_scale as written by
// launch_quantize_fp8_act with t_lead = the number of rows (x_scale[kb · x_scale_ld + r]).
// A row's result depends on that row alone (batch invariant).
struct MoeFp8GemmArgs {
  const uint64_t* w1;
  const uint64_t* s1;
  const uint64_t* w2;  // gated only
  const uint64_t* s2;
  int64_t sw_ld;
  const uint8_t* xq;
  int64_t ldq;
  const float* x_scale;
  int64_t x_scale_ld;
  const int32_t* offsets;
  const int32_t* active;  // from launch_moe_active_experts
  int max_active;         // host bound on active[0]: min(E, rows)
  int experts;            // E: offsets holds E + 1 entries
  int64_t rows;           // rows of all experts (offsets[E])
  // CTAs that split each weight tile's rows between them, 8 rows at a time, reading the tile's
  // weights side by side (one DRAM pass): 1 to 4; 0 lets the launcher choose from the mean rows
  // per active expert (bench/fp8_kernels_benchmark sweeps it).
  int passes = 0;
  // Tensor-core kernel: K summed inside the tensor cores between promotions to the fp32
  // accumulator, 32, 64 or 128; 0: moe_fp8_tc_promote_k(gated) (bench/fp8_kernels_benchmark
  // sweeps it).
  int promote_k = 0;
  // Tensor-core kernel: scratch::moe_fp8_tc_workspace_bytes(experts) bytes, 128-byte aligned
  // (written by each launch: the experts' weight maps and the tile counter).
  void* tc_workspace = nullptr;
  void* y;  // bf16 [rows, ldy]
  int64_t ldy;
  int64_t N, K;
  bool gated;
};
cudaError_t launch_moe_fp8_gemm(const MoeFp8GemmArgs& a, cudaStream_t stream);

// The same on the tensor cores (sm_90a wgmma): tiles of one or two kMoeFp8TcRowTile-row units of
// each expert's rows, a persistent grid of one CTA per SM. Ignores `active`, `max_active` and
// `passes`; needs E <= kMoeMaxExperts, ldq % 16 == 0, N % 8 == 0, and y 16-byte aligned with
// ldy % 8 == 0. Not bitwise equal to launch_moe_fp8_gemm (fp32 sums inside a 128-wide K block
// come in the tensor core's order).
cudaError_t launch_moe_fp8_gemm_tc(const MoeFp8GemmArgs& a, cudaStream_t stream);
// Its row tile: each expert's rows are padded up to a multiple of it.
inline constexpr int kMoeFp8TcRowTile = 64;

// The scale a promotion of a chain of `mmas` MMAs takes on a device whose FP8 MMAs keep
// `sum_bits` bits (DeviceFacts::fp8_sum_bits), to take back the bias of their truncation toward
// zero: half of one truncation's mean shortfall per MMA, where the device's sweep of the scale
// put the experts' least error at 32 and 64 K (bench/RESULTS.md "Session 27"). A truncation
// relative to the sum's own leading one would call for (n + 1) / 2 shortfalls per chain of n;
// Hopper truncates relative to the largest addend instead, which takes less. Unbiased, the sums
// tip the e4m3 rounding of gate·up's output less often.
constexpr float moe_fp8_tc_promotion_gain(int sum_bits, int mmas) {
  if (sum_bits <= 0) return 1.0f;
  return static_cast<float>(1.0 + truncated_fp8_sum_shortfall(sum_bits) * mmas / 2);
}

// The tensor-core kernel's promotion interval (K) when promote_k is 0. The MMAs' error is near
// 1e-4 relative: far below the bf16 rounding of down's output, but gate·up's output is quantised
// to e4m3 for down, and an error that small tips some of those roundings, a whole e4m3 step
// each. Biased, gate·up needed 32 K (at 64 K the path measured 4.02e-3 rel-L2 on the device,
// over the 4e-3 FP8 tolerance); unbiased, 64 K measured 3.11e-3 (32 K biased: 3.16e-3) and
// 128 K at best 4.07e-3. Down's interval barely moves the error (its output is rounded to
// bf16): 128 K. bench/RESULTS.md "Session 26" and "Session 27". The emulator holds these
// defaults to the tolerance under the truncation model
// (EmulatedMoeFp8.PromotionIntervalsHoldTheToleranceWithTruncatingSums).
constexpr int moe_fp8_tc_promote_k(bool gated) {
  return gated ? 64 : 128;
}

}  // namespace mls::ops::cuda::kernels
