#include <cuda_bf16.h>

#include <climits>
#include <cmath>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/moe_kernels.h"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// An order-preserving map from a float (not NaN) to an unsigned key; −0 and +0 compare equal
// and share one key. Every score, −inf included, maps above 0, the key of "no candidate".
__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The index of the warp's best candidate: the largest key, ties to the lowest index. Two
// single-instruction warp reductions rather than a five-step shuffle butterfly.
__device__ __forceinline__ int warp_best(unsigned key, int idx) {
  const unsigned m = __reduce_max_sync(kFull, key);
  return static_cast<int>(
      __reduce_min_sync(kFull, key == m ? static_cast<unsigned>(idx) : UINT_MAX));
}

// The lane's best expert among those not taken (key 0 and INT_MAX when none is left).
template <int kPer>
__device__ __forceinline__ void lane_best(const unsigned (&key)[kPer], unsigned taken, int lane,
                                          unsigned& bk, int& bi) {
  bk = 0;
  bi = INT_MAX;
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (!((taken >> j) & 1u) && key[j] > bk) {  // strict: the lower index wins a tie
      bk = key[j];
      bi = j * 32 + lane;
    }
}

// 1 / (1 + exp(−x)) with exp rounded once from double: that is the host's expf (correctly
// rounded but for vanishingly rare cases), so the CPU and the GPU rank near-equal scores alike.
// CUDA's expf may be 2 ulp off, enough to swap experts whose scores differ by an ulp.
__device__ __forceinline__ float sigmoid(float x) {
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  return 1.0f / (1.0f + e);
}

constexpr int kRouteWarps = 4;

// One warp per token; lane l holds experts l, l + 32, ... (kPer of them).
template <int kPer>
__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(RouteArgs a) {
  pdl_begin();
  extern __shared__ float route_smem[];  // kRouteWarps × E biased scores, with groups only
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= a.T) return;
  const int E = a.E, n_group = a.n_group;
  const float* row = a.logits + t * E;
  float s[kPer], sc[kPer];
  unsigned taken = 0;  // bit j: expert j·32 + lane is chosen already or does not exist
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = j * 32 + lane;
    s[j] = 0.0f;
    sc[j] = -INFINITY;
    if (e < E) {
      s[j] = sigmoid(row[e]);
      const float v = s[j] + (a.bias ? a.bias[e] : 0.0f);
      // A NaN score (a broken checkpoint) ranks lowest, so the ids stay valid experts.
      sc[j] = isnan(v) ? -INFINITY : v;
    } else {
      taken |= 1u << j;
    }
  }

  if (n_group > 1) {
    // Group score: the sum of the group's two best biased scores (its best one if it has only
    // one expert), one lane per group over the warp's copy of the scores.
    float* sh = route_smem + warp * E;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (j * 32 + lane < E) sh[j * 32 + lane] = sc[j];
    __syncwarp();
    const int per = E / n_group;
    float gscore = -INFINITY;
    if (lane < n_group) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < per; ++i) {
        const float v = sh[lane * per + i];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      gscore = per >= 2 ? b1 + b2 : b1;
    }
    unsigned gkey = lane < n_group ? order_key(gscore) : 0u, keep = 0;
    for (int r = 0; r < a.topk_group; ++r) {
      const int g = warp_best(gkey, lane);
      keep |= 1u << g;
      if (lane == g) gkey = 0;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = j * 32 + lane;
      if (e < E && !((keep >> (e / per)) & 1u)) sc[j] = -INFINITY;
    }
  }

  // top_k rounds of a warp-wide best; lane r keeps choice r, and only the winner's lane looks
  // for its next best. The normaliser sums the unbiased scores in the order chosen, the same
  // on every lane.
  unsigned key[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) key[j] = order_key(sc[j]);
  unsigned bk;
  int bi;
  lane_best(key, taken, lane, bk, bi);
  int my_id = 0;
  float my_s = 0.0f, sum = 0.0f;
  for (int r = 0; r < a.top_k; ++r) {
    const int win = warp_best(bk, bi);
    const int owner = win & 31, jj = win >> 5;
    float sv = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (j == jj) sv = s[j];
    sv = __shfl_sync(kFull, sv, owner);
    if (lane == owner) {
      taken |= 1u << jj;
      lane_best(key, taken, lane, bk, bi);
    }
    if (lane == r) {
      my_id = win;
      my_s = sv;
    }
    sum += sv;
  }
  if (lane < a.top_k) {
    float w = my_s;
    if (a.norm_topk_prob) w /= (sum + 1e-20f);
    a.ids[t * a.ids_s0 + lane * a.ids_s1] = my_id;
    a.weights[t * a.w_s0 + lane * a.w_s1] = w * a.scaling;
  }
}

