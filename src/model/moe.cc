#include "model/moe.h"

#include <vector>

#include <fmt/format.h>

#include "model/mlp.h"
#include "ops/copy.h"
#include "ops/linear.h"
#include "ops/moe_experts.h"
#include "ops/moe_routing.h"

namespace mls {

void moe_forward(const io::ModelConfig& c, const LayerWeights& w, const Tensor& x, Tensor& out,
                 Allocator& alloc, const ForwardObserver& observer, int64_t layer,
                 const Tensor& xq) {
  const auto act = MemTag::kActivation;
  const DType dt = x.dtype();
  const int64_t T = x.dim(0), H = c.hidden_size, E = c.n_routed_experts;
  const int64_t K = c.num_experts_per_tok;
  Tensor logits = Tensor::empty({T, E}, DType::kF32, act, alloc);
  ops::linear(x, w.router, logits);
  if (observer) observer(fmt::format("layer.{}.router_logits", layer), logits);
  Tensor ids = Tensor::empty({T, K}, DType::kI32, act, alloc);
  Tensor weights = Tensor::empty({T, K}, DType::kF32, act, alloc);
  ops::RoutingArgs ra{static_cast<int>(c.n_group), static_cast<int>(c.topk_group),
                      static_cast<int>(K), c.norm_topk_prob,
                      static_cast<float>(c.routed_scaling_factor)};
  ops::moe_route(logits, w.router_bias, ra, ids, weights);

  // Permute the T·K (token, expert) pairs into expert-contiguous rows, run each expert on its
  // rows, then weigh and sum back per token.
  Tensor src_token = Tensor::empty({T * K}, DType::kI32, act, alloc);
  Tensor dest_row = Tensor::empty({T, K}, DType::kI32, act, alloc);
  Tensor offsets = Tensor::empty({E + 1}, DType::kI32, act, alloc);
  ops::moe_align(ids, E, src_token, dest_row, offsets);
  const int64_t I = w.experts[0].gate.dim(0);
  Tensor y = Tensor::empty({T * K, H}, dt, act, alloc);
  if (ops::moe_experts_grouped(w.expert_table)) {
    // Every expert in one launch per projection, from the device-side offsets; each token is
    // quantised once and written to its rows.
    Tensor h = Tensor::empty({T * K, I}, dt, act, alloc);
    const MlpWeights& e0 = w.experts[0];
    ops::moe_experts_fp8(x, dest_row, offsets, w.expert_table,
                         {.hidden = H,
                          .inter = I,
                          .gate_up_scale_ld = e0.gate.block_scale()->stride(0),
                          .down_scale_ld = e0.down.block_scale()->stride(0)},
                         h, y);
  } else {
    // bf16 experts on their permuted rows. The busiest expert can take every token, so the
    // gate/up buffers have T rows; real runs and meta-mode traces allocate the same bytes.
    Tensor xin = Tensor::empty({T * K, H}, dt, act, alloc);
    ops::gather_rows(x, src_token, xin);
    Tensor gate = Tensor::empty({T, I}, dt, act, alloc);
    Tensor up = Tensor::empty({T, I}, dt, act, alloc);
    if (offsets.raw()) {
      // The one host decision of the layer: which experts have rows and how many, read after
      // the routing kernels (a device synchronisation on the GPU). Each expert's GEMMs are then
      // launched with their true row count.
      std::vector<int32_t> off(E + 1);
      Tensor host_off = Tensor::wrap(off.data(), {E + 1}, DType::kI32);
      ops::copy(offsets, host_off);
      for (int64_t e = 0; e < E; ++e) {
        const int64_t n = off[e + 1] - off[e];
        if (n == 0) continue;
        Tensor ye = y.narrow(0, off[e], n);
        mlp_forward_into(w.experts[e], xin.narrow(0, off[e], n), ye, gate, up);
      }
    }
  }
  ops::moe_unpermute(y, dest_row, weights, out);
  if (c.n_shared_experts > 0) mlp_forward(w.shared, x, out, alloc, true, xq);
}

}  // namespace mls
