// Sampling on the GPU: one CTA of 1024 threads per row, the arithmetic of ops::cpu::sample_row
// (ops/sampling.h) step for step, so that both pick the same token.
//
// Pass 1 (every row) reads the logits once: the first maximum and an online sum of exp for the
// raw log-softmax. A greedy row ends there. A sampled row computes in pass 2 every token's
// relative probability q (double exp, as on the host) and integer mass: the candidate count, the
// total mass, the mass of each run of 32 ids (for a draw in id order) and, when top_k or top_p
// needs the descending order, a histogram of the candidates over the top 12 bits of q's float
// bits (positive floats order as their bits), with counts and masses.
//   - No top_k/top_p: the draw walks the id order: a scan over the 32-id runs finds the run where
//     the mass passes the target, one warp finds the id within it.
//   - Otherwise the histogram gives the bucket where the top_k count (or else the top_p mass) is
//     reached; when every candidate in or above that bucket fits in shared memory (8192), they
//     are gathered, sorted (bitonic, descending q then ascending id), and top_k, top_p and the
//     draw run on the sorted prefix.
//   - Larger sets (flat distributions) take a radix select per decision instead: histograms over
//     the next 10 bits and then the last 10 bits narrow the crossing to a window that fits and
//     is sorted, or to one exact q whose equal ids are resolved by an ordered pass.
// Masses are integers (q · 2^45 truncated), so every sum, whatever its order, is the host's.
//
// A call of few rows splits its greedy rows first (ops::scratch::sample_greedy_splits): a launch
// of CTAs over slices of each such row leaves per slice its max, first argmax and sum of exp,
// and the row's CTA merges them in a fixed order instead of reading the row. The argmax merge
// (larger max, else lower id) is exact in any order: the id is the one-CTA path's.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "ops/cuda/launch.cuh"
#include "ops/cuda/sampling_kernels.h"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = 8192;  // candidates sorted in shared memory at once
constexpr int kPerThread = kCap / kThreads;
constexpr int kBuckets = 1024;  // one per thread; q <= 1 keeps the top 12 bits below 1024
constexpr u64 kFullMask = 0xffffffffu;

static_assert(kBuckets == kThreads && (kSampleMaxVocab / 32) <= kCap);

struct Smem {
  u64 buf[kCap];  // masses of 32-id runs, or composite keys of gathered candidates
  unsigned int hcnt[kBuckets];
  u64 hmass[kBuckets];
  u64 red[2][kWarps];
  float redf[kWarps];
  double redd[kWarps];
  int redi[kWarps];
  u64 bcast[2];
  int pos;
  unsigned int n;
};

struct RowCtx {
  const float* x;
  int V;
  float xmax, inv_t, min_p;
};

// Candidates ranked at or before (key, idx); key 0: every candidate.
struct Limit {
  unsigned int key;
  int idx;
};

enum CritKind { kCount, kMassGe, kMassGt };
// Where a walk down the descending order stops: at the first candidate whose inclusive count
// reaches n (kCount), whose inclusive mass as a double reaches bound (kMassGe: top_p), or whose
// inclusive mass exceeds n (kMassGt: the draw).
struct Crit {
  CritKind kind;
  u64 n;
  double bound;
};

__device__ __forceinline__ bool met(const Crit& c, u64 count, u64 mass) {
  if (c.kind == kCount) return count >= c.n;
  if (c.kind == kMassGe) return __ull2double_rn(mass) >= c.bound;
  return mass > c.n;
}

__device__ __forceinline__ u64 mass_of(unsigned int key) {
  return __double2ull_rz(static_cast<double>(__uint_as_float(key)) * 0x1p45);
}

__device__ __forceinline__ u64 compose(unsigned int key, int idx) {
  return (static_cast<u64>(key) << 32) | (0xffffffffu - static_cast<unsigned int>(idx));
}
__device__ __forceinline__ unsigned int key_of(u64 c) {
  return static_cast<unsigned int>(c >> 32);
}
__device__ __forceinline__ int idx_of(u64 c) {
  return static_cast<int>(0xffffffffu - static_cast<unsigned int>(c));
}

