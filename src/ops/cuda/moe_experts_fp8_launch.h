// The launches of the block-FP8 routed experts (ops::moe_experts_fp8 on the GPU) in plain types:
// each token quantised once and scattered to its (token, expert) rows, gate·up with SwiGLU, its
// output quantised, down. Written once for the op (moe_experts_cuda.cc) and the kernels'
// emulated test. The scattered copy lets the tensor cores take an expert's rows as one TMA tile:
// gathering each row from its token in place made gate·up 1.9 times as long, and at decode it
// moved step times by under 1 % either way (bench/RESULTS.md, session 35).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ops/cuda/fp8_act_kernels.h"
#include "ops/cuda/moe_fp8_kernels.h"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {

struct MoeExpertsFp8Launch {
  const void* x;  // bf16 [T, hidden] at row stride ldx
  int64_t ldx, T;
  const int32_t* dest_row;  // [T, fan] (moe_align)
  int fan;
  const int32_t* offsets;  // [experts + 1] (moe_align)
  int experts;
  // Per-expert device addresses (`experts` entries each) of the weights and their block scales.
  const uint64_t *gate, *gate_scale, *up, *up_scale, *down, *down_scale;
  int64_t gate_up_scale_ld, down_scale_ld;
  int64_t hidden, inter;
  int64_t rows;  // the (token, expert) rows: offsets[experts]
  void* h;       // bf16 [rows, inter] at row stride ldh: SwiGLU outputs
  int64_t ldh;
  void* y;  // bf16 [rows, hidden] at row stride ldy: the experts' outputs
  int64_t ldy;
  void* scratch;  // scratch::moe_experts_fp8_bytes(rows, hidden, inter, experts) bytes
  bool skinny;    // the skinny kernel (few rows per expert), else the tensor cores
};

// The launch that failed, if one did: its error and what it was.
struct MoeExpertsFp8Status {
  cudaError_t error = cudaSuccess;
  const char* step = "";
};

inline MoeExpertsFp8Status launch_moe_experts_fp8(const MoeExpertsFp8Launch& m,
                                                  cudaStream_t stream) {
  const int64_t R = m.rows, H = m.hidden, I = m.inter;
  // The scratch of scratch::moe_experts_fp8_bytes, in its order.
  auto* base = static_cast<uint8_t*>(m.scratch);
  uint8_t* h_base = base + scratch::round_up(scratch::fp8_act_bytes(R, H), 256);
  const auto [xq, ldxq, xs] = fp8_act_buffer(base, R, H);
  const auto [hq, ldhq, hs] = fp8_act_buffer(h_base, R, I);
  auto* active =
      reinterpret_cast<int32_t*>(h_base + scratch::round_up(scratch::fp8_act_bytes(R, I), 256));
  void* tc_workspace = base + scratch::moe_experts_fp8_tc_offset(R, H, I, m.experts);
  if (m.skinny)
    if (const cudaError_t e = launch_moe_active_experts(m.offsets, m.experts, active, stream))
      return {e, "moe_experts_fp8: active experts"};
  if (const cudaError_t e = launch_quantize_fp8_act_scatter(m.x, m.ldx, m.dest_row, m.fan, m.T, H,
                                                            R, ldxq, R, xq, xs, stream))
    return {e, "moe_experts_fp8: quantise and scatter rows"};
  MoeFp8GemmArgs a{.w1 = m.gate,
                   .s1 = m.gate_scale,
                   .w2 = m.up,
                   .s2 = m.up_scale,
                   .sw_ld = m.gate_up_scale_ld,
                   .xq = xq,
                   .ldq = ldxq,
                   .x_scale = xs,
                   .x_scale_ld = R,
                   .offsets = m.offsets,
                   .active = active,
                   .max_active = static_cast<int>(std::min<int64_t>(m.experts, R)),
                   .experts = m.experts,
                   .rows = R,
                   .tc_workspace = tc_workspace,
                   .y = m.h,
                   .ldy = m.ldh,
                   .N = I,
                   .K = H,
                   .gated = true};
  const auto gemm = m.skinny ? launch_moe_fp8_gemm : launch_moe_fp8_gemm_tc;
  if (const cudaError_t e = gemm(a, stream)) return {e, "moe_experts_fp8: gate and up"};
  if (const cudaError_t e = launch_quantize_fp8_act(m.h, m.ldh, R, I, ldhq, R, hq, hs, stream))
    return {e, "moe_experts_fp8: quantise SwiGLU outputs"};
  a.w1 = m.down;
  a.s1 = m.down_scale;
  a.w2 = nullptr;
  a.s2 = nullptr;
  a.sw_ld = m.down_scale_ld;
  a.xq = hq;
  a.ldq = ldhq;
  a.x_scale = hs;
  a.y = m.y;
  a.ldy = m.ldy;
  a.N = H;
  a.K = I;
  a.gated = false;
  if (const cudaError_t e = gemm(a, stream)) return {e, "moe_experts_fp8: down"};
  return {};
}

}  // namespace mls::ops::cuda::kernels
