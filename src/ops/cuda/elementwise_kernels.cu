#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "ops/cuda/elementwise_kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/silu.cuh"
#include "ops/cuda/vec_io.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_storage_t;

__device__ inline float to_f(float v) {
  return v;
}
__device__ inline float to_f(bf16 v) {
  return __bfloat162float(v);
}
__device__ inline void convert(float v, float& o) {
  o = v;
}
__device__ inline void convert(float v, bf16& o) {
  o = __float2bfloat16_rn(v);
}
__device__ inline void convert(float v, fp8& o) {
  o = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// Eight consecutive values through 16-byte accesses (one for bf16, two for f32); the caller
// guarantees 16-byte alignment.
__device__ inline void load8(const bf16* p, float* v) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}
__device__ inline void load8(const float* p, float* v) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// V (8: vectorised, or 1) consecutive values.
template <int V, class T>
__device__ inline void load(const T* p, float* v) {
  if constexpr (V == 8)
    load8(p, v);
  else
    v[0] = to_f(*p);
}
template <int V, class T>
__device__ inline void store(T* p, const float* v) {
  if constexpr (V == 8)
    store8(p, v);
  else
    convert(v[0], *p);
}

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ---- silu_mul, add, scale ----

template <Pointwise Op>
__device__ inline float apply(float a, float b, float alpha) {
  if constexpr (Op == Pointwise::kSiluMul)
    return silu_mul_value(a, b);
  else if constexpr (Op == Pointwise::kAdd)
    return a + b;
  else
    return alpha * a;
}

// Rows over grid.y, V-value packs of a row over grid.x (grid-stride both ways). Each element is
// read and written by one thread, so out may alias a or b.
template <Pointwise Op, class TA, class TB, class TO, int V>
__global__ void __launch_bounds__(256) pointwise_kernel(PointwiseRows p) {
  pdl_begin();
  constexpr bool kUnary = Op == Pointwise::kScale;
  const int64_t packs = p.cols / V;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const TA* a = static_cast<const TA*>(p.a) + r * p.a_stride;
    const TB* b = kUnary ? nullptr : static_cast<const TB*>(p.b) + r * p.b_stride;
    TO* out = static_cast<TO*>(p.out) + r * p.out_stride;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < packs;
         j += step) {
      float va[V], vb[V] = {}, vo[V];
      load<V>(a + V * j, va);
      if constexpr (!kUnary) load<V>(b + V * j, vb);
#pragma unroll
      for (int e = 0; e < V; ++e) vo[e] = apply<Op>(va[e], vb[e], p.alpha);
      store<V>(out + V * j, vo);
    }
  }
}

template <Pointwise Op, class TA, class TB, class TO>
cudaError_t pointwise_typed(PointwiseRows p, cudaStream_t stream) {
  constexpr bool kUnary = Op == Pointwise::kScale;
  // Contiguous rows are one long row: a 1-D grid-stride loop over every value.
  if (p.rows == 1 ||
      (p.a_stride == p.cols && (kUnary || p.b_stride == p.cols) && p.out_stride == p.cols)) {
    p.cols *= p.rows;
    p.rows = 1;
    p.a_stride = p.b_stride = p.out_stride = 0;
  }
  auto fits = [&](const void* ptr, int64_t stride) { return aligned(ptr, 16) && stride % 8 == 0; };
  const bool vec = p.cols % 8 == 0 && fits(p.a, p.a_stride) && (kUnary || fits(p.b, p.b_stride)) &&
                   fits(p.out, p.out_stride);
  const int64_t packs = vec ? p.cols / 8 : p.cols;
  constexpr int kThreads = 256;
  const int64_t bx = (packs + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(bx < (1 << 16) ? bx : (1 << 16)),
                  static_cast<unsigned>(p.rows < 65535 ? p.rows : 65535));
  if (vec)
    launch(pointwise_kernel<Op, TA, TB, TO, 8>, grid, kThreads, 0, stream, p);
  else
    launch(pointwise_kernel<Op, TA, TB, TO, 1>, grid, kThreads, 0, stream, p);
  return cudaGetLastError();
}

template <Pointwise Op, class TA, class TB>
cudaError_t pointwise_out(const PointwiseRows& p, cudaStream_t stream) {
  return p.out_dtype == DType::kF32 ? pointwise_typed<Op, TA, TB, float>(p, stream)
                                    : pointwise_typed<Op, TA, TB, bf16>(p, stream);
}

template <Pointwise Op, class TA>
cudaError_t pointwise_b(const PointwiseRows& p, cudaStream_t stream) {
  if constexpr (Op == Pointwise::kScale)
    return pointwise_out<Op, TA, TA>(p, stream);
  else
    return p.b_dtype == DType::kF32 ? pointwise_out<Op, TA, float>(p, stream)
                                    : pointwise_out<Op, TA, bf16>(p, stream);
}

template <Pointwise Op>
cudaError_t pointwise_a(const PointwiseRows& p, cudaStream_t stream) {
  return p.a_dtype == DType::kF32 ? pointwise_b<Op, float>(p, stream)
                                  : pointwise_b<Op, bf16>(p, stream);
}

bool float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16;
}

// ---- embedding ----

struct Lookup {
  const void* table;
  int64_t rows, hidden, table_stride;
  const int32_t* ids;
  int64_t tokens, vocab_start;
  void* out;
};