// floor(r · total / 2^53) for r < 2^53.
__device__ __forceinline__ u64 draw_target(u64 r, u64 total) {
  return (__umul64hi(r, total) << 11) | ((r * total) >> 53);
}

// The bits of q when x is a candidate (q > 0, q >= min_p), else 0. A z below zlo is known to
// give a q below the window of interest and is reported as 0 without the exp.
__device__ __forceinline__ unsigned int key_at(const RowCtx& c, float x, double zlo) {
  const double z = __dmul_rn(__dsub_rn(static_cast<double>(x), static_cast<double>(c.xmax)),
                             static_cast<double>(c.inv_t));
  if (!(z >= zlo)) return 0;
  const float q = __double2float_rn(exp(z));
  return q > 0.0f && q >= c.min_p ? __float_as_uint(q) : 0u;
}

// A zlo for keys at or above lo_key: z < log(lo) − 1e-5 gives q < lo·(1 − 1e-5), which no exp
// within an ulp rounds up to lo. Below the normal range only underflow is cut: exp(−104) is under
// half the smallest denormal.
__device__ __forceinline__ double zlo_for(const RowCtx& c, unsigned int lo_key) {
  const float lo = fmaxf(__uint_as_float(lo_key), c.min_p);
  return lo >= 1.17549435e-38f ? log(static_cast<double>(lo)) - 1e-5 : -104.0;
}

__device__ __forceinline__ bool in_limit(const Limit& l, unsigned int key, int i) {
  return key > l.key || (key == l.key && i <= l.idx);
}

// Calls fn(i, x[i]) for this thread's ids in ascending order, U loads in flight; also for ids
// past V (fn checks), so that every lane of a warp takes part in each call.
template <int U, class F>
__device__ __forceinline__ void for_each_value(const float* x, int V, F&& fn) {
  for (int base = 0; base < V; base += kThreads * U) {
    float v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * kThreads + static_cast<int>(threadIdx.x);
      v[u] = i < V ? __ldg(x + i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) fn(base + u * kThreads + static_cast<int>(threadIdx.x), v[u]);
  }
}

__device__ __forceinline__ u64 warp_sum(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ u64 block_sum(u64 v, Smem& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) s.red[0][warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(s.red[0][lane]);
    if (lane == 0) s.bcast[0] = v;
  }
  __syncthreads();
  return s.bcast[0];
}

// Exclusive prefix sums of (a, b) over threads in order; totals in ta, tb.
__device__ void block_scan2(u64 a, u64 b, u64& ea, u64& eb, u64& ta, u64& tb, Smem& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 ia = a, ib = b;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 pa = __shfl_up_sync(kFullMask, ia, o), pb = __shfl_up_sync(kFullMask, ib, o);
    if (lane >= o) {
      ia += pa;
      ib += pb;
    }
  }
  if (lane == 31) {
    s.red[0][warp] = ia;
    s.red[1][warp] = ib;
  }
  __syncthreads();
  if (warp == 0) {
    u64 wa = s.red[0][lane], wb = s.red[1][lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u64 pa = __shfl_up_sync(kFullMask, wa, o), pb = __shfl_up_sync(kFullMask, wb, o);
      if (lane >= o) {
        wa += pa;
        wb += pb;
      }
    }
    s.red[0][lane] = wa;
    s.red[1][lane] = wb;
  }
  __syncthreads();
  ea = (warp > 0 ? s.red[0][warp - 1] : 0) + ia - a;
  eb = (warp > 0 ? s.red[1][warp - 1] : 0) + ib - b;
  ta = s.red[0][kWarps - 1];
  tb = s.red[1][kWarps - 1];
  __syncthreads();
}

// The first position (in thread order) where a thread reported `hit`, or INT_MAX.
__device__ int block_first(bool hit, int position, Smem& s) {
  if (threadIdx.x == 0) s.pos = INT_MAX;
  __syncthreads();
  if (hit) atomicMin(&s.pos, position);
  __syncthreads();
  const int p = s.pos;
  __syncthreads();
  return p;
}

