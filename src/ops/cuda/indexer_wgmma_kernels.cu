// DSA indexer scores of prompt rows on warpgroup MMAs. A CTA takes QT consecutive query rows
// (a token group) and a chunk of their key positions. Keys are the M dimension (64 a tile), the
// group's QT · hp query rows (token-major, hp heads each, zero past Hi) the N = 256 dimension:
//   S[64 keys × 256] = K_tile · Q_groupᵀ: m64n256k16, 8 K steps over Di = 128, both operands
//     K-major in 128-byte-swizzled shared memory;
//   score[u, key] = Σ_h (w[u, h] · scale) · relu(S[key, u · hp + h]) in fp32.
// Same floats as the one-token kernel (indexer_topk_kernels.cu): lane l holds, for each of its
// two keys, heads 8j + 2(l % 4) + c of every token (the accumulator's columns), which are the
// heads of fragment row 2(l % 4) + c in that kernel's m16n8 fragments; it sums them in that
// kernel's expression and order, adds its two partials as that kernel's first shuffle does and
// shuffles the rest across l % 4 as it does across l / 4.
// Three warpgroups share the group's Q tile and take key tiles in turn, each through its own
// three-stage cp.async ring under its own named barrier, so their epilogues run beside each
// other's MMAs (three measured 10 % faster than two with four stages; the accumulators leave
// no room for more). A row's block-table entry is loaded a tile before its copy is issued.
// Groups straddling sequences take their runs of rows of one sequence one after another, each
// over the keys of its sequence (the other rows' columns are computed and not written).
#include <cuda_bf16.h>

#include <algorithm>

#include "ops/cuda/device_facts.h"
#include "ops/cuda/indexer_keys.cuh"
#include "ops/cuda/indexer_wgmma_kernels.h"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/pipeline_ptx.cuh"
#include "ops/cuda/wgmma_ptx.cuh"

namespace mls::ops::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kDi = 128;
constexpr int kKeys = 64;  // keys per tile: the MMA's M
constexpr int kN = 256;    // query rows of a group: the MMA's N
constexpr int kWarpgroups = 3;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kStages = 3;                 // key tiles in flight per warpgroup
constexpr int kChunks = kDi / 8;           // 16-byte chunks of a row
constexpr int kQBlockBytes = kN * 128;     // one 64-column block of the Q tile
constexpr int kKBlockBytes = kKeys * 128;  // one 64-column block of a key tile
constexpr int kStageBytes = kDi / 64 * kKBlockBytes;
constexpr int kQOff = 0;
constexpr int kKOff = kQOff + kDi / 64 * kQBlockBytes;
constexpr int kWOff = kKOff + kWarpgroups * kStages * kStageBytes;  // float [kN]
constexpr int kNOff = kWOff + kN * 4;                               // int [kN / 16]: rows' keys
constexpr int kSmemBytes = kNOff + kN / 16 * 4 + 1024 /* alignment */;

