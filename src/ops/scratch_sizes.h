// The device scratch each op takes for one call, as functions of sizes alone. This is the one
// source of truth: the CUDA ops allocate exactly these sizes, their kernels plan their launches
// from the same functions, and meta mode counts them (ops/dispatch.h), so a machine without a
// GPU plans a GPU's memory to the byte. Plain constexpr C++ with no project header and no CUDA
// runtime call: kernel files (nvcc) include it too.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mls::ops::scratch {

constexpr int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// --- attention (absorbed MLA: one latent key head) ---------------------------------------------
// A query's key list is split at fixed boundaries (batch invariance, ARCHITECTURE.md); split
// queries keep fp32 partials (Dv outputs + max and sum per head and split), processed in
// query groups that fit kAttentionScratchFloats.
inline constexpr int64_t kAttentionKeysPerSplit = 2048;
inline constexpr int64_t kAttentionScratchFloats = int64_t{64} << 20;
inline constexpr int kAttentionMaxDv = 512;

struct AttentionSplits {
  int64_t splits = 1;
  int64_t group_T = 0;  // queries per launch
  int64_t floats = 0;   // scratch
};

// T queries of H heads over `key_heads` key heads of width Dv; n_list: the sparse list length
// (DSA) or the host bound on any query's key count.
constexpr AttentionSplits attention_splits(int64_t T, int64_t H, int64_t key_heads, int64_t Dv,
                                           int64_t n_list) {
  AttentionSplits s;
  s.group_T = T;
  if (key_heads != 1 || Dv > kAttentionMaxDv || T == 0) return s;
  s.splits = std::max<int64_t>(1, (n_list + kAttentionKeysPerSplit - 1) / kAttentionKeysPerSplit);
  if (s.splits > 1) {
    const int64_t per_query = s.splits * H * (Dv + 2);
    s.group_T = std::clamp<int64_t>(kAttentionScratchFloats / per_query, 1, T);
    s.floats = per_query * s.group_T;
  }
  return s;
}

// --- DSA indexer ----------------------------------------------------------------------------
// fp32 scores of a group of query rows against every key of the host bound, rows 16-byte
// aligned, in groups within kIndexerScoreBytes.
inline constexpr int64_t kIndexerScoreBytes = int64_t{256} << 20;

constexpr int64_t indexer_scores_ld(int64_t key_bound) {
  return (key_bound + 3) / 4 * 4;
}
constexpr int64_t indexer_rows_per_launch(int64_t key_bound, int64_t T) {
  return std::clamp<int64_t>(
      kIndexerScoreBytes / std::max<int64_t>(indexer_scores_ld(key_bound) * 4, 1), 1, T);
}
constexpr int64_t indexer_scratch_floats(int64_t T, int64_t key_bound, int64_t topk) {
  if (T == 0 || topk == 0) return 0;
  return indexer_rows_per_launch(key_bound, T) * std::max<int64_t>(indexer_scores_ld(key_bound), 1);
}

// --- block-FP8 linear -----------------------------------------------------------------------
// Activations quantised per token in groups of 128 (e4m3 rows padded to 16 bytes, then the f32
// group scales). (The weight's block scales in cuBLASLt's padded layout are made once at load:
// ops/linear.h, fp8_scale_rows_padded.)
constexpr int64_t fp8_act_bytes(int64_t T, int64_t K) {
  return T * round_up(K, 16) + (K + 127) / 128 * T * 4;
}
// Which token counts go to cuBLASLt (measured on the H200, see ops/cuda/linear_cuda.cc).
constexpr bool fp8_cublaslt_tokens(int64_t T) {
  return T > 32 || (T > 8 && T % 4 == 0);
}

// --- MoE alignment --------------------------------------------------------------------------
// One CTA groups small batches in shared memory; larger ones keep per-chunk expert counts.
// The one-CTA path: its warp count (per-warp counters fill at most 48 KiB of shared memory) and
// the largest problem it takes (two 32-pair steps per warp).
inline constexpr int kMoeOneCtaPairsPerWarp = 64;

constexpr int moe_one_cta_warps(int E) {
  const int nw = (48 * 1024 / 4 - (E + 1) - 32) / E;
  return nw < 32 ? nw : 32;
}
// The three-kernel path's pairs per warp: 128, more past 2048 warps (bounds the counters).
constexpr int moe_align_chunk(int n) {
  int chunk = (n + 2047) / 2048;
  chunk = (chunk + 31) / 32 * 32;
  return chunk < 128 ? 128 : chunk;
}
constexpr bool moe_align_one_cta(int n, int E) {
  return n <= moe_one_cta_warps(E) * kMoeOneCtaPairsPerWarp;
}
constexpr int64_t moe_align_ints(int64_t pairs, int E) {
  if (moe_align_one_cta(static_cast<int>(pairs), E)) return 0;
  const int chunk = moe_align_chunk(static_cast<int>(pairs));
  const int64_t W = (pairs + chunk - 1) / chunk;
  return W * E + E;
}

// --- Grouped FP8 experts (ops/moe_experts.h) ----------------------------------------------
// Steps of at most this many (token, expert) pairs run every routed expert in one launch per
// projection from device-side offsets (decode batches up to 256 at top-8); larger steps
// (prefills) group rows per expert on the host and run each expert's GEMMs.
inline constexpr int64_t kMoeGroupedMaxPairs = 2048;
// The pairs' quantised activations (hidden wide), then the SwiGLU output's (intermediate wide),
// each region 256-byte aligned, then the active-expert list (E + 1 ints).
constexpr int64_t moe_experts_fp8_bytes(int64_t pairs, int64_t hidden, int64_t inter, int64_t E) {
  return round_up(fp8_act_bytes(pairs, hidden), 256) + round_up(fp8_act_bytes(pairs, inter), 256) +
         4 * (E + 1);
}

// --- GEMM library ---------------------------------------------------------------------------
// What each rank's cuBLASLt state holds for its whole life: cuBLASLt's workspace, our skinny
// kernels' split-K partials and their counters.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

}  // namespace mls::ops::scratch