// Pass 1: the first maximum, and Σ exp(x − max) kept online: float exp per term, double sums and
// rescaling (when the max grows, and across threads), so the normaliser is good to ~1e-7.
struct MaxSum {
  float m;
  double sum;
  int idx;
};

__device__ __forceinline__ void merge(MaxSum& a, const MaxSum& b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) {
    a.sum += b.sum;
    a.idx = min(a.idx, b.idx);
    return;
  }
  a.sum = a.sum * exp(static_cast<double>(a.m) - m) + b.sum * exp(static_cast<double>(b.m) - m);
  a.idx = a.m > b.m ? a.idx : b.m > a.m ? b.idx : min(a.idx, b.idx);
  a.m = m;
}

__device__ __forceinline__ void accumulate(MaxSum& t, int i, float v) {
  if (v > t.m) {
    t.sum = t.sum * exp(static_cast<double>(t.m) - v) + 1.0;
    t.m = v;
    t.idx = i;
  } else if (v != -INFINITY) {
    t.sum += static_cast<double>(expf(v - t.m));
  }
}

__device__ __forceinline__ void warp_merge(MaxSum& t) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum u{__shfl_xor_sync(kFullMask, t.m, o), __shfl_xor_sync(kFullMask, t.sum, o),
                   __shfl_xor_sync(kFullMask, t.idx, o)};
    merge(t, u);
  }
}

// The merge of every thread's t over a CTA of NW warps, in a fixed order; returned to all.
template <int NW>
__device__ MaxSum block_merge(MaxSum t, float* redf, double* redd, int* redi) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_merge(t);
  if (lane == 0) {
    redf[warp] = t.m;
    redd[warp] = t.sum;
    redi[warp] = t.idx;
  }
  __syncthreads();
  if (warp == 0) {
    t = lane < NW ? MaxSum{redf[lane], redd[lane], redi[lane]} : MaxSum{-INFINITY, 0.0, INT_MAX};
    warp_merge(t);
    if (lane == 0) {
      redf[0] = t.m;
      redd[0] = t.sum;
      redi[0] = t.idx;
    }
  }
  __syncthreads();
  t = {redf[0], redd[0], redi[0]};
  __syncthreads();
  return t;
}

__device__ MaxSum row_max_sum(const float* x, int V, Smem& s) {
  MaxSum t{-INFINITY, 0.0, INT_MAX};
  for_each_value<8>(x, V, [&](int i, float v) {
    if (i < V) accumulate(t, i, v);
  });
  t = block_merge<kWarps>(t, s.redf, s.redd, s.redi);
  if (t.idx >= V) t.idx = 0;  // no value above −inf: the host's max_element gives id 0
  return t;
}

// A slice's MaxSum as it lies in the scratch.
struct Partial {
  float m;
  int idx;
  double sum;
};
static_assert(sizeof(Partial) == scratch::kSamplePartialFloats * sizeof(float));
static_assert(scratch::kSampleTargetCtas <= kThreads);  // a row's partials: one per thread

// A split greedy row: its slices' partials merged in a fixed order.
__device__ MaxSum merge_partials(const float* part, int splits, int V, Smem& s) {
  MaxSum t{-INFINITY, 0.0, INT_MAX};
  if (static_cast<int>(threadIdx.x) < splits) {
    const Partial p = reinterpret_cast<const Partial*>(part)[threadIdx.x];
    t = {p.m, p.sum, p.idx};
  }
  t = block_merge<kWarps>(t, s.redf, s.redd, s.redi);
  if (t.idx >= V) t.idx = 0;
  return t;
}

// Slice blockIdx.x of greedy row blockIdx.y: its MaxSum into a.partials.
constexpr int kSliceThreads = 256;

