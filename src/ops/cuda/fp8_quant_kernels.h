// Kernels behind the FP8 linear: the weight-scale padding cuBLASLt's 128x128 block-scale mode
// needs, and our own block-scaled FP8 GEMM for few tokens (decode) and for the shapes cuBLASLt
// cannot run (the activations' quantisation: fp8_act_kernels.h). Plain launchers: raw pointers, the
// caller's stream, cudaGetLastError() after the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mls::ops::cuda::kernels {

// dst[r, c] = src[r, c] for c < cols, 0 for cols <= c < ld_dst (src contiguous [rows, cols]).
cudaError_t launch_pad_scale_rows(const float* src, int64_t rows, int64_t cols, int64_t ld_dst,
                                  float* dst, cudaStream_t stream);

// One output of the skinny GEMM: w e4m3 [N, K], its block scales, y bf16 [T, N] at row stride
// ldy.
struct Fp8GemmOutput {
  const uint8_t* w = nullptr;
  const float* w_scale = nullptr;
  void* y = nullptr;
  int64_t ldy = 0;
  int64_t N = 0;
};
// How the skinny GEMM streams the weights: registers (each warp loads two K blocks, then
// computes them), or a ring of shared-memory stages per warp (cp.async, two or three blocks in
// flight while one is computed), which pays where every warp has many blocks. Both give the same
// bits; kAuto picks by the K blocks a warp streams.
enum class SkinnyKernel { kAuto, kRegisters, kSharedRing };

// out[1] with N > 0: a second weight of the same input in the same launch (gate and up; q_b and
// the indexer's wq_b), each output computed exactly as alone.
struct Fp8GemmArgs {
  Fp8GemmOutput out[2];
  const uint8_t* xq;
  int64_t ldq;
  const float* x_scale;
  int64_t x_scale_ld;
  int64_t K, T;
  bool accumulate;
  // Split-K scratch: fp32 partials and per-tile arrival counters that are zero on entry and are
  // left zero on exit (stream-ordered reuse).
  float* partial;
  size_t partial_bytes;
  int* counters;
  int64_t num_counters;
  int num_sms;
  SkinnyKernel kernel = SkinnyKernel::kAuto;
};

// y[t, n] (+)= Σ_kb sx[t, kb] · sw[n/128, kb] · Σ_{k in block kb} xq[t, k] · w[n, k], all in fp32,
// bf16 out. w: e4m3 [N, K] contiguous; sw: f32 [ceil(N/128), ceil(K/128)] contiguous (the
// checkpoint layout); xq/x_scale as written by launch_quantize_fp8_act (fp8_act_kernels.h;
// x_scale at x_scale_ld).
cudaError_t launch_fp8_gemm_skinny(const Fp8GemmArgs& a, cudaStream_t stream);

}  // namespace mls::ops::cuda::kernels
