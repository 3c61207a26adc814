// How fast L2 can feed the experts' down projection, with and without TMA multicast. A
// persistent CTA per SM moves down's operands in down's order (moe_fp8_tc_kernels.cu: a K block
// is 64 activation rows and 256 weight rows of 128 bytes, 40 KB, into a 5-slot ring; tiles expert
// by expert, weight tile by weight tile, an expert's row tiles adjacent) but computes nothing: one
// warp waits for each slot and frees it. Every expert has kRowTiles row tiles. Modes:
//   0  each CTA copies its own 40 KB a K block, taking tiles at a stride (gate·up's schedule);
//   1  2-CTA clusters taking an expert's row tiles in pairs: each CTA copies its 8 KB of
//      activations and half of the weight tile, multicast to both (24 KB copied a CTA);
//   2  as 1, each slot freed by a cluster-scope release on the peer's barrier (mode 1: CTA scope);
//   3  as 0, activations only (8 KB a K block);
//   4  as 0, each CTA taking its next tile from a counter (the kernel's down, session 30);
//   5  as 1, each cluster taking its next tile from a counter: rank 0 takes it and hands it to
//      rank 1 through a 2-slot ring in rank 1's shared memory.
//   tma_multicast_probe [steps]   time, delivered and copied bytes per mode.
// Down at 2.09 ms a launch on an H100 takes about 3,334 K blocks a CTA (bench/RESULTS.md,
// session 34): 0.63 us a K block with its MMAs.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_bench_util.h"
#include "ops/cuda/pipeline_ptx.cuh"
#include "ops/cuda/tma_ptx.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

using mls::bench::check;
using namespace mls::ops::cuda::kernels;

namespace {

// Thread-block clusters (no kernel of the project runs in clusters; these serve the probe).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// The shared::cluster address of shared address `addr` in the CTA of rank `rank`.
__device__ __forceinline__ uint32_t cluster_map(uint32_t addr, uint32_t rank) {
  uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(addr), "r"(rank));
  return out;
}
// An arrival on a barrier of the cluster at the default (CTA-scope) release.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The same releasing at cluster scope.
__device__ __forceinline__ void mbar_arrive_cluster_release(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar)
               : "memory");
}
__device__ __forceinline__ void st_cluster(uint32_t addr, uint32_t v) {
  asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
// mbar_wait acquiring at cluster scope.
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void fence_mbar_init_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}
// tma_load_2d into every CTA of the cluster whose bit is set in `mask`, completing on each one's
// barrier at the same shared address.
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const TmaMap* map, uint32_t bar,
                                                      int x, int y, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}

constexpr int kStages = 5, kABytes = 64 * 128, kBBytes = 256 * 128;
constexpr int kSmem = kStages * (kABytes + kBBytes) + 1024;
constexpr int kKBlocks = 16, kK = kKBlocks * 128;                // down's K = 2,048
constexpr int kExperts = 256, kRowTiles = 4, kWeightTiles = 24;  // N = 6,144
constexpr int64_t kActRows = int64_t{kExperts} * kRowTiles * 64;
constexpr int64_t kWeightRows = int64_t{kExperts} * kWeightTiles * 256;

// What each mode does (the list above): whether it runs in clusters, the bytes landing in a
// CTA's shared memory a K block, and those it copies itself.
__host__ __device__ constexpr bool clustered(int mode) {
  return mode == 1 || mode == 2 || mode == 5;
}
__host__ __device__ constexpr int delivered_bytes(int mode) {
  return mode == 3 ? kABytes : kABytes + kBBytes;
}
__host__ __device__ constexpr int copied_bytes(int mode) {
  return clustered(mode) ? kABytes + kBBytes / 2 : delivered_bytes(mode);
}

