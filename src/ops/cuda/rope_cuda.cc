#include <algorithm>

#include "core/cuda_context.h"
#include "ops/cuda/rope_freqs.h"

namespace mls::ops::cuda {

kernels::RopeFreqs rope_freqs(const RopeTable& table, const char* op) {
  const int d = table.dim();
  if (d / 2 > kernels::kMaxRopeHalf)
    raise<Unsupported>("{}: rotary dim {} (at most {} on the GPU)", op, d,
                       2 * kernels::kMaxRopeHalf);
  kernels::RopeFreqs f;
  f.half = d / 2;
  f.scaling = table.scaling();
  std::copy(table.inv_freq().begin(), table.inv_freq().begin() + f.half, f.inv_freq);
  return f;
}

namespace {

kernels::RopeView view_of(const Tensor& x, int64_t offset) {
  return {.token_stride = x.stride(0),
          .head_stride = x.ndim() == 2 ? 0 : x.stride(1),
          .offset = offset};
}

int64_t heads_of(const Tensor& x) {
  return x.ndim() == 2 ? 1 : x.dim(1);
}

}  // namespace

void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                RopeStyle style) {
  const kernels::RopeView v = view_of(x, offset);
  mls::cuda::check(
      kernels::launch_apply_rope(x.raw(), v, x.raw(), v, x.dtype(), x.dim(0), heads_of(x),
                                 static_cast<const int32_t*>(positions.raw()),
                                 rope_freqs(table, "apply_rope"), style == RopeStyle::kInterleaved,
                                 mls::cuda::stream()),
      "apply_rope");
}

void rope_into(const Tensor& x, const Tensor& positions, const RopeTable& table, RopeStyle style,
               Tensor& out) {
  mls::cuda::check(
      kernels::launch_apply_rope(
          x.raw(), view_of(x, 0), out.raw(), view_of(out, 0), x.dtype(), x.dim(0), heads_of(x),
          static_cast<const int32_t*>(positions.raw()), rope_freqs(table, "rope_into"),
          style == RopeStyle::kInterleaved, mls::cuda::stream()),
      "rope_into");
}

}  // namespace mls::ops::cuda
