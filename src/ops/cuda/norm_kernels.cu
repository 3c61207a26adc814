#include <cuda_bf16.h>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/norm_kernels.h"
#include "ops/cuda/norm_row.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;
using norm_row::Mode;

// One row per warp or block as the cut says (norm_row.cuh).
template <Mode M, class TX, class TD, class TY, class V>
__global__ void __launch_bounds__(V::kGeneric ? 256 : 512) norm_kernel(NormRows p) {
  pdl_begin();
  __shared__ float smem[32];
  const int64_t row = norm_row::row_index<V>();
  if (row >= p.rows) return;  // a whole warp (or block) at once
  norm_row::normalise<M, TX, TD, TY, V>(p, row, static_cast<TX*>(p.x) + row * p.x_stride,
                                        static_cast<const TD*>(p.delta) + row * p.delta_stride,
                                        static_cast<TY*>(p.y) + row * p.y_stride, smem);
}

// The cut of p's rows (the cached path needs every row operand 16-byte aligned).
norm_row::Cut cut_of(const NormRows& p, Mode m) {
  const bool vec = p.n % 8 == 0 && norm_row::vec_rows(p.x, p.x_stride) &&
                   norm_row::vec_rows(p.y, p.y_stride) && norm_row::aligned16(p.w) &&
                   (m != Mode::kLayer || norm_row::aligned16(p.b)) &&
                   (m != Mode::kAddRms || norm_row::vec_rows(p.delta, p.delta_stride));
  return norm_row::Cut::of(p.n, vec);
}

template <Mode M, class TX, class TD, class TY>
cudaError_t launch_typed(const NormRows& p, cudaStream_t stream) {
  const norm_row::Cut cut = cut_of(p, M);
  norm_row::with_variant(cut, [&](auto v) {
    launch(norm_kernel<M, TX, TD, TY, decltype(v)>, cut.grid(p.rows), cut.threads, 0, stream, p);
  });
  return cudaGetLastError();
}

bool float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16;
}

template <Mode M, class TX, class TD>
cudaError_t with_y(const NormRows& p, cudaStream_t stream) {
  return p.y_dtype == DType::kF32 ? launch_typed<M, TX, TD, float>(p, stream)
                                  : launch_typed<M, TX, TD, bf16>(p, stream);
}

template <Mode M, class TX>
cudaError_t with_delta(const NormRows& p, cudaStream_t stream) {
  if constexpr (M != Mode::kAddRms)
    return with_y<M, TX, TX>(p, stream);
  else
    return p.delta_dtype == DType::kF32 ? with_y<M, TX, float>(p, stream)
                                        : with_y<M, TX, bf16>(p, stream);
}

template <Mode M>
cudaError_t dispatch(const NormRows& p, cudaStream_t stream) {
  if (!float_dtype(p.x_dtype) || !float_dtype(p.y_dtype) ||
      (M == Mode::kAddRms && !float_dtype(p.delta_dtype)))
    return cudaErrorInvalidValue;
  if (p.rows == 0 || p.n == 0) return cudaSuccess;
  return p.x_dtype == DType::kF32 ? with_delta<M, float>(p, stream)
                                  : with_delta<M, bf16>(p, stream);
}

}  // namespace

bool norm_quantizes(const NormRows& p) {
  return p.n % 128 == 0 && p.y_dtype == DType::kBF16 &&
         cut_of(p, p.delta ? Mode::kAddRms : Mode::kRms).kind != norm_row::Cut::Kind::kGeneric;
}

cudaError_t launch_rms_norm(const NormRows& p, cudaStream_t stream) {
  return dispatch<Mode::kRms>(p, stream);
}
cudaError_t launch_layer_norm(const NormRows& p, cudaStream_t stream) {
  return dispatch<Mode::kLayer>(p, stream);
}
cudaError_t launch_add_rms_norm(const NormRows& p, cudaStream_t stream) {
  return dispatch<Mode::kAddRms>(p, stream);
}

}  // namespace mls::ops::cuda::kernels
