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
// How a step's attention is cut into CTAs, from sizes alone: a query's key list is split at
// boundaries every `keys_per_split` keys and its heads are taken `head_group` at a time. Split
// queries keep fp32 partials (Dv outputs + max and sum per head and split), processed in query
// groups that fit kAttentionScratchFloats.
//
// Large steps fill the GPU with queries: boundaries every kAttentionKeysPerSplit keys and all
// heads (up to 64) in one CTA. A step of few queries would leave most SMs idle (one decode token
// over 2,048 chosen keys was one CTA: 250 µs a layer on the H200), so it aims at
// kAttentionTargetCtas CTAs: a DSA list first takes closer boundaries (down to
// kAttentionSplitStep keys; partials are cheaper than re-reading keys), then narrower head groups
// (16) and boundaries down to kAttentionMinKeysPerSplit. A DSA list of over 32 heads keeps its
// 64-head CTAs instead (at the DeepSeek/GLM latent shape, the warpgroup-MMA kernel) and takes
// boundaries down to kAttentionMinKeysPerSplit aiming at only kAttentionWideTargetCtas, as each
// such split writes 64 partial rows: GLM-5's 2,048 keys at batch 1 / 8 / 64 took 14.7 / 54.0 /
// 94.3 µs cut for 256 CTAs (16 heads wide below 64 queries) and take 12.2 / 22.9 / 84.3 µs so
// (H200, bench/attention_benchmark). The cut depends on the step's query count, as the GEMMs'
// kernels do, never on the queries' contents: rows of steps of the same size (a graph bucket and
// its eager step) compute alike. A dense list keeps fixed boundaries and chooses its head group
// from the query count alone, since a graph step bounds its keys by max_model_len and an eager
// step by its longest row; a DSA list is index_topk wide in both.
//
// Batch invariance (`invariant`, --batch-invariant): one cut for every step, so a query's splits
// and head group, hence its bits, depend on nothing else in its step (a prefix-cached prompt row
// then equals the row its decode step computed): the wide head group, and DSA lists split every
// kAttentionInvariantKeysPerSplit keys. Small steps then fill fewer SMs and large ones write
// partials (bench/attention_benchmark measures both).
inline constexpr int64_t kAttentionKeysPerSplit = 2048;
inline constexpr int64_t kAttentionSplitStep = 256;
inline constexpr int64_t kAttentionMinKeysPerSplit = 64;  // two 32-key tiles
inline constexpr int64_t kAttentionInvariantKeysPerSplit = 512;
static_assert(kAttentionInvariantKeysPerSplit % 32 == 0 &&
              kAttentionInvariantKeysPerSplit <= kAttentionKeysPerSplit);
// About two CTAs per SM of an H200: a fixed count, not the device's, so meta mode plans alike.
// 64-head CTAs: about one per SM.
inline constexpr int64_t kAttentionTargetCtas = 256;
inline constexpr int64_t kAttentionWideTargetCtas = 128;
inline constexpr int64_t kAttentionScratchFloats = int64_t{64} << 20;
inline constexpr int kAttentionMaxDv = 512;

// Heads per CTA when the step has queries enough to fill the GPU: all of them, up to 64.
constexpr int64_t attention_wide_head_group(int64_t H) {
  return H <= 16 ? 16 : H <= 32 ? 32 : 64;
}

struct AttentionSplits {
  int64_t splits = 1;
  int64_t keys_per_split = kAttentionKeysPerSplit;
  int64_t head_group = 64;  // heads per CTA: 16, 32 or 64
  int64_t group_T = 0;      // queries per launch
  int64_t floats = 0;       // scratch
};

