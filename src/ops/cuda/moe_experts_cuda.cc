#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/moe_experts_fp8_launch.h"
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
  Tensor buf = Tensor::empty({scratch::moe_experts_fp8_bytes(R, H, I, E)}, DType::kFP8E4M3,
                             MemTag::kWorkspace, mls::cuda::allocator());
  const auto* addr = reinterpret_cast<const uint64_t*>(table.data<int64_t>());
  // Few rows per expert (decode): the skinny kernel over the active experts; many: tensor cores.
  const bool skinny = kernel == ExpertKernel::kAuto ? R <= scratch::kMoeSkinnyMaxPairs
                                                    : kernel == ExpertKernel::kSkinny;
  const kernels::MoeExpertsFp8Status st =
      kernels::launch_moe_experts_fp8({.x = x.raw(),
                                       .ldx = x.stride(0),
                                       .T = x.dim(0),
                                       .dest_row = dest_row.data<int32_t>(),
                                       .fan = static_cast<int>(dest_row.dim(1)),
                                       .offsets = offsets.data<int32_t>(),
                                       .experts = static_cast<int>(E),
                                       .gate = addr + kGate * E,
                                       .gate_scale = addr + kGateScale * E,
                                       .up = addr + kUp * E,
                                       .up_scale = addr + kUpScale * E,
                                       .down = addr + kDown * E,
                                       .down_scale = addr + kDownScale * E,
                                       .gate_up_scale_ld = s.gate_up_scale_ld,
                                       .down_scale_ld = s.down_scale_ld,
                                       .hidden = H,
                                       .inter = I,
                                       .rows = R,
                                       .h = h.raw(),
                                       .ldh = h.stride(0),
                                       .y = y.raw(),
                                       .ldy = y.stride(0),
                                       .scratch = buf.raw(),
                                       .skinny = skinny},
                                      mls::cuda::stream());
  mls::cuda::check(st.error, st.step);
}

}  // namespace mls::ops::cuda
