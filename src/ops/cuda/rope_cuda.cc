#include <algorithm>

#include "core/cuda_context.h"
#include "ops/cuda/rope_kernels.h"
#include "ops/rope.h"

namespace mls::ops::cuda {

void apply_rope(Tensor& x, int64_t offset, const Tensor& positions, const RopeTable& table,
                RopeStyle style) {
  const int d = table.dim();
  const bool two_d = x.ndim() == 2;
  if (d / 2 > kernels::kMaxRopeHalf)
    raise<Unsupported>("apply_rope: rotary dim {} (at most {} on the GPU)", d,
                       2 * kernels::kMaxRopeHalf);
  kernels::RopeFreqs f;
  f.half = d / 2;
  f.scaling = table.scaling();
  std::copy(table.inv_freq().begin(), table.inv_freq().begin() + f.half, f.inv_freq);
  const int64_t heads = two_d ? 1 : x.dim(1);
  const int64_t head_stride = two_d ? 0 : x.stride(1);
  mls::cuda::check(
      kernels::launch_apply_rope(x.raw(), x.dtype(), x.dim(0), heads, x.stride(0), head_stride,
                                 offset, static_cast<const int32_t*>(positions.raw()), f,
                                 style == RopeStyle::kInterleaved, mls::cuda::stream()),
      "apply_rope");
}

}  // namespace mls::ops::cuda
