// The routed experts' SwiGLU MLPs over the permuted rows of ops::moe_align, for block-FP8
// experts on the GPU: one launch per projection for all experts (gate·up with SiLU fused, then
// down), each expert's rows read from the device-side offsets, so a step never waits on the
// host for expert counts and launches no per-expert work. Steps of up to
// scratch::kMoeSkinnyMaxPairs rows run a batch-invariant skinny kernel, larger ones (prefill) a
// tensor-core (wgmma) kernel. Each row is gathered from its token and quantised to e4m3 per
// group of 128 in one pass, as ops::linear quantises for FP8 weights.
#pragma once

#include <utility>

#include "ops/dispatch.h"

namespace mls::ops {

// Device addresses of every expert's weights and block scales, built once at load: i64 [6, E],
// rows gate, gate scales, up, up scales, down, down scales.
enum ExpertTableRow : int64_t {
  kGate = 0,
  kGateScale,
  kUp,
  kUpScale,
  kDown,
  kDownScale,
  kExpertTableRows
};

struct ExpertShapes {
  int64_t hidden = 0, inter = 0;
  // Row strides of the gate/up and the down block scales (every expert alike).
  int64_t gate_up_scale_ld = 0, down_scale_ld = 0;
};

namespace cuda {
// Which grouped kernel runs: by the step's rows (kAuto, what the op does), or one forced (tests
// compare the two on the same rows).
enum class ExpertKernel { kAuto, kSkinny, kTensorCores };
void moe_experts_fp8(const Tensor& x, const Tensor& dest_row, const Tensor& offsets,
                     const Tensor& table, const ExpertShapes& s, Tensor& h, Tensor& y,
                     ExpertKernel kernel = ExpertKernel::kAuto);
}  // namespace cuda

// Whether a layer's experts take the grouped path (table: defined when they qualified at load).
inline bool moe_experts_grouped(const Tensor& table) {
  return table.defined();
}

// x: bf16 [T, hidden], the tokens; dest_row: i32 [T, k], the row pair (t, i) went to
// (ops::moe_align's); offsets: i32 [E + 1] (ops::moe_align); h: bf16 [R = T·k, inter] (the
// SwiGLU outputs, caller-owned); y: bf16 [R, hidden], row dest_row[t, i] = its expert's MLP of
// x[t]. Rows past offsets[E] (dropped pairs) are left as they are.
inline void moe_experts_fp8_contract(const Tensor& x, const Tensor& dest_row, const Tensor& offsets,
                                     const Tensor& table, const ExpertShapes& s, const Tensor& h,
                                     const Tensor& y) {
  const Contract c("moe_experts_fp8", y);
  const int64_t R = y.dim(0), E = offsets.numel() - 1;
  c.rows("x", x, 2);
  c.need(x.dim(1) == s.hidden && s.hidden % 16 == 0 && s.inter % 16 == 0, "x", x,
         "[T, {}] (hidden and inter {}: multiples of 16)", s.hidden, s.inter);
  c.index("dest_row", dest_row, R);
  c.need(dest_row.ndim() == 2 && dest_row.dim(0) == x.dim(0), "dest_row", dest_row,
         "[{}, k] (x's tokens)", x.dim(0));
  c.rows("h", h, 2);
  c.need(h.dim(0) == R && h.dim(1) == s.inter, "h", h, "[{}, {}]", R, s.inter);
  c.rows("y", y, 2);
  c.need(y.dim(0) == R && y.dim(1) == s.hidden, "y", y, "[{}, {}]", R, s.hidden);
  c.index("offsets", offsets, -1);
  c.need(E >= 1, "offsets", offsets, "[E + 1] for E >= 1");
  c.need(table.ndim() == 2 && table.dim(0) == kExpertTableRows && table.dim(1) == E &&
             table.is_contiguous(),
         "table", table, "contiguous [{}, {}]", int64_t{kExpertTableRows}, E);
  c.dtype("table", table, {DType::kI64});
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"x", &x}, {"h", &h}, {"y", &y}})
    c.dtype(name, *t, {DType::kBF16});
  c.on_device("x", x);
  c.on_device("h", h);
  c.on_device("table", table);
}

inline void moe_experts_fp8(const Tensor& x, const Tensor& dest_row, const Tensor& offsets,
                            const Tensor& table, const ExpertShapes& s, Tensor& h, Tensor& y) {
  if (y.device().is_cpu())
    raise<Unsupported>("moe_experts_fp8 runs FP8 experts on a GPU; {} is on {}", y.str(),
                       y.device().str());
  moe_experts_fp8_contract(x, dest_row, offsets, table, s, h, y);
  if (is_meta(y)) {
    if (y.dim(0) > 0)
      trace_scratch(
          y, {{{scratch::moe_experts_fp8_bytes(y.dim(0), s.hidden, s.inter, offsets.numel() - 1),
                DType::kFP8E4M3, MemTag::kWorkspace},
               {}}});
    return;
  }
#ifdef MLASERVE_CUDA
  cuda::moe_experts_fp8(x, dest_row, offsets, table, s, h, y);
  after_op("moe_experts_fp8");
#else
  raise<Unsupported>("moe_experts_fp8: this build has no CUDA backend");
#endif
}

}  // namespace mls::ops
