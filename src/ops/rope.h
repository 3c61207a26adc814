// Rotary position embedding over the last `dim` values of each head (see REFERENCE.md RoPE).
// RopeTable holds the per-position cos/sin (attention_scaling applied), computed once from the
// config; apply_rope rotates in place.
#pragma once

#include <vector>

#include "ops/dispatch.h"

namespace mls::ops {

struct RopeParamsF {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  double original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0, mscale_all_dim = 0;  // 0: absent
  bool has_mscale = false, has_mscale_all_dim = false;
};

// inv_freq[i] for i < dim/2 (fp32, as transformers computes it), YaRN-corrected if asked.
std::vector<float> rope_inv_freq(const RopeParamsF& p, int dim);
// cos/sin multiplier: m(factor, mscale) / m(factor, mscale_all_dim), or 1 without YaRN.
double rope_attention_scaling(const RopeParamsF& p);
// YaRN's m(s, a) = 0.1·a·ln(s) + 1 for s > 1, else 1.
double yarn_mscale(double scale, double a);

class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(const RopeParamsF& p, int dim);
  int dim() const { return dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float scaling() const { return scaling_; }

 private:
  int dim_ = 0;
  std::vector<float> inv_freq_;
  float scaling_ = 1.0f;
};

enum class RopeStyle { kInterleaved, kHalfSplit };

namespace cpu {
void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                RopeStyle style);
void rope_into(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style,
               Tensor& out);
}  // namespace cpu
namespace cuda {
void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                RopeStyle style);
void rope_into(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style,
               Tensor& out);
}  // namespace cuda

// x [T, H, D] or [T, D] with unit inner stride, columns [offset, offset + dim) inside D, dim even;
// positions contiguous i32 [T] on x's device.
inline void apply_rope_contract(const Tensor& x, int64_t offset, const Tensor& positions,
                                const RopeTable& table, RopeStyle) {
  const Contract c("apply_rope", x);
  const int d = table.dim();
  c.need((x.ndim() == 2 || x.ndim() == 3) && x.stride(-1) == 1 && d % 2 == 0 && offset >= 0 &&
             offset + d <= x.dim(-1),
         "x", x, "[T, (H,) D] with unit inner stride holding the even rotary dim {} at offset {}",
         d, offset);
  c.index("positions", positions, x.dim(0));
  c.activation("x", x);
}

// x: [T, H, D] (or [T, D] for one head), strided rows allowed. Rotates x[t, h, offset:offset+dim]
// by positions[t] (i32 [T]). Interleaved input pairs are written back half-split.
inline void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                       RopeStyle style) {
  MLS_DISPATCH(x, apply_rope, x, offset, positions, table, style);
}

// x, out: [T, H, d] (or [T, d]) of one dtype, d the table's rotary dim, unit inner stride, apart.
inline void rope_into_contract(const Tensor& x, const Tensor& positions, const RopeTable& table,
                               RopeStyle, const Tensor& out) {
  const Contract c("rope_into", out);
  c.need((x.ndim() == 2 || x.ndim() == 3) && x.stride(-1) == 1 && x.dim(-1) == table.dim() &&
             table.dim() % 2 == 0,
         "x", x, "[T, (H,) {}] with unit inner stride (the even rotary dim)", table.dim());
  c.need(out.shape() == x.shape() && out.dtype() == x.dtype() && out.stride(-1) == 1, "out", out,
         "{} {} with unit inner stride like x", dtype_name(x.dtype()), x.shape().str());
  c.index("positions", positions, x.dim(0));
  c.activation("x", x);
  c.on_device("x", x);
  c.disjoint("out", out, "x", x);
}

// out = x rotated by positions[t] (i32 [T]), as apply_rope(x, 0, ...) would leave x; x is left as
// it is. One pass where a copy and an in-place rotation would take two.
inline void rope_into(const Tensor& x, const Tensor& positions, const RopeTable& table,
                      RopeStyle style, Tensor& out) {
  MLS_DISPATCH(out, rope_into, x, positions, table, style, out);
}

}  // namespace mls::ops