__global__ void __launch_bounds__(kSliceThreads)
    greedy_slice_kernel(const __grid_constant__ SampleArgs a) {
  pdl_begin();
  const int row = blockIdx.y;
  if (!a.rows[row].greedy) return;
  __shared__ float redf[kSliceThreads / 32];
  __shared__ double redd[kSliceThreads / 32];
  __shared__ int redi[kSliceThreads / 32];
  const float* x = a.logits + row * a.stride;
  const int slice = (a.V + a.splits - 1) / a.splits;
  const int lo = static_cast<int>(blockIdx.x) * slice, hi = min(lo + slice, a.V);
  constexpr int U = 4;
  MaxSum t{-INFINITY, 0.0, INT_MAX};
  for (int base = lo; base < hi; base += kSliceThreads * U) {
    float v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * kSliceThreads + static_cast<int>(threadIdx.x);
      v[u] = i < hi ? __ldg(x + i) : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
      accumulate(t, base + u * kSliceThreads + static_cast<int>(threadIdx.x), v[u]);
  }
  t = block_merge<kSliceThreads / 32>(t, redf, redd, redi);
  if (threadIdx.x == 0)
    reinterpret_cast<Partial*>(a.partials)[row * a.splits + blockIdx.x] = {t.m, t.idx, t.sum};
}

// Candidates with key in [klo, khi] within `lim` into s.buf (at most kCap are stored); returns
// how many there are.
__device__ int gather(Smem& s, const RowCtx& c, unsigned int klo, unsigned int khi,
                      const Limit& lim) {
  if (threadIdx.x == 0) s.n = 0;
  __syncthreads();
  const double zlo = zlo_for(c, klo);
  for_each_value<4>(c.x, c.V, [&](int i, float v) {
    if (i >= c.V) return;
    const unsigned int key = key_at(c, v, zlo);
    if (key == 0 || key < klo || key > khi || !in_limit(lim, key, i)) return;
    const unsigned int slot = atomicAdd(&s.n, 1u);
    if (slot < kCap) s.buf[slot] = compose(key, i);
  });
  __syncthreads();
  const int n = static_cast<int>(s.n);
  __syncthreads();
  return n;
}

// Counts and masses of the candidates with key in [klo, khi] within `lim`, by bucket
// (key >> shift) & 1023.
__device__ void histogram(Smem& s, const RowCtx& c, unsigned int klo, unsigned int khi, int shift,
                          const Limit& lim) {
  s.hcnt[threadIdx.x] = 0;
  s.hmass[threadIdx.x] = 0;
  __syncthreads();
  const double zlo = zlo_for(c, klo);
  for_each_value<4>(c.x, c.V, [&](int i, float v) {
    if (i >= c.V) return;
    const unsigned int key = key_at(c, v, zlo);
    if (key == 0 || key < klo || key > khi || !in_limit(lim, key, i)) return;
    const unsigned int b = (key >> shift) & (kBuckets - 1);
    atomicAdd(&s.hcnt[b], 1u);
    atomicAdd(&s.hmass[b], mass_of(key));
  });
  __syncthreads();
}

// The highest bucket at which crit is met, walking down from (count, mass) = (bc, bm); adds the
// buckets above it to bc and bm.
__device__ int bucket_find(Smem& s, u64& bc, u64& bm, const Crit& crit) {
  const int b = kBuckets - 1 - static_cast<int>(threadIdx.x);
  const u64 cnt = s.hcnt[b], mass = s.hmass[b];
  u64 ec, em, tc, tm;
  block_scan2(cnt, mass, ec, em, tc, tm, s);
  const bool hit = cnt > 0 && met(crit, bc + ec + cnt, bm + em + mass);
  int t = block_first(hit, static_cast<int>(threadIdx.x), s);
  if (t == INT_MAX) t = kThreads - 1;  // unreachable: the crossing is within the set
  if (static_cast<int>(threadIdx.x) == t) {
    s.bcast[0] = ec;
    s.bcast[1] = em;
  }
  __syncthreads();
  bc += s.bcast[0];
  bm += s.bcast[1];
  __syncthreads();
  return kBuckets - 1 - t;
}

