#include "ops/scratch_sizes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

namespace mls::ops::scratch {
namespace {

int64_t ctas(const AttentionSplits& s, int64_t T, int64_t H) {
  return T * s.splits * ((H + s.head_group - 1) / s.head_group);
}

// GLM-5's decode, 64 heads of Dv 512 over 2,048 chosen keys: 64-head CTAs split for at most
// kAttentionWideTargetCtas, and a large step in one CTA a query without partials. 16 heads
// (DeepSeek-V3.2 at tensor-parallel 8): 16-head CTAs split for kAttentionTargetCtas.
TEST(AttentionSplits, SmallDsaStepsFillTheGpu) {
  struct Want {
    int64_t T, H, head_group, keys_per_split, splits;
  };
  for (const Want& w : {Want{1, 64, 64, kAttentionMinKeysPerSplit, 32}, Want{8, 64, 64, 128, 16},
                        Want{64, 64, 64, 1024, 2}, Want{256, 64, 64, 2048, 1},
                        Want{1, 16, 16, kAttentionMinKeysPerSplit, 32}}) {
    SCOPED_TRACE(testing::Message() << "T " << w.T << " H " << w.H);
    const AttentionSplits s = attention_splits(w.T, w.H, 1, 512, 2048, true, false);
    EXPECT_EQ(s.head_group, w.head_group);
    EXPECT_EQ(s.keys_per_split, w.keys_per_split);
    EXPECT_EQ(s.splits, w.splits);
    EXPECT_EQ(s.floats, w.splits > 1 ? w.splits * w.H * (512 + 2) * w.T : 0);
    EXPECT_LE(ctas(s, w.T, w.H),
              w.head_group == 64 ? std::max(kAttentionWideTargetCtas, w.T) : kAttentionTargetCtas);
  }
}

TEST(AttentionSplits, EveryCutCoversTheListInWholeTiles) {
  for (bool sparse : {true, false})
    for (int64_t H : {8, 16, 32, 64, 128})
      for (int64_t T : {1, 2, 3, 8, 13, 64, 255, 256, 4096})
        for (int64_t n : {1, 31, 100, 2048, 4096, 163840}) {
          const AttentionSplits s = attention_splits(T, H, 1, 512, n, sparse, false);
          SCOPED_TRACE(testing::Message()
                       << "sparse " << sparse << " H " << H << " T " << T << " n " << n);
          EXPECT_EQ(s.keys_per_split % 32, 0);
          EXPECT_GE(s.keys_per_split, sparse ? kAttentionMinKeysPerSplit : kAttentionKeysPerSplit);
          EXPECT_LE(s.keys_per_split, kAttentionKeysPerSplit);
          EXPECT_GE(s.splits * s.keys_per_split, n);
          EXPECT_LT((s.splits - 1) * s.keys_per_split, n);  // no split is empty for all queries
          EXPECT_TRUE(s.head_group == 16 || s.head_group == 32 || s.head_group == 64);
          // Narrow CTAs or close boundaries only where the wide cut leaves the GPU short.
          const int64_t wide = attention_wide_head_group(H);
          if (T * ((H + wide - 1) / wide) >= kAttentionTargetCtas) {
            EXPECT_EQ(s.head_group, wide);
            EXPECT_EQ(s.keys_per_split, kAttentionKeysPerSplit);
          }
          if (s.splits > 1) {
            EXPECT_GE(s.group_T, 1);
            EXPECT_EQ(s.floats, s.splits * H * (512 + 2) * s.group_T);
            EXPECT_LE(s.floats, std::max(kAttentionScratchFloats, s.splits * H * (512 + 2)));
          }
        }
}

// A graph step bounds a dense list by max_model_len, its eager step by the longest row: both
// must cut each query alike (the same boundaries and head group), whatever their bounds.
TEST(AttentionSplits, DenseCutsDependOnTheStepSizeOnly) {
  for (int64_t T : {1, 8, 64, 256})
    for (int64_t n : {100, 4096, 163840}) {
      const AttentionSplits s = attention_splits(T, 64, 1, 512, n, false, false);
      const AttentionSplits ref = attention_splits(T, 64, 1, 512, 1, false, false);
      EXPECT_EQ(s.keys_per_split, kAttentionKeysPerSplit);
      EXPECT_EQ(s.head_group, ref.head_group) << "T " << T << " n " << n;
    }
}

// Batch invariance: one cut for every step (the demo model's 8 heads over 256 chosen keys,
// GLM-5's 64 over 2,048, and dense lists up to 160k keys): the wide head group, DSA lists split
// every kAttentionInvariantKeysPerSplit keys, dense lists at the fixed boundaries; the scratch
// still holds whole query groups within the cap.
TEST(AttentionSplits, InvariantCutsAreOneCutForEveryStep) {
  for (bool sparse : {true, false})
    for (const auto& [H, n] : {std::pair<int64_t, int64_t>{8, 256}, {64, 2048}, {64, 163840}}) {
      const int64_t kps = sparse ? kAttentionInvariantKeysPerSplit : kAttentionKeysPerSplit;
      for (int64_t T : {1, 2, 64, 256, 8192}) {
        SCOPED_TRACE(testing::Message()
                     << "sparse " << sparse << " H " << H << " n " << n << " T " << T);
        const AttentionSplits s = attention_splits(T, H, 1, 512, n, sparse, true);
        EXPECT_EQ(s.keys_per_split, kps);
        EXPECT_EQ(s.splits, (n + kps - 1) / kps);
        EXPECT_EQ(s.head_group, attention_wide_head_group(H));
        if (s.splits > 1) {
          EXPECT_EQ(s.floats, s.splits * H * (512 + 2) * s.group_T);
          EXPECT_LE(s.floats, std::max(kAttentionScratchFloats, s.splits * H * (512 + 2)));
        }
      }
    }
  // Without it, the same list is cut by the step's size.
  EXPECT_NE(attention_splits(1, 64, 1, 512, 2048, true, false).splits,
            attention_splits(8192, 64, 1, 512, 2048, true, false).splits);
}

// Key heads other than one (the expanded path) and values too wide for the latent kernel are
// never split.
TEST(AttentionSplits, OtherShapesAreNotSplit) {
  EXPECT_EQ(attention_splits(1, 8, 8, 64, 4096, false, false).splits, 1);
  EXPECT_EQ(attention_splits(1, 64, 1, kAttentionMaxDv + 1, 4096, true, false).splits, 1);
  EXPECT_EQ(attention_splits(0, 64, 1, 512, 4096, true, false).floats, 0);
}

// Calls of few rows split their greedy rows into slices of at least kSampleMinSlice logits,
// within kSampleTargetCtas CTAs; wide calls keep one CTA per row and no scratch.
TEST(SampleSplits, FewRowsFillTheGpuWideCallsAreNotSplit) {
  EXPECT_EQ(sample_greedy_splits(1, 154880), kSampleTargetCtas);
  EXPECT_EQ(sample_greedy_splits(8, 154880), kSampleTargetCtas / 8);
  EXPECT_EQ(sample_greedy_splits(1, 1000), 3);
  for (int64_t R : {1, 2, 3, 8, 100, 128, 129, 256, 300})
    for (int64_t V : {1, 255, 256, 1000, 154880, 262144}) {
      const int64_t s = sample_greedy_splits(R, V);
      SCOPED_TRACE(testing::Message() << "R " << R << " V " << V);
      EXPECT_GE(s, 1);
      if (s > 1) {
        EXPECT_LE(R * s, kSampleTargetCtas);
        EXPECT_GE(V / s, kSampleMinSlice);
        EXPECT_EQ(sample_scratch_floats(R, V), R * s * kSamplePartialFloats);
      } else {
        EXPECT_EQ(sample_scratch_floats(R, V), 0);
      }
    }
  EXPECT_EQ(sample_greedy_splits(kSampleTargetCtas, 154880), 1);
}

}  // namespace
}  // namespace mls::ops::scratch