template <int HP>
__global__ void __launch_bounds__(kThreads, 1)
    index_score_wgmma_kernel(const IndexerParams p, int t0, int nt, int tiles_per_cta,
                             float* scores, int64_t ld) {
  constexpr int QT = kN / HP;
  pdl_begin();
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = align_smem_1024(smem_raw);
  unsigned char* q_s = smem + kQOff;
  float* w_s = reinterpret_cast<float*>(smem + kWOff);
  int* n_s = reinterpret_cast<int*>(smem + kNOff);

  // Tokens tb .. tb + cnt − 1; the last tokens (longest rows) go to the first CTAs.
  const int tb = t0 + static_cast<int>(gridDim.x - 1 - blockIdx.x) * QT;
  const int cnt = t0 + nt - tb < QT ? t0 + nt - tb : QT;
  const int tid = threadIdx.x, wg = tid >> 7, wtid = tid & 127, warp = wtid >> 5, lane = tid & 31;
  const int64_t key0 = static_cast<int64_t>(blockIdx.y) * tiles_per_cta * kKeys;
  const bf16* kbase = static_cast<const bf16*>(p.k);

  // Q rows u · HP + h (zero past Hi and cnt), their head weights, and each row's valid keys.
  for (int c = tid; c < kN * kChunks; c += kThreads) {
    const int r = c / kChunks, col = c % kChunks, u = r / HP, h = r % HP;
    const bool in = u < cnt && h < p.Hi;
    const bf16* src = static_cast<const bf16*>(p.q) + (tb + u) * p.q_st + h * p.q_sh + col * 8;
    cp_async16(q_s + (col >> 3) * kQBlockBytes + swizzle128(r, col & 7), in ? src : kbase,
               in ? 16 : 0);
  }
  cp_async_commit();
  for (int r = tid; r < kN; r += kThreads) {
    const int u = r / HP, h = r % HP;
    const int64_t i = static_cast<int64_t>(tb + u) * p.w_st + h;
    float x = 0.0f;
    if (u < cnt && h < p.Hi) x = head_weight(p, i);
    w_s[r] = x;
  }
  if (tid < QT) n_s[tid] = tid < cnt ? static_cast<int>(valid_keys(p, tb + tid)) : 0;
  cp_async_wait<0>();
  fence_proxy_async_smem();
  __syncthreads();
  int n_any = 0;
#pragma unroll
  for (int u = 0; u < QT; ++u) n_any = max(n_any, n_s[u]);
  if (key0 >= n_any) return;

  // This warpgroup's stages. A lane pair copies key row wtid / 2 of each tile, each lane every
  // other 16-byte chunk, so that each copy of a warp fills whole 32-byte sectors (one chunk a lane
  // left half of each sector unread: 45 % of the kernel's L2 sectors, bench/RESULTS.md session 32).
  unsigned char* stages = smem + kKOff + wg * kStages * kStageBytes;
  const int ld_row = wtid >> 1, ld_odd = wtid & 1;
  const uint64_t q_desc = wgmma_desc_sw128(q_s);
  const int g = lane >> 2, q4 = lane & 3;
  const int r0 = warp * 16 + g;  // this thread's keys in a tile: r0 and r0 + 8
  const bool q_odd = q4 & 1, q_high = q4 & 2;
  const int u_lane = (q_odd ? QT / 2 : 0) + (q_high ? QT / 4 : 0);
  float acc[128];

  // Runs of tokens of one sequence [g0, g1), one after another: a run's keys are the same rows
  // (those of its first token).
  for (int g0 = 0, g1 = 0; g0 < cnt; g0 = g1) {
    g1 = run_end(p, tb, g0, cnt);
    int n_run = 0;
    for (int u = g0; u < g1; ++u) n_run = max(n_run, n_s[u]);
    if (key0 >= n_run) continue;
    const int64_t seq = p.block_tables ? p.token_seq[tb + g0] : 0;
    const int64_t left = (n_run - key0 + kKeys - 1) / kKeys;
    const int ntiles = static_cast<int>(left < tiles_per_cta ? left : tiles_per_cta);
    // This warpgroup's tiles: local tile i is tile wg + kWarpgroups · i.
    const int mine = ntiles > wg ? (ntiles - wg + kWarpgroups - 1) / kWarpgroups : 0;
    auto first_key = [&](int i) {
      return key0 + static_cast<int64_t>(wg + kWarpgroups * i) * kKeys;
    };
    auto pending_of = [&](int i) {
      const int64_t j = first_key(i) + ld_row;
      PendingRow e{-1, 0};
      if (i < mine && j < n_run) e = paged_lookup(p, seq, static_cast<int32_t>(j));
      return e;
    };
    auto issue = [&](int i, int64_t row) {
      unsigned char* dst = stages + (i % kStages) * kStageBytes;
      const bf16* src = row >= 0 ? kbase + row * p.k_sr + ld_odd * 8 : kbase;
#pragma unroll
      for (int c = 0; c < kChunks / 2; ++c)  // chunk 2c + ld_odd: 64-column block c / 4
        cp_async16(dst + (c >> 2) * kKBlockBytes + swizzle128(ld_row, (2 * c + ld_odd) & 7),
                   src + c * 16, row >= 0 ? 16 : 0);
    };

    // The previous run's reads of the stages are over.
    __syncthreads();
    {
      PendingRow first[kStages - 1];
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i) first[i] = pending_of(i);
#pragma unroll
      for (int i = 0; i < kStages - 1; ++i) {
        if (i < mine) issue(i, paged_resolve(p, first[i]));
        cp_async_commit();
      }
    }
    PendingRow next = pending_of(kStages - 1);  // at the top of iteration i: of tile i + S − 1
    // The sums this lane stores (the epilogue's butterfly): tokens u_lane .. u_lane + QT / 4 − 1,
    // each up to its keys' end, none outside the run.
    int key_end[QT / 4];
#pragma unroll
    for (int t = 0; t < QT / 4; ++t) {
      const int u = u_lane + t;
      key_end[t] = u >= g0 && u < g1 ? n_s[u] : 0;
    }
    float* const srow = scores + static_cast<int64_t>(tb + u_lane - t0) * ld;

    for (int i = 0; i < mine; ++i) {
      cp_async_wait<kStages - 2>();
      fence_proxy_async_smem();
      // Tile i visible to the warpgroup; its reads of tile i − 1's stage are over.
      named_barrier_sync(1 + wg, 128);
      if (i + kStages - 1 < mine) issue(i + kStages - 1, paged_resolve(p, next));
      cp_async_commit();
      next = pending_of(i + kStages);

      const uint64_t k_desc = wgmma_desc_sw128(stages + (i % kStages) * kStageBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kDi / 16; ++kk) {
        const int step = kk & 3, block = kk >> 2;  // 16-byte units: 2 per K step of 16
        wgmma_bf16_m64n256k16<0>(acc, k_desc + block * (kKBlockBytes >> 4) + step * 2,
                                 q_desc + block * (kQBlockBytes >> 4) + step * 2, kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operands(acc);

      // Each (token, key) sum of this lane's two columns (all of the group's tokens: rows past a
      // token's keys are not stored), then the quad's four lanes' sums added pairwise in a
      // butterfly that halves the sums a lane keeps at each of its two rounds. A lane adds its own
      // sum and its partner's, as the one-token kernel's shuffles do, and float addition
      // commutes: every lane of the quad forms the same floats. Each lane then stores QT / 2 sums
      // (QT / 4 tokens × its two keys); one shuffle, one add and one store a sum had left the
      // epilogue waiting on its chains (bench/RESULTS.md, session 32).
      float v[2 * QT];  // [2u + hr]: token u, key r0 + 8 hr
#pragma unroll
      for (int u = 0; u < QT; ++u)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          float part[2];
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            float s = 0.0f;
#pragma unroll
            for (int mb = 0; mb < HP / 16; ++mb) {
              const int j = u * (HP / 8) + 2 * mb;
              const float* w = w_s + u * HP + 16 * mb + 2 * q4 + c;
              s = fmaf(w[8], fmaxf(acc[4 * j + 4 + 2 * hr + c], 0.0f),
                       fmaf(w[0], fmaxf(acc[4 * j + 2 * hr + c], 0.0f), s));
            }
            part[c] = s;
          }
          v[2 * u + hr] = part[0] + part[1];
        }
      float h1[QT];  // sums [QT·odd, QT·odd + QT) of v
#pragma unroll
      for (int k = 0; k < QT; ++k) {
        const float send = q_odd ? v[k] : v[QT + k], keep = q_odd ? v[QT + k] : v[k];
        h1[k] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
      }
      const int64_t tile_key = first_key(i), key = tile_key + r0;
#pragma unroll
      for (int k = 0; k < QT / 2; ++k) {
        const float send = q_high ? h1[k] : h1[QT / 2 + k], keep = q_high ? h1[QT / 2 + k] : h1[k];
        const float sum = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        const int t = k >> 1, hr = k & 1;  // this lane's token u_lane + t, key r0 + 8 hr
        if (key + 8 * hr < key_end[t]) srow[t * ld + key + 8 * hr] = sum;
      }
    }
  }
  cp_async_wait<0>();
}

