// How Hopper's FP8 MMA adds: one wgmma m64n128k32 e4m3 on crafted rows, its sums against the
// exact ones. Case i is row i of A and of B (the result's diagonal) and, when the MMA
// accumulates, row i of the fragment it adds to. The cases tell apart the models of
// bench/fp8_promotion_model.cc: how many bits a sum keeps, whether it truncates or rounds,
// whether the products are aligned to the largest before they are added (cancellation keeps no
// bits then), and what adding to the fragment does.
//   fp8_accumulator_probe     one line a case: exact sum, the MMA's, their difference in units
//                             of 2^-20 of the exact sum's leading power of two.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda/wgmma_layout.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

using namespace mls::ops::cuda::kernels;

namespace {

constexpr int kRows = 64, kK = 32;

// One warpgroup: A and B (kRows × kK e4m3 each; B's rows past kRows zero) into 128-byte-swizzled
// shared tiles, d set to each row's start value, one MMA, the fragment out [kRows][128].
__global__ void probe_kernel(const uint8_t* a, const uint8_t* b, const float* start, int accumulate,
                             float* out) {
  __shared__ __align__(1024) uint8_t tiles[(kRows + 128) * 128];
  uint8_t* ta = tiles;
  uint8_t* tb = tiles + kRows * 128;
  for (int i = threadIdx.x; i < (kRows + 128) * 128; i += blockDim.x) tiles[i] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * kK; i += blockDim.x) {
    const int r = i / kK, k = i % kK, at = static_cast<int>(swizzle128(r, k / 16)) + k % 16;
    ta[at] = a[i];
    tb[at] = b[i];
  }
  fence_proxy_async_smem();
  __syncthreads();
  const int w = threadIdx.x / 32, l = threadIdx.x % 32, r0 = 16 * w + l / 4;
  float d[64];
  for (int j = 0; j < 16; ++j) {
    d[4 * j + 0] = d[4 * j + 1] = start[r0];
    d[4 * j + 2] = d[4 * j + 3] = start[r0 + 8];
  }
  wgmma_fence_operands(d);
  wgmma_fence();
  wgmma_e4m3_m64n128k32(d, wgmma_desc_sw128(ta), wgmma_desc_sw128(tb), accumulate);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(d);
  for (int j = 0; j < 16; ++j) {
    const int c0 = 8 * j + 2 * (l % 4);
    out[r0 * 128 + c0] = d[4 * j + 0];
    out[r0 * 128 + c0 + 1] = d[4 * j + 1];
    out[(r0 + 8) * 128 + c0] = d[4 * j + 2];
    out[(r0 + 8) * 128 + c0 + 1] = d[4 * j + 3];
  }
}

uint8_t e4m3(double v) {
  const __nv_fp8_e4m3 x(static_cast<float>(v));
  uint8_t b;
  std::memcpy(&b, &x, 1);
  return b;
}
double value(uint8_t b) {
  __nv_fp8_e4m3 x;
  std::memcpy(&x, &b, 1);
  return static_cast<float>(x);
}

struct Case {
  std::string what;
  std::vector<std::pair<int, std::pair<double, double>>> terms;  // (k, (a, b))
  float start = 0.0f;                                            // the fragment added to
};