template <int kPer>
cudaError_t route(const RouteArgs& a, cudaStream_t stream) {
  const int64_t blocks = (a.T + kRouteWarps - 1) / kRouteWarps;
  const size_t smem = a.n_group > 1 ? sizeof(float) * kRouteWarps * a.E : 0;
  launch(moe_route_kernel<kPer>, static_cast<unsigned>(blocks), kRouteWarps * 32, smem, stream, a);
  return cudaGetLastError();
}

// --- moe_align ---------------------------------------------------------------------------
// Pairs p = t·k + i are cut into contiguous chunks, one per warp. Each warp counts its chunk's
// experts; an exclusive scan over (expert, warp) in that order gives every warp the first row
// of each expert's run that it fills; each warp then walks its chunk in order, ranking equal
// ids within 32 pairs with __match_any_sync. Every row follows from counts alone, so the
// result is the same on every run.

// Pair indices fit in 32 bits (the host checks T·k); 64-bit division would cost a call.
struct AlignIn {
  const int32_t* ids;
  int64_t s0, s1;
  int k, E;
  int n;  // T·k
};

// The pair's expert, or −1 when it has none (past the end or an id outside [0, E)).
__device__ __forceinline__ int pair_expert(const AlignIn& in, int p) {
  if (p >= in.n) return -1;
  const int t = p / in.k;
  const int id = in.ids[t * in.s0 + (p - t * in.k) * in.s1];
  return id >= 0 && id < in.E ? id : -1;
}

// cnt[e] += number of pairs of expert e in [begin, end); cnt is the warp's own.
__device__ void warp_count(const AlignIn& in, int begin, int end, int* cnt) {
  const int lane = threadIdx.x & 31;
  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    const int id = p < end ? pair_expert(in, p) : -1;
    const unsigned peers = __match_any_sync(kFull, id);
    // Leaders of different ids touch different counters: no atomics needed.
    if (id >= 0 && lane == __ffs(peers) - 1) cnt[id] += __popc(peers);
    __syncwarp();
  }
}

// Places pairs [begin, end): run[e] is the next row of expert e for this warp.
__device__ void warp_place(const AlignIn& in, int begin, int end, int* run, int32_t* src_token,
                           int32_t* dest_row) {
  const int lane = threadIdx.x & 31;
  const unsigned lower = (1u << lane) - 1;
  for (int base = begin; base < end; base += 32) {
    const int p = base + lane;
    const int id = p < end ? pair_expert(in, p) : -1;
    const unsigned peers = __match_any_sync(kFull, id);
    if (p < end) {
      int row = -1;
      if (id >= 0) {
        row = run[id] + __popc(peers & lower);
        src_token[row] = p / in.k;
      }
      dest_row[p] = row;
    }
    __syncwarp();
    if (id >= 0 && lane == 31 - __clz(peers)) run[id] += __popc(peers);
    __syncwarp();
  }
}

// In-place exclusive prefix sum of a[0, n) by the whole block (blockDim a multiple of 32);
// returns the total. wsum: 32 ints of shared memory.
__device__ int block_exclusive_scan(int* a, int n, int* wsum) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int carry = 0;
  for (int base = 0; base < n; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const int v = i < n ? a[i] : 0;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(kFull, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) wsum[warp] = x;
    __syncthreads();
    if (warp == 0) {
      int w = lane < nw ? wsum[lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(kFull, w, o);
        if (lane >= o) w += y;
      }
      wsum[lane] = w;
    }
    __syncthreads();
    if (i < n) a[i] = carry + (warp ? wsum[warp - 1] : 0) + x - v;
    carry += wsum[nw - 1];
    __syncthreads();
  }
  return carry;
}

