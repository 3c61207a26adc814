#include <algorithm>
#include <cstdint>

#include "core/cuda_context.h"
#include "ops/cuda/moe_fp8_kernels.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/moe_experts.h"

namespace mls::ops::cuda {

void moe_experts_fp8(const Tensor& x, const Tensor& offsets, const Tensor& table,
                     const ExpertShapes& s, Tensor& h, Tensor& y) {
  const int64_t R = x.dim(0), H = s.hidden, I = s.inter, E = offsets.numel() - 1;
  if (E > kernels::kMoeMaxExperts)
    raise<Unsupported>("moe_experts_fp8 on the GPU: {} experts (at most {})", E,
                       kernels::kMoeMaxExperts);
  if (R == 0) return;
  const cudaStream_t stream = mls::cuda::stream();
  // The scratch of scratch::moe_experts_fp8_bytes: the active-expert list. Both GEMMs quantise
  // their rows themselves (fused), so no quantised copy of x or h is kept.
  Tensor buf = Tensor::empty({scratch::moe_experts_fp8_bytes(E)}, DType::kFP8E4M3,
                             MemTag::kWorkspace, mls::cuda::allocator());
  auto* active = reinterpret_cast<int32_t*>(buf.data<uint8_t>());
  const auto* rows = table.data<int64_t>();
  const auto* addr = reinterpret_cast<const uint64_t*>(rows);
  const int max_active = static_cast<int>(std::min<int64_t>(E, R));

  mls::cuda::check(kernels::launch_moe_active_experts(offsets.data<int32_t>(), static_cast<int>(E),
                                                      active, stream),
                   "moe_experts_fp8: active experts");
  kernels::MoeFp8GemmArgs a{.w1 = addr + kGate * E,
                            .s1 = addr + kGateScale * E,
                            .w2 = addr + kUp * E,
                            .s2 = addr + kUpScale * E,
                            .sw_ld = s.gate_up_scale_ld,
                            .x = x.raw(),
                            .ldx = x.stride(0),
                            .offsets = offsets.data<int32_t>(),
                            .active = active,
                            .max_active = max_active,
                            .y = h.raw(),
                            .ldy = h.stride(0),
                            .N = I,
                            .K = H,
                            .gated = true};
  mls::cuda::check(kernels::launch_moe_fp8_gemm(a, stream), "moe_experts_fp8: gate and up");
  a.w1 = addr + kDown * E;
  a.s1 = addr + kDownScale * E;
  a.w2 = nullptr;
  a.s2 = nullptr;
  a.sw_ld = s.down_scale_ld;
  a.x = h.raw();
  a.ldx = h.stride(0);
  a.y = y.raw();
  a.ldy = y.stride(0);
  a.N = H;
  a.K = I;
  a.gated = false;
  mls::cuda::check(kernels::launch_moe_fp8_gemm(a, stream), "moe_experts_fp8: down");
}

}  // namespace mls::ops::cuda