template <int kMode>
__global__ void __launch_bounds__(64, 1)
    probe_kernel(const __grid_constant__ TmaMap a_map, const __grid_constant__ TmaMap w_map,
                 const __grid_constant__ TmaMap w_half, int steps, int* counter) {
  constexpr bool kCluster = clustered(kMode);
  extern __shared__ uint8_t smem_raw[];
  __shared__ uint64_t full[kStages], empty[kStages], tile_full[2], tile_empty[2];
  __shared__ int tile_number[2];
  uint8_t* smem = align_smem_1024(smem_raw);
  const uint32_t a0 = smem_addr(smem), b0 = a0 + kStages * kABytes;
  const uint32_t rank = kCluster ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kCluster ? 2 : 1);
    }
    for (int s = 0; s < 2; ++s) {
      mbar_init(&tile_full[s], 1);
      mbar_init(&tile_empty[s], 1);
    }
    fence_proxy_async_smem();
    if constexpr (kCluster) fence_mbar_init_cluster();
  }
  if constexpr (kCluster)
    cluster_sync();
  else
    __syncthreads();
  const uint32_t full0 = smem_addr(full), empty0 = smem_addr(empty);
  // Tile t of this CTA (modes 1 and 2: of its cluster, whose two CTAs take row tiles 2p, 2p + 1).
  const int lanes = kCluster ? gridDim.x / 2 : gridDim.x,
            first = kCluster ? blockIdx.x / 2 : blockIdx.x;
  if (threadIdx.x == 0) {
    int t = 0;
    for (int i = 0; i < steps; ++i) {
      const int s = i % kStages, phase = (i / kStages) & 1;
      mbar_wait(empty0 + 8 * s, phase ^ 1);
      const int kb = i % kKBlocks;
      if (kMode == 4 && kb == 0) t = atomicAdd(counter, 1);
      if (kMode == 5 && kb == 0) {
        const int ts = (i / kKBlocks) & 1;
        const uint32_t tphase = (i / kKBlocks / 2) & 1;
        if (rank == 0) {  // take the cluster's tile; hand it to rank 1
          mbar_wait(smem_addr(tile_empty + ts), tphase ^ 1);
          t = atomicAdd(counter, 1);
          st_cluster(cluster_map(smem_addr(tile_number + ts), 1), static_cast<uint32_t>(t));
          mbar_arrive_cluster_release(cluster_map(smem_addr(tile_full + ts), 1));
        } else {
          mbar_wait_cluster(smem_addr(tile_full + ts), tphase);
          t = tile_number[ts];
          mbar_arrive_cluster(cluster_map(smem_addr(tile_empty + ts), 0));
        }
      }
      if (kMode != 4 && kMode != 5) t = first + (i / kKBlocks) * lanes;
      const int per = kCluster ? kRowTiles / 2 : kRowTiles;  // tiles of a weight tile
      const int m = kCluster ? 2 * (t % per) + static_cast<int>(rank) : t % per;
      const int n = (t / per) % kWeightTiles, e = (t / per / kWeightTiles) % kExperts;
      const int a_row = (e * kRowTiles + m) * 64, w_row = (e * kWeightTiles + n) * 256;
      const uint32_t bar = full0 + 8 * s;
      mbar_arrive_expect_tx(bar, delivered_bytes(kMode));
      tma_load_2d(a0 + s * kABytes, &a_map, bar, kb * 128, a_row);
      if constexpr (kCluster)
        tma_load_2d_multicast(b0 + s * kBBytes + rank * (kBBytes / 2), &w_half, bar, kb * 128,
                              w_row + 128 * rank, 0x3);
      else if constexpr (kMode == 0 || kMode == 4)
        tma_load_2d(b0 + s * kBBytes, &w_map, bar, kb * 128, w_row);
    }
  } else if (threadIdx.x == 32) {
    const uint32_t peer_empty0 = kCluster ? cluster_map(empty0, rank ^ 1) : 0;
    for (int i = 0; i < steps; ++i) {
      const int s = i % kStages, phase = (i / kStages) & 1;
      mbar_wait(full0 + 8 * s, phase);
      mbar_arrive(empty0 + 8 * s);
      if constexpr (kMode == 2)
        mbar_arrive_cluster_release(peer_empty0 + 8 * s);
      else if constexpr (kCluster)
        mbar_arrive_cluster(peer_empty0 + 8 * s);
    }
  }
  if constexpr (kCluster) {
    __syncwarp();
    cluster_sync();  // no CTA leaves while its peer's copies or arrivals may still reach it
  }
}

template <int kMode>
void run(const TmaMap& a, const TmaMap& w, const TmaMap& wh, int sms, int steps, int* counter) {
  auto* kernel = probe_kernel<kMode>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem), "smem");
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim = {clustered(kMode) ? 2u : 1u, 1, 1};
  cudaLaunchConfig_t config{};
  config.gridDim = {static_cast<unsigned>(sms / 2 * 2), 1, 1};
  config.blockDim = {64, 1, 1};
  config.dynamicSmemBytes = kSmem;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  check(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config), "occupancy");
  if (static_cast<int>(config.gridDim.x) > clusters * static_cast<int>(attr.val.clusterDim.x))
    config.gridDim.x = clusters * attr.val.clusterDim.x;
  cudaEvent_t t0, t1;
  check(cudaEventCreate(&t0), "event");
  check(cudaEventCreate(&t1), "event");
  float best = 1e30f;
  for (int rep = 0; rep < 4; ++rep) {
    check(cudaMemset(counter, 0, sizeof(int)), "counter");
    check(cudaEventRecord(t0), "record");
    check(cudaLaunchKernelEx(&config, kernel, a, w, wh, steps, counter), "launch");
    check(cudaEventRecord(t1), "record");
    check(cudaEventSynchronize(t1), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
    if (rep > 0 && ms < best) best = ms;  // the first warms L2 and the clocks
  }
  check(cudaEventDestroy(t0), "event");
  check(cudaEventDestroy(t1), "event");
  const double steps_all = static_cast<double>(config.gridDim.x) * steps;
  const double bytes = delivered_bytes(kMode) * steps_all, l2 = copied_bytes(kMode) * steps_all;
  std::printf("mode %d: %u CTAs, %.3f ms, %.2f us a step, delivered %.2f TB/s, copied %.2f TB/s\n",
              kMode, config.gridDim.x, best, 1e3 * best / steps, bytes / best / 1e9,
              l2 / best / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3334;  // about one launch of down
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "sms");
  void *act = nullptr, *wts = nullptr;
  check(cudaMalloc(&act, kActRows * kK), "act");
  check(cudaMalloc(&wts, kWeightRows * kK), "weights");
  check(cudaMemset(act, 1, kActRows * kK), "memset");
  check(cudaMemset(wts, 1, kWeightRows * kK), "memset");
  TmaMap a, w, wh;
  check(encode_tma_2d_u8(&a, act, kK, kActRows, kK, 128, 64), "map a");
  check(encode_tma_2d_u8(&w, wts, kK, kWeightRows, kK, 128, 256), "map w");
  check(encode_tma_2d_u8(&wh, wts, kK, kWeightRows, kK, 128, 128), "map w half");
  int* counter = nullptr;
  check(cudaMalloc(&counter, sizeof(int)), "counter");
  for (int rep = 0; rep < 2; ++rep) {
    run<0>(a, w, wh, sms, steps, counter);
    run<4>(a, w, wh, sms, steps, counter);
    run<1>(a, w, wh, sms, steps, counter);
    run<5>(a, w, wh, sms, steps, counter);
    run<2>(a, w, wh, sms, steps, counter);
    run<3>(a, w, wh, sms, steps, counter);
  }
  return 0;
}