__device__ void fill_dropped_rows(int32_t* src_token, int from, int n, int first, int step) {
  for (int r = from + first; r < n; r += step) src_token[r] = -1;
}

// Small problems (decode): the whole grouping in one CTA, counters in shared memory.
// Shared: hist [nw][E] (per warp, per expert), off [E + 1], wsum [32].
__global__ void moe_align_one_cta(AlignIn in, int chunk, int32_t* src_token, int32_t* dest_row,
                                  int32_t* offsets) {
  pdl_begin();
  extern __shared__ int align_smem[];
  const int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, E = in.E;
  int* hist = align_smem;
  int* off = hist + nw * E;
  int* wsum = off + E + 1;
  for (int i = threadIdx.x; i < nw * E; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  const int begin = warp * chunk, end = min(in.n, begin + chunk);
  warp_count(in, begin, end, hist + warp * E);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int w = 0; w < nw; ++w) {
      const int c = hist[w * E + e];
      hist[w * E + e] = run;
      run += c;
    }
    off[e] = run;
  }
  __syncthreads();
  const int total = block_exclusive_scan(off, E, wsum);
  if (threadIdx.x == 0) off[E] = total;
  __syncthreads();
  for (int e = threadIdx.x; e <= E; e += blockDim.x) {
    offsets[e] = off[e];
    if (e < E)
      for (int w = 0; w < nw; ++w) hist[w * E + e] += off[e];
  }
  fill_dropped_rows(src_token, total, in.n, threadIdx.x, blockDim.x);
  __syncthreads();
  warp_place(in, begin, end, hist + warp * E, src_token, dest_row);
}

// Large problems (prefill): three kernels over W warps of 8-warp CTAs. hist [E][W] in global
// memory holds each warp's count, then (after the scan) its first row within the expert.
constexpr int kAlignWarps = 8;

__global__ void __launch_bounds__(kAlignWarps * 32)
    moe_align_count(AlignIn in, int chunk, int W, int* hist) {
  pdl_begin();
  extern __shared__ int align_smem[];  // cnt [kAlignWarps][E]
  const int warp = threadIdx.x >> 5, E = in.E;
  const int w0 = blockIdx.x * kAlignWarps;
  for (int i = threadIdx.x; i < kAlignWarps * E; i += blockDim.x) align_smem[i] = 0;
  __syncthreads();
  const int begin = (w0 + warp) * chunk, end = min(in.n, begin + chunk);
  warp_count(in, begin, end, align_smem + warp * E);
  __syncthreads();
  // Transposed store: a CTA's warps are adjacent columns of hist.
  for (int i = threadIdx.x; i < kAlignWarps * E; i += blockDim.x) {
    const int e = i / kAlignWarps, w = i % kAlignWarps;
    if (w0 + w < W) hist[static_cast<int64_t>(e) * W + w0 + w] = align_smem[w * E + e];
  }
}

// One CTA per expert: its row of hist becomes an exclusive scan; totals[e] its sum.
__global__ void moe_align_scan(int W, int* hist, int* totals) {
  pdl_begin();
  __shared__ int wsum[32];
  const int total = block_exclusive_scan(hist + static_cast<int64_t>(blockIdx.x) * W, W, wsum);
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kAlignWarps * 32)
    moe_align_place(AlignIn in, int chunk, int W, const int* hist, const int* totals,
                    int32_t* src_token, int32_t* dest_row, int32_t* offsets) {
  pdl_begin();
  extern __shared__ int align_smem[];  // off [E + 1], run [kAlignWarps][E], wsum [32]
  const int warp = threadIdx.x >> 5, E = in.E;
  int* off = align_smem;
  int* run = off + E + 1;
  int* wsum = run + kAlignWarps * E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) off[e] = totals[e];
  __syncthreads();
  // Every CTA scans the E totals itself rather than waiting for a fourth kernel.
  const int total = block_exclusive_scan(off, E, wsum);
  if (blockIdx.x == 0)
    for (int e = threadIdx.x; e <= E; e += blockDim.x) offsets[e] = e < E ? off[e] : total;
  fill_dropped_rows(src_token, total, in.n, blockIdx.x * blockDim.x + threadIdx.x,
                    gridDim.x * blockDim.x);
  const int w0 = blockIdx.x * kAlignWarps;
  for (int i = threadIdx.x; i < kAlignWarps * E; i += blockDim.x) {
    const int e = i / kAlignWarps, w = i % kAlignWarps;
    if (w0 + w < W) run[w * E + e] = off[e] + hist[static_cast<int64_t>(e) * W + w0 + w];
  }
  __syncthreads();
  const int begin = (w0 + warp) * chunk, end = min(in.n, begin + chunk);
  warp_place(in, begin, end, run + warp * E, src_token, dest_row);
}