// Sorts s.buf[0, n) descending (bitonic; zeros pad to a power of two and sort last).
__device__ void sort_desc(Smem& s, int n) {
  int np = 1;
  while (np < n) np <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < np; i += kThreads) s.buf[i] = 0;
  __syncthreads();
  for (int k = 2; k <= np; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < np; i += kThreads) {
        const int p = i ^ j;
        if (p <= i) continue;
        const u64 a = s.buf[i], b = s.buf[p];
        if ((i & k) == 0 ? a < b : a > b) {
          s.buf[i] = b;
          s.buf[p] = a;
        }
      }
      __syncthreads();
    }
  }
}

struct Hit {
  int pos;   // position in the sorted window
  u64 mass;  // inclusive mass there
};

// In the sorted window s.buf[0, n), preceded by bc candidates of mass bm: the first position
// where crit is met.
__device__ Hit window_find(Smem& s, int n, u64 bc, u64 bm, const Crit& crit) {
  const int lo = static_cast<int>(threadIdx.x) * kPerThread;
  u64 w[kPerThread], local = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    w[j] = lo + j < n ? mass_of(key_of(s.buf[lo + j])) : 0;
    local += w[j];
  }
  u64 excl, unused, total, unused_total;
  block_scan2(local, 0, excl, unused, total, unused_total, s);
  u64 run = bm + excl;
  int first = INT_MAX;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    if (first != INT_MAX || lo + j >= n) continue;
    run += w[j];
    if (met(crit, bc + static_cast<u64>(lo + j) + 1, run)) first = lo + j;
  }
  int pos = block_first(first != INT_MAX, first, s);
  if (pos == INT_MAX) pos = n - 1;  // unreachable: the crossing is within the window
  if (first == pos) s.bcast[0] = run;
  __syncthreads();
  const Hit h{pos, s.bcast[0]};
  __syncthreads();
  return h;
}

struct Pick {
  unsigned int key;
  int idx;
  u64 mass;  // inclusive mass at the pick
};