// A block per token (grid-stride), its threads over the row's V-value packs.
template <class TT, class TO, int V>
__global__ void __launch_bounds__(256) embedding_kernel(Lookup l) {
  pdl_begin();
  for (int64_t t = blockIdx.x; t < l.tokens; t += gridDim.x) {
    const int64_t r = l.ids[t] - l.vocab_start;
    const bool inside = r >= 0 && r < l.rows;
    const TT* src = static_cast<const TT*>(l.table) + (inside ? r : 0) * l.table_stride;
    TO* dst = static_cast<TO*>(l.out) + t * l.hidden;
    for (int64_t j = threadIdx.x; j < l.hidden / V; j += blockDim.x) {
      float v[V] = {};
      if (inside) load<V>(src + V * j, v);
      store<V>(dst + V * j, v);
    }
  }
}

template <class TT, class TO>
cudaError_t embedding_typed(const Lookup& l, cudaStream_t stream) {
  const bool vec =
      l.hidden % 8 == 0 && l.table_stride % 8 == 0 && aligned(l.table, 16) && aligned(l.out, 16);
  const unsigned grid = static_cast<unsigned>(l.tokens < (1 << 16) ? l.tokens : (1 << 16));
  if (vec)
    launch(embedding_kernel<TT, TO, 8>, grid, 256, 0, stream, l);
  else
    launch(embedding_kernel<TT, TO, 1>, grid, 256, 0, stream, l);
  return cudaGetLastError();
}

template <class TT>
cudaError_t embedding_out(const Lookup& l, DType out_dtype, cudaStream_t stream) {
  return out_dtype == DType::kF32 ? embedding_typed<TT, float>(l, stream)
                                  : embedding_typed<TT, bf16>(l, stream);
}

// ---- fill_uniform ----

// splitmix64 of the element's index in the full tensor, mapped to [-1, 1) exactly as the host
// does; multiply and add rounded separately (no fused multiply-add) so f32 matches bitwise.
__device__ inline float uniform_value(const FillParams& f, int64_t r, int64_t c) {
  uint64_t z = f.seed + static_cast<uint64_t>(r * f.full_cols + c) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  return __fadd_rn(f.offset, __fmul_rn(f.bound, u));
}

// Eight consecutive outputs, stored at once when aligned (32, 16 or 8 bytes).
template <class T>
struct alignas(8 * sizeof(T) < 16 ? 8 * sizeof(T) : 16) Group {
  T v[8];
};

// A thread per group of eight consecutive elements (grid-stride, 64-bit indices); the row and
// column are divided out once per group.
template <class T, bool kVec>
__global__ void __launch_bounds__(256) fill_kernel(T* out, int64_t n, int64_t cols, FillParams f) {
  pdl_begin();
  const int64_t groups = (n + 7) / 8;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += step) {
    const int64_t i0 = 8 * g;
    int64_t r = i0 / cols, c = i0 % cols;
    Group<T> v;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      convert(uniform_value(f, r + f.row0, c + f.col0), v.v[e]);
      if (++c == cols) {
        c = 0;
        ++r;
      }
    }
    if (kVec && i0 + 8 <= n) {
      *reinterpret_cast<Group<T>*>(out + i0) = v;
    } else {
      for (int e = 0; e < 8 && i0 + e < n; ++e) out[i0 + e] = v.v[e];
    }
  }
}

template <class T>
cudaError_t fill_typed(void* out, int64_t n, int64_t cols, const FillParams& f,
                       cudaStream_t stream) {
  const int64_t blocks = ((n + 7) / 8 + 255) / 256;
  const unsigned grid = static_cast<unsigned>(blocks < (1 << 16) ? blocks : (1 << 16));
  T* o = static_cast<T*>(out);
  if (aligned(out, alignof(Group<T>)))
    launch(fill_kernel<T, true>, grid, 256, 0, stream, o, n, cols, f);
  else
    launch(fill_kernel<T, false>, grid, 256, 0, stream, o, n, cols, f);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_pointwise(Pointwise op, const PointwiseRows& p, cudaStream_t stream) {
  if (!float_dtype(p.a_dtype) || !float_dtype(p.out_dtype) ||
      (op != Pointwise::kScale && !float_dtype(p.b_dtype)))
    return cudaErrorInvalidValue;
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  switch (op) {
    case Pointwise::kSiluMul:
      return pointwise_a<Pointwise::kSiluMul>(p, stream);
    case Pointwise::kAdd:
      return pointwise_a<Pointwise::kAdd>(p, stream);
    case Pointwise::kScale:
      return pointwise_a<Pointwise::kScale>(p, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_embedding(const void* table, DType table_dtype, int64_t rows, int64_t hidden,
                             int64_t table_stride, const int32_t* ids, int64_t tokens,
                             int64_t vocab_start, void* out, DType out_dtype, cudaStream_t stream) {
  if (!float_dtype(table_dtype) || !float_dtype(out_dtype)) return cudaErrorInvalidValue;
  if (tokens == 0 || hidden == 0) return cudaSuccess;
  const Lookup l{table, rows, hidden, table_stride, ids, tokens, vocab_start, out};
  return table_dtype == DType::kF32 ? embedding_out<float>(l, out_dtype, stream)
                                    : embedding_out<bf16>(l, out_dtype, stream);
}

cudaError_t launch_fill_uniform(void* out, DType dtype, int64_t n, int64_t cols,
                                const FillParams& f, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (cols <= 0) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kF32:
      return fill_typed<float>(out, n, cols, f, stream);
    case DType::kBF16:
      return fill_typed<bf16>(out, n, cols, f, stream);
    case DType::kFP8E4M3:
      return fill_typed<fp8>(out, n, cols, f, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mls::ops::cuda::kernels