// --- moe_unpermute -------------------------------------------------------------------------

constexpr int kUnpermuteThreads = 128;
constexpr int kUnpermuteBatch = 8;  // slots whose rows are loaded before any is summed

template <class T>
__device__ __forceinline__ float to_f32(T v) {
  if constexpr (__is_same(T, float))
    return v;
  else
    return __bfloat162float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v) {
  if constexpr (__is_same(T, float))
    return v;
  else
    return __float2bfloat16_rn(v);
}

// V consecutive elements, moved in 16-byte words when V = 8 (the launcher checked alignment).
template <class T, int V>
struct alignas(V == 8 ? 16 : sizeof(T)) Vec {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ Vec<T, V> load_vec(const T* p) {
  Vec<T, V> x;
  if constexpr (V == 8) {
#pragma unroll
    for (int w = 0; w < static_cast<int>(sizeof(x) / 16); ++w)
      reinterpret_cast<uint4*>(&x)[w] = reinterpret_cast<const uint4*>(p)[w];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) x.v[j] = p[j];
  }
  return x;
}

template <class T, int V>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, V>& x) {
  if constexpr (V == 8) {
#pragma unroll
    for (int w = 0; w < static_cast<int>(sizeof(x) / 16); ++w)
      reinterpret_cast<uint4*>(p)[w] = reinterpret_cast<const uint4*>(&x)[w];
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = x.v[j];
  }
}

// grid (T, column blocks): each thread sums V columns of one token over its k slots. Per
// batch of slots, the row indices and weights are read first, then every row's raw words,
// then the sums: the batch's loads are in flight together, which gave 1.7 times the bandwidth
// of converting each row as it arrived.
template <class Y, class O, int V>
__global__ void __launch_bounds__(kUnpermuteThreads) moe_unpermute_kernel(UnpermuteArgs a) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t h = (static_cast<int64_t>(blockIdx.y) * kUnpermuteThreads + threadIdx.x) * V;
  if (h >= a.H) return;
  const Y* y = static_cast<const Y*>(a.y) + h;
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
  for (int i0 = 0; i0 < a.k; i0 += kUnpermuteBatch) {
    int32_t r[kUnpermuteBatch];
    float wt[kUnpermuteBatch];
#pragma unroll
    for (int b = 0; b < kUnpermuteBatch; ++b) {
      const int i = i0 + b;
      r[b] = i < a.k ? a.dest_row[t * a.d_s0 + i * a.d_s1] : -1;
      wt[b] = i < a.k ? a.weights[t * a.w_s0 + i * a.w_s1] : 0.0f;
      if (r[b] >= a.y_rows) r[b] = -1;
    }
    Vec<Y, V> v[kUnpermuteBatch];
#pragma unroll
    for (int b = 0; b < kUnpermuteBatch; ++b)
      if (r[b] >= 0) v[b] = load_vec<Y, V>(y + r[b] * a.y_stride);
        // Separately rounded product and sum (no FMA contraction), in slot order: the CPU's sum.
#pragma unroll
    for (int b = 0; b < kUnpermuteBatch; ++b)
      if (r[b] >= 0)
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = __fadd_rn(acc[j], __fmul_rn(wt[b], to_f32(v[b].v[j])));
  }
  Vec<O, V> o;
#pragma unroll
  for (int j = 0; j < V; ++j) o.v[j] = from_f32<O>(acc[j]);
  store_vec<O, V>(static_cast<O*>(a.out) + t * a.out_stride + h, o);
}