// The candidate (within lim) where crit is met, walking the descending order from the top:
// radix select over q's bits (12, 10, 10) until the crossing bucket's candidates fit in shared
// memory, then sort them; if one exact q holds more, an ordered pass finds the id.
__device__ Pick select(Smem& s, const RowCtx& c, const Limit& lim, const Crit& crit) {
  u64 bc = 0, bm = 0;
  unsigned int klo = 1, khi = 0xffffffffu, prefix = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = 20 - 10 * level;
    histogram(s, c, klo, khi, shift, lim);
    const int b = bucket_find(s, bc, bm, crit);
    const unsigned int n = s.hcnt[b];
    prefix =
        level == 0 ? static_cast<unsigned int>(b) : (prefix << 10) | static_cast<unsigned int>(b);
    klo = prefix << shift;
    khi = klo + ((1u << shift) - 1);
    __syncthreads();
    if (n <= static_cast<unsigned int>(kCap)) {
      const int got = gather(s, c, klo, khi, lim);
      sort_desc(s, got);
      const Hit h = window_find(s, got, bc, bm, crit);
      return {key_of(s.buf[h.pos]), idx_of(s.buf[h.pos]), h.mass};
    }
  }
  // Every candidate left has q bits klo: the j-th of them in id order is the pick.
  const unsigned int key = klo;
  const u64 f = mass_of(key);
  u64 j;
  if (crit.kind == kCount) {
    j = crit.n - bc;
  } else if (crit.kind == kMassGt) {
    j = (crit.n - bm) / f + 1;
  } else {
    j = static_cast<u64>(fmax((crit.bound - __ull2double_rn(bm)) / __ull2double_rn(f), 1.0));
    while (j > 1 && __ull2double_rn(bm + (j - 1) * f) >= crit.bound) --j;
    while (__ull2double_rn(bm + j * f) < crit.bound) ++j;
  }
  const double zlo = zlo_for(c, key);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 seen = 0;
  int found = -1;
  for (int base = 0; base < c.V && found < 0; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool flag = i < c.V && key_at(c, c.x[i], zlo) == key && in_limit(lim, key, i);
    const unsigned int ballot = __ballot_sync(kFullMask, flag);
    if (lane == 0) s.redi[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1)), total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? s.redi[w] : 0;
      total += s.redi[w];
    }
    if (flag && seen + static_cast<u64>(before) + 1 == j) s.pos = i;
    seen += static_cast<u64>(total);
    __syncthreads();
    if (seen >= j) found = s.pos;
    __syncthreads();
  }
  return {key, found < 0 ? 0 : found, bm + j * f};
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleArgs a) {
  pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int row = blockIdx.x;
  const SampleRow& p = a.rows[row];
  const float* x = a.logits + row * a.stride;
  const int V = a.V;

  if (p.greedy && a.splits > 1) {
    const MaxSum ms =
        merge_partials(a.partials + row * a.splits * scratch::kSamplePartialFloats, a.splits, V, s);
    if (threadIdx.x == 0) {
      a.ids[row * a.ids_stride] = ms.idx;
      a.logprobs[row * a.lp_stride] = static_cast<float>(static_cast<double>(x[ms.idx]) -
                                                         (static_cast<double>(ms.m) + log(ms.sum)));
    }
    return;
  }
  const MaxSum ms = row_max_sum(x, V, s);
  const double lse = static_cast<double>(ms.m) + log(ms.sum);
  const auto finish = [&](int token) {
    if (threadIdx.x != 0) return;
    a.ids[row * a.ids_stride] = token;
    a.logprobs[row * a.lp_stride] = static_cast<float>(static_cast<double>(x[token]) - lse);
  };
  if (p.greedy) return finish(ms.idx);

  const RowCtx c{x, V, ms.m, p.inv_t, p.min_p};
  const bool ranked = p.top_k > 0 || p.top_p < 1.0;

  // Pass 2: candidates, their total mass, masses of 32-id runs, and the top-level histogram.
  s.hcnt[threadIdx.x] = 0;
  s.hmass[threadIdx.x] = 0;
  __syncthreads();
  const double zlo = zlo_for(c, 1);
  u64 count = 0, mass = 0;
  for_each_value<4>(x, V, [&](int i, float v) {
    const unsigned int key = i < V ? key_at(c, v, zlo) : 0u;
    const u64 w = key ? mass_of(key) : 0;
    if (key) {
      ++count;
      mass += w;
      if (ranked) {
        atomicAdd(&s.hcnt[key >> 20], 1u);
        atomicAdd(&s.hmass[key >> 20], w);
      }
    }
    // A mass is at most 2^45: 32 of its low 24 bits, or of the rest, sum without overflow.
    const unsigned int lo = __reduce_add_sync(kFullMask, static_cast<unsigned int>(w & 0xffffff));
    const unsigned int hi = __reduce_add_sync(kFullMask, static_cast<unsigned int>(w >> 24));
    if ((threadIdx.x & 31) == 0 && i < V) s.buf[i >> 5] = (static_cast<u64>(hi) << 24) + lo;
  });
  const u64 n0 = block_sum(count, s);
  const u64 total0 = block_sum(mass, s);
  if (n0 == 0) return finish(ms.idx);  // no finite logits
  const bool top_k = p.top_k > 0 && static_cast<u64>(p.top_k) < n0;

  if (!top_k && p.top_p >= 1.0) {
    // Draw in id order: the 32-id run where the mass passes the target, then the id in it.
    const u64 target = draw_target(p.r, total0);
    const int runs = (V + 31) / 32, lo = static_cast<int>(threadIdx.x) * kPerThread;
    u64 local = 0;
    for (int j = 0; j < kPerThread; ++j) local += lo + j < runs ? s.buf[lo + j] : 0;
    u64 excl, unused, total, unused_total;
    block_scan2(local, 0, excl, unused, total, unused_total, s);
    for (int j = 0; j < kPerThread && lo + j < runs; ++j) {
      if (excl <= target && target < excl + s.buf[lo + j]) {
        s.pos = lo + j;
        s.bcast[0] = excl;
      }
      excl += s.buf[lo + j];
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x, i = s.pos * 32 + lane;
      const unsigned int key = i < V ? key_at(c, x[i], zlo) : 0u;
      u64 incl = key ? mass_of(key) : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 prev = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += prev;
      }
      const unsigned int over = __ballot_sync(kFullMask, s.bcast[0] + incl > target);
      if (lane == 0) finish(s.pos * 32 + __ffs(over) - 1);
    }
    return;
  }

  const Crit first = top_k ? Crit{kCount, static_cast<u64>(p.top_k), 0.0}
                           : Crit{kMassGe, 0, __dmul_rn(p.top_p, __ull2double_rn(total0))};
  u64 bc = 0, bm = 0;
  const int b = bucket_find(s, bc, bm, first);
  const u64 n_top = bc + s.hcnt[b];
  __syncthreads();
  u64 total = total0;
  if (n_top <= static_cast<u64>(kCap)) {
    // Every candidate down to the crossing bucket, sorted: the head of the row's order.
    const int n =
        gather(s, c, b == 0 ? 1u : static_cast<unsigned int>(b) << 20, 0xffffffffu, Limit{0, 0});
    sort_desc(s, n);
    int keep = n;
    if (top_k) {
      keep = p.top_k;
      total = window_find(s, keep, 0, 0, Crit{kCount, static_cast<u64>(keep), 0.0}).mass;
    }
    if (p.top_p < 1.0) {
      const Hit h =
          window_find(s, keep, 0, 0, Crit{kMassGe, 0, __dmul_rn(p.top_p, __ull2double_rn(total))});
      keep = h.pos + 1;
      total = h.mass;
    }
    const Hit h = window_find(s, keep, 0, 0, Crit{kMassGt, draw_target(p.r, total), 0.0});
    return finish(idx_of(s.buf[h.pos]));
  }
  // Too many candidates above the cut for shared memory: one radix select per decision.
  Limit lim{0, 0};
  if (top_k) {
    const Pick k = select(s, c, lim, Crit{kCount, static_cast<u64>(p.top_k), 0.0});
    lim = {k.key, k.idx};
    total = k.mass;
  }
  if (p.top_p < 1.0) {
    const Pick k = select(s, c, lim, Crit{kMassGe, 0, __dmul_rn(p.top_p, __ull2double_rn(total))});
    lim = {k.key, k.idx};
    total = k.mass;
  }
  finish(select(s, c, lim, Crit{kMassGt, draw_target(p.r, total), 0.0}).idx);
}