// 2^e as a product of two e4m3 values (each at least 2^-9, the smallest subnormal).
std::pair<double, double> pow2(int e) {
  const int ea = e / 2, eb = e - ea;
  return {std::ldexp(1.0, ea), std::ldexp(1.0, eb)};
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Bits kept: 1 + 2^-k.
  for (int k = 10; k <= 18; ++k)
    v.push_back({"1 + 2^-" + std::to_string(k), {{0, {1, 1}}, {1, pow2(-k)}}});
  // Truncation or rounding: 1 + 0.75 · 2^-k and its negative, k around the bits kept.
  for (int k = 11; k <= 15; ++k) {
    v.push_back({"1 + 0.75 * 2^-" + std::to_string(k),
                 {{0, {1, 1}}, {1, pow2(-k - 1)}, {2, pow2(-k - 2)}}});
    auto [a1, b1] = pow2(-k - 1);
    auto [a2, b2] = pow2(-k - 2);
    v.push_back({"-(1 + 0.75 * 2^-" + std::to_string(k) + ")",
                 {{0, {-1, 1}}, {1, {-a1, b1}}, {2, {-a2, b2}}}});
  }
  // Cancellation: 256 - 240 + 2^-k (exact 16 + 2^-k). Aligned to 2^8 first, the small term
  // has fewer bits than after the difference is normalised.
  for (int k = 2; k <= 9; ++k)
    v.push_back(
        {"256 - 240 + 2^-" + std::to_string(k), {{0, {16, 16}}, {1, {-16, 15}}, {2, pow2(-k)}}});
  // Where a small term sits among the 32 products (groups of 4, 8 or 16 added first?).
  for (const int pos : {1, 3, 4, 7, 8, 15, 16, 31})
    v.push_back({"1 at k0, 2^-16 at k" + std::to_string(pos), {{0, {1, 1}}, {pos, pow2(-16)}}});
  v.push_back({"2^-16 x 4 at k1-4",
               {{0, {1, 1}}, {1, pow2(-18)}, {2, pow2(-18)}, {3, pow2(-18)}, {4, pow2(-18)}}});
  v.push_back({"2^-16 x 4 at k16-19",
               {{0, {1, 1}}, {16, pow2(-18)}, {17, pow2(-18)}, {18, pow2(-18)}, {19, pow2(-18)}}});
  // Adding to the fragment: 1 in d plus small products, and a large d plus 1.
  for (int k = 10; k <= 16; k += 2)
    v.push_back({"d = 1, + 2^-" + std::to_string(k), {{0, pow2(-k)}}, 1.0f});
  v.push_back({"d = 1, + 0.75 * 2^-13", {{0, pow2(-14)}, {1, pow2(-15)}}, 1.0f});
  v.push_back({"d = -1, - 0.75 * 2^-13",
               {{0, {-std::ldexp(1.0, -7), std::ldexp(1.0, -7)}},
                {1, {-std::ldexp(1.0, -7), std::ldexp(1.0, -8)}}},
               -1.0f});
  v.push_back({"d = 2^10, + 1 + 2^-4", {{0, {1, 1}}, {1, pow2(-4)}}, 1024.0f});
  v.push_back({"d = 1 + 2^-20, + 0", {{0, {0, 0}}}, 1.0f + 0x1p-20f});
  return v;
}

bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    std::fprintf(stderr, "fp8_accumulator_probe: %s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("fp8_accumulator_probe: no CUDA device here, nothing run\n");
    return 0;
  }
  const std::vector<Case> all = cases();
  for (size_t first = 0; first < all.size(); first += kRows) {
    std::vector<uint8_t> a(kRows * kK, 0), b(kRows * kK, 0);
    std::vector<float> start(kRows, 0.0f);
    std::vector<double> exact(kRows, 0.0);
    const size_t n = std::min<size_t>(kRows, all.size() - first);
    for (size_t i = 0; i < n; ++i) {
      const Case& c = all[first + i];
      start[i] = c.start;
      exact[i] = c.start;
      for (const auto& [k, ab] : c.terms) {
        a[i * kK + k] = e4m3(ab.first);
        b[i * kK + k] = e4m3(ab.second);
        exact[i] += value(a[i * kK + k]) * value(b[i * kK + k]);
      }
    }
    uint8_t *da = nullptr, *db = nullptr;
    float *ds = nullptr, *dout = nullptr;
    if (!check(cudaMalloc(&da, a.size()), "malloc") ||
        !check(cudaMalloc(&db, b.size()), "malloc") ||
        !check(cudaMalloc(&ds, kRows * sizeof(float)), "malloc") ||
        !check(cudaMalloc(&dout, kRows * 128 * sizeof(float)), "malloc"))
      return 1;
    if (!check(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice), "copy") ||
        !check(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice), "copy") ||
        !check(cudaMemcpy(ds, start.data(), kRows * sizeof(float), cudaMemcpyHostToDevice), "copy"))
      return 1;
    std::vector<float> out(kRows * 128);
    for (const int accumulate : {0, 1}) {
      probe_kernel<<<1, 128>>>(da, db, ds, accumulate, dout);
      if (!check(cudaDeviceSynchronize(), "probe")) return 1;
      if (!check(cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
                 "copy"))
        return 1;
      for (size_t i = 0; i < n; ++i) {
        const Case& c = all[first + i];
        if (accumulate == 0 && c.start != 0.0f) continue;  // the start value only when added
        const double want = exact[i] - (accumulate ? 0.0 : c.start);
        const double got = out[i * 128 + i];
        int e = 0;
        std::frexp(want, &e);
        std::printf("%-28s %s exact %.10g mma %.10g  diff %+.3f x 2^-20 (x 2^%d)\n", c.what.c_str(),
                    accumulate ? "acc" : "new", want, got, std::ldexp(got - want, 20 - (e - 1)),
                    e - 1);
      }
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(ds);
    cudaFree(dout);
  }
  return 0;
}