template <class Y, class O>
cudaError_t unpermute(const UnpermuteArgs& a, cudaStream_t stream) {
  const auto aligned = [](const void* p, int64_t stride, size_t elem) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (stride * elem) % 16 == 0;
  };
  const bool vec = a.H % 8 == 0 && aligned(a.y, a.y_stride, sizeof(Y)) &&
                   aligned(a.out, a.out_stride, sizeof(O));
  const int v = vec ? 8 : 1;
  const int64_t cols = (a.H + v - 1) / v;
  const dim3 grid(static_cast<unsigned>(a.T),
                  static_cast<unsigned>((cols + kUnpermuteThreads - 1) / kUnpermuteThreads));
  if (vec)
    launch(moe_unpermute_kernel<Y, O, 8>, grid, kUnpermuteThreads, 0, stream, a);
  else
    launch(moe_unpermute_kernel<Y, O, 1>, grid, kUnpermuteThreads, 0, stream, a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_moe_route(const RouteArgs& a, cudaStream_t stream) {
  if (a.T == 0 || a.top_k == 0) return cudaSuccess;
  if (a.E < 1 || a.E > kMoeMaxExperts || a.top_k > kMoeMaxTopK || a.n_group < 1 ||
      a.n_group > kMoeMaxGroups || a.E % a.n_group != 0)
    return cudaErrorInvalidValue;
  if (a.E <= 32) return route<1>(a, stream);
  if (a.E <= 64) return route<2>(a, stream);
  if (a.E <= 128) return route<4>(a, stream);
  if (a.E <= 256) return route<8>(a, stream);
  if (a.E <= 512) return route<16>(a, stream);
  return route<32>(a, stream);
}

cudaError_t launch_moe_align(const int32_t* ids, int64_t T, int k, int64_t s0, int64_t s1, int E,
                             int32_t* src_token, int32_t* dest_row, int32_t* offsets,
                             void* workspace, cudaStream_t stream) {
  if (E < 1 || E > kMoeMaxExperts || T * k > kMoeMaxPairs) return cudaErrorInvalidValue;
  const AlignIn in{ids, s0, s1, k, E, static_cast<int>(T * k)};
  if (ops::scratch::moe_align_one_cta(in.n, E)) {
    const int nw = ops::scratch::moe_one_cta_warps(E);
    const int chunk = ((in.n + nw - 1) / nw + 31) / 32 * 32;
    const size_t smem = sizeof(int) * (nw * E + E + 1 + 32);
    launch(moe_align_one_cta, 1, nw * 32, smem, stream, in, chunk, src_token, dest_row, offsets);
    return cudaGetLastError();
  }
  const int chunk = ops::scratch::moe_align_chunk(in.n);
  const int W = (in.n + chunk - 1) / chunk;
  const unsigned blocks = static_cast<unsigned>((W + kAlignWarps - 1) / kAlignWarps);
  int* hist = static_cast<int*>(workspace);
  int* totals = hist + static_cast<int64_t>(W) * E;
  launch(moe_align_count, blocks, kAlignWarps * 32, sizeof(int) * kAlignWarps * E, stream, in,
         chunk, W, hist);
  launch(moe_align_scan, E, 256, 0, stream, W, hist, totals);
  launch(moe_align_place, blocks, kAlignWarps * 32, sizeof(int) * ((kAlignWarps + 1) * E + 1 + 32),
         stream, in, chunk, W, hist, totals, src_token, dest_row, offsets);
  return cudaGetLastError();
}

cudaError_t launch_moe_unpermute(const UnpermuteArgs& a, cudaStream_t stream) {
  if (a.T == 0 || a.H == 0) return cudaSuccess;
  const bool yb = a.y_dtype == DType::kBF16, ob = a.out_dtype == DType::kBF16;
  if (yb && ob) return unpermute<__nv_bfloat16, __nv_bfloat16>(a, stream);
  if (yb) return unpermute<__nv_bfloat16, float>(a, stream);
  if (ob) return unpermute<float, __nv_bfloat16>(a, stream);
  return unpermute<float, float>(a, stream);
}

}  // namespace mls::ops::cuda::kernels