// One thread per mask word: its 32 logits.
__global__ void apply_token_mask_kernel(float* logits, int64_t stride, int V, int R,
                                        const uint32_t* mask) {
  pdl_begin();
  const int words = (V + 31) / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(words) * R) return;
  const int r = static_cast<int>(i / words), w = static_cast<int>(i % words);
  const uint32_t m = mask[i];
  if (m == 0xffffffffu) return;
  float* row = logits + r * stride;
  for (int b = 0; b < 32 && w * 32 + b < V; ++b)
    if (!((m >> b) & 1u)) row[w * 32 + b] = -INFINITY;
}

}  // namespace

cudaError_t launch_apply_token_mask(float* logits, int64_t stride, int V, int R,
                                    const uint32_t* mask, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>((V + 31) / 32) * R;
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  launch(apply_token_mask_kernel, static_cast<unsigned int>((n + threads - 1) / threads), threads,
         0, stream, logits, stride, V, R, mask);
  return cudaGetLastError();
}

cudaError_t launch_sample_rows(const SampleArgs& a, cudaStream_t stream) {
  if (a.R <= 0) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(
      sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sizeof(Smem)));
  if (e != cudaSuccess) return e;
  if (a.splits > 1) {
    launch(greedy_slice_kernel,
           dim3(static_cast<unsigned int>(a.splits), static_cast<unsigned int>(a.R)), kSliceThreads,
           0, stream, a);
    const cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) return le;
  }
  launch(sample_kernel, a.R, kThreads, sizeof(Smem), stream, a);
  return cudaGetLastError();
}

}  // namespace mls::ops::cuda::kernels