// T queries of H heads over `key_heads` key heads of width Dv; n_list: the DSA list width
// (`sparse`) or the host bound on any query's key count.
constexpr AttentionSplits attention_splits(int64_t T, int64_t H, int64_t key_heads, int64_t Dv,
                                           int64_t n_list, bool sparse, bool invariant) {
  AttentionSplits s;
  s.group_T = T;
  if (key_heads != 1 || Dv > kAttentionMaxDv || T == 0) return s;
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t n = std::max<int64_t>(n_list, 1);
  s.splits = ceil_div(n, kAttentionKeysPerSplit);
  s.head_group = attention_wide_head_group(H);
  // CTAs per query with this cut (a dense list's splits do not count: see above).
  auto per_query = [&] { return (sparse ? s.splits : 1) * ceil_div(H, s.head_group); };
  auto split_closer = [&](int64_t min_keys, int64_t target) {
    const int64_t want = std::max(ceil_div(target, T * per_query()), int64_t{1});
    s.keys_per_split = round_up(std::max(ceil_div(n, want * s.splits), min_keys), 32);
    s.keys_per_split = std::min(s.keys_per_split, kAttentionKeysPerSplit);
    s.splits = ceil_div(n, s.keys_per_split);
  };
  if (invariant) {
    if (sparse) {
      s.keys_per_split = kAttentionInvariantKeysPerSplit;
      s.splits = ceil_div(n, s.keys_per_split);
    }
  } else if (sparse && s.head_group == 64) {
    if (T * per_query() < kAttentionWideTargetCtas)
      split_closer(kAttentionMinKeysPerSplit, kAttentionWideTargetCtas);
  } else {
    if (sparse && T * per_query() < kAttentionTargetCtas)
      split_closer(kAttentionSplitStep, kAttentionTargetCtas);
    if (T * per_query() < kAttentionTargetCtas) {
      s.head_group = 16;
      if (sparse) split_closer(kAttentionMinKeysPerSplit, kAttentionTargetCtas);
    }
  }
  if (s.splits > 1) {
    const int64_t floats_per_query = s.splits * H * (Dv + 2);
    s.group_T = std::clamp<int64_t>(kAttentionScratchFloats / floats_per_query, 1, T);
    s.floats = floats_per_query * s.group_T;
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
constexpr int64_t fp8_act_ld(int64_t K) {
  return round_up(K, 16);
}
constexpr int64_t fp8_act_bytes(int64_t T, int64_t K) {
  return T * fp8_act_ld(K) + (K + 127) / 128 * T * 4;
}
// Which token counts go to cuBLASLt (measured on the H200, see ops/cuda/linear_cuda.cc).
constexpr bool fp8_cublaslt_tokens(int64_t T) {
  return T > 32 || (T > 8 && T % 4 == 0);
}
// The leading tokens of T that cuBLASLt takes when it has an algorithm (whole 128-wide K blocks,
// a multiple of 4 tokens): their activation scales are laid out for it (ops/fp8_input.h).
constexpr int64_t fp8_cublaslt_lead(int64_t T, int64_t K) {
  return fp8_cublaslt_tokens(T) && K % 128 == 0 ? T / 4 * 4 : 0;
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
// Steps of at most this many (token, expert) pairs run the grouped experts' skinny kernel, batch
// invariant (decode batches up to 256 at top-8); larger steps (prefill) the tensor-core one.
inline constexpr int64_t kMoeSkinnyMaxPairs = 2048;
// A TMA tensor map (CUtensorMap), kept 128-byte aligned in global memory.
inline constexpr int64_t kTmaMapBytes = 128;
// The experts' tensor-core kernel's workspace: its weight maps (two per expert: gate and up, or
// down alone), then its tile counter in a map-sized unit of its own.
constexpr int64_t moe_fp8_tc_counter_offset(int64_t E) {
  return 2 * E * kTmaMapBytes;
}
constexpr int64_t moe_fp8_tc_workspace_bytes(int64_t E) {
  return moe_fp8_tc_counter_offset(E) + kTmaMapBytes;
}
// The pairs' quantised activations (hidden wide), then the SwiGLU output's (intermediate wide),
// each region 256-byte aligned, then the active-expert list (E + 1 ints), then the tensor-core
// kernel's workspace (128-byte aligned).
constexpr int64_t moe_experts_fp8_tc_offset(int64_t pairs, int64_t hidden, int64_t inter,
                                            int64_t E) {
  return round_up(round_up(fp8_act_bytes(pairs, hidden), 256) +
                      round_up(fp8_act_bytes(pairs, inter), 256) + 4 * (E + 1),
                  kTmaMapBytes);
}
constexpr int64_t moe_experts_fp8_bytes(int64_t pairs, int64_t hidden, int64_t inter, int64_t E) {
  return moe_experts_fp8_tc_offset(pairs, hidden, inter, E) + moe_fp8_tc_workspace_bytes(E);
}

// --- sampling -------------------------------------------------------------------------------
// A call of few rows would leave most SMs idle with one CTA per row (one greedy row of 154,880
// logits: 45 µs on the H200), so its greedy rows are cut into slices of at least
// kSampleMinSlice logits, up to kSampleTargetCtas CTAs in all (a fixed count, not the device's,
// so that meta mode plans alike); each slice leaves its max, first argmax and sum of exp
// (16 bytes) for the row's CTA to combine. Sampled rows keep one CTA each.
inline constexpr int64_t kSampleTargetCtas = 256;
inline constexpr int64_t kSampleMinSlice = 256;
inline constexpr int64_t kSamplePartialFloats = 4;

// Slices per greedy row of a call of R rows of V logits (1: one CTA per row, no scratch).
constexpr int64_t sample_greedy_splits(int64_t R, int64_t V) {
  if (R <= 0) return 1;
  const int64_t want = kSampleTargetCtas / R;
  return std::max<int64_t>(std::min(want, V / kSampleMinSlice), 1);
}
// Split calls have at most kSampleTargetCtas / 2 rows: one launch of the sampling kernel.
constexpr int64_t sample_scratch_floats(int64_t R, int64_t V) {
  const int64_t splits = sample_greedy_splits(R, V);
  return splits > 1 ? R * splits * kSamplePartialFloats : 0;
}

// --- GEMM library ---------------------------------------------------------------------------
// What each rank's cuBLASLt state holds for its whole life: cuBLASLt's workspace, our skinny
// kernels' split-K partials and their counters.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

}  // namespace mls::ops::scratch