template <int HP>
cudaError_t launch_hp(const IndexerParams& p, int dev, int sms, int t0, int nt, float* scores,
                      int64_t ld, cudaStream_t stream) {
  auto kernel = index_score_wgmma_kernel<HP>;
  const cudaError_t e = allow_optin_smem(dev, reinterpret_cast<const void*>(kernel));
  if (e != cudaSuccess) return e;
  // Enough CTAs per group to fill the SMs once; a long step keeps whole rows.
  const int64_t groups = (nt + kN / HP - 1) / (kN / HP);
  const int64_t tiles = std::max<int64_t>(1, (p.key_bound + kKeys - 1) / kKeys);
  const int64_t want = std::clamp<int64_t>((sms + groups - 1) / groups, 1, tiles);
  const int64_t per_cta = (tiles + want - 1) / want;
  const int64_t chunks = (tiles + per_cta - 1) / per_cta;
  launch(kernel, dim3(static_cast<unsigned>(groups), static_cast<unsigned>(chunks)), kThreads,
         kSmemBytes, stream, p, t0, nt, static_cast<int>(per_cta), scores, ld);
  return cudaGetLastError();
}

}  // namespace

bool indexer_wgmma_applies(const IndexerParams& p, int device) {
  DeviceFacts f;
  if (device_facts(device, &f) != cudaSuccess || f.smem_optin < kSmemBytes) return false;
  const int hp = head_blocks(p.Hi) * 16;
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return p.Di == kDi && (hp == 16 || hp == 32 || hp == 64) && aligned(p.q) && aligned(p.k) &&
         p.q_st % 8 == 0 && p.q_sh % 8 == 0 && p.k_sr % 8 == 0;
}

cudaError_t launch_indexer_scores_wgmma(const IndexerParams& p, int t0, int nt, float* scores,
                                        int64_t ld, cudaStream_t stream) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  DeviceFacts f;
  if (e == cudaSuccess) e = device_facts(dev, &f);
  if (e != cudaSuccess) return e;
  const int hp = head_blocks(p.Hi) * 16;
  return hp == 16   ? launch_hp<16>(p, dev, f.sms, t0, nt, scores, ld, stream)
         : hp == 32 ? launch_hp<32>(p, dev, f.sms, t0, nt, scores, ld, stream)
                    : launch_hp<64>(p, dev, f.sms, t0, nt, scores, ld, stream);
}

}  // namespace mls::ops::cuda::kernels
