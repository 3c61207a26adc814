#include <algorithm>
#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/fp8_act_kernels.h"
#include "ops/cuda/fp8_quant_kernels.h"
#include "ops/cuda/moe_fp8_kernels.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/moe_experts.h"

namespace mls::ops::cuda {

void moe_experts_fp8(const Tensor& x, const Tensor& dest_row, const Tensor& offsets,
                     const Tensor& table, const ExpertShapes& s, Tensor& h, Tensor& y,
                     ExpertKernel kernel) {
  const int64_t R = y.dim(0), H = s.hidden, I = s.inter, E = offsets.numel() - 1;
  if (E > kernels::kMoeMaxExperts)
    raise<Unsupported>("moe_experts_fp8 on the GPU: {} experts (at most {})", E,
                       kernels::kMoeMaxExperts);
  if (R == 0) return;
  const cudaStream_t stream = mls::cuda::stream();
  // The scratch of scratch::moe_experts_fp8_bytes, in its order.
  Tensor buf = Tensor::empty({scratch::moe_experts_fp8_bytes(R, H, I, E)}, DType::kFP8E4M3,
                             MemTag::kWorkspace, mls::cuda::allocator());
  uint8_t* base = buf.data<uint8_t>();
  uint8_t* h_base = base + scratch::round_up(scratch::fp8_act_bytes(R, H), 256);
  const auto [xq, ldx, xs] = kernels::fp8_act_buffer(base, R, H);
  const auto [hq, ldh, hs] = kernels::fp8_act_buffer(h_base, R, I);
  auto* active =
      reinterpret_cast<int32_t*>(h_base + scratch::round_up(scratch::fp8_act_bytes(R, I), 256));
  const auto* rows = table.data<int64_t>();
  const auto* addr = reinterpret_cast<const uint64_t*>(rows);
  const int max_active = static_cast<int>(std::min<int64_t>(E, R));

  // Few rows per expert (decode): the skinny kernel over the active experts; many: tensor cores.
  const bool skinny = kernel == ExpertKernel::kAuto ? R <= scratch::kMoeSkinnyMaxPairs
                                                    : kernel == ExpertKernel::kSkinny;
  if (skinny)
    mls::cuda::check(kernels::launch_moe_active_experts(offsets.data<int32_t>(),
                                                        static_cast<int>(E), active, stream),
                     "moe_experts_fp8: active experts");
  mls::cuda::check(kernels::launch_quantize_fp8_act_scatter(
                       x.raw(), x.stride(0), dest_row.data<int32_t>(),
                       static_cast<int>(dest_row.dim(1)), x.dim(0), H, R, ldx, R, xq, xs, stream),
                   "moe_experts_fp8: quantise and scatter rows");
  kernels::MoeFp8GemmArgs a{.w1 = addr + kGate * E,
                            .s1 = addr + kGateScale * E,
                            .w2 = addr + kUp * E,
                            .s2 = addr + kUpScale * E,
                            .sw_ld = s.gate_up_scale_ld,
                            .xq = xq,
                            .ldq = ldx,
                            .x_scale = xs,
                            .x_scale_ld = R,
                            .offsets = offsets.data<int32_t>(),
                            .active = active,
                            .max_active = max_active,
                            .experts = static_cast<int>(E),
                            .rows = R,
                            .y = h.raw(),
                            .ldy = h.stride(0),
                            .N = I,
                            .K = H,
                            .gated = true};
  const auto gemm = skinny ? kernels::launch_moe_fp8_gemm : kernels::launch_moe_fp8_gemm_tc;
  mls::cuda::check(gemm(a, stream), "moe_experts_fp8: gate and up");
  mls::cuda::check(
      kernels::launch_quantize_fp8_act(h.raw(), h.stride(0), R, I, ldh, R, hq, hs, stream),
      "moe_experts_fp8: quantise SwiGLU outputs");
  a.w1 = addr + kDown * E;
  a.s1 = addr + kDownScale * E;
  a.w2 = nullptr;
  a.s2 = nullptr;
  a.sw_ld = s.down_scale_ld;
  a.xq = hq;
  a.ldq = ldh;
  a.x_scale = hs;
  a.y = y.raw();
  a.ldy = y.stride(0);
  a.N = H;
  a.K = I;
  a.gated = false;
  mls::cuda::check(gemm(a, stream), "moe_experts_fp8: down");
}

}  // namespace mls::ops::cuda
