// The DSA indexer's kernels (indexer_topk_kernels.cu, indexer_wgmma_kernels.cu) run by the CPU
// emulator against their contract evaluated exactly.
// Scores: score[t, j] = Σ_h w[t, h] · relu(scale · q[t, h] · k[j]) for the positions
// j < min(q_pos + 1, row_len, key_bound) of query t, nothing written past them; the token-group
// kernel on warpgroup MMAs in groups of 16, 8 and 4 rows (heads padded to 16, 32 and 64), groups
// straddling sequences, rows cut short by row_len, a sequence out of range, paged and unpaged
// keys, persistent CTAs that take many key tiles through each warpgroup's ring.
// Top-k (launch_indexer_topk, scores then selection): each row's topk highest-scoring positions,
// ties to the lower position, listed ascending, then -1s; the one-token and the mma.sync
// token-group score kernels, the register selection of rows up to 8,192 keys and the radix
// selection of longer ones, with rows cached in shared memory and not.
//
// Exactness: with integer-valued q, k and w and a power-of-two scale every product and sum is an
// integer or a small binary fraction below 2^24, exact in fp32 whatever the order (as in
// ops_cuda_attention_test's indexer cases), so the scores must equal the reference bit for bit,
// and with so few distinct values the selections are full of ties.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "ops/cuda/emu/cta_runtime.h"
#include "ops/cuda/indexer_topk_kernels.h"
#include "ops/cuda/indexer_wgmma_kernels.h"

namespace mls::ops::cuda::kernels {
namespace {

constexpr int kDi = 128;
using bf16 = __nv_bfloat16;

struct Case {
  int heads = 64;
  int ctx = 150;  // positions of each sequence's cache
  int seqs = 1;
  int block_size = 16;  // 0: unpaged (one sequence, rows = positions)
  std::vector<int32_t> q_pos, token_seq, row_len;
  int sms = 0;   // the emulated device's multiprocessors: 0, an H200's 132
  int topk = 0;  // > 0: launch_indexer_topk (scores, then the selection)
  uint32_t seed = 1;
};

std::vector<bf16> ints_bf16(size_t n, std::mt19937& g, int r) {
  std::uniform_int_distribution<int> d(-r, r);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(static_cast<float>(d(g)));
  return v;
}

void check(const Case& c) {
  std::mt19937 g(c.seed);
  const int T = static_cast<int>(c.q_pos.size());
  const int blocks_per_seq = c.block_size ? (c.ctx + c.block_size - 1) / c.block_size : 0;
  const int64_t rows = c.block_size ? int64_t{c.seqs} * blocks_per_seq * c.block_size : c.ctx;
  const std::vector<bf16> q = ints_bf16(size_t{1} * T * c.heads * kDi, g, 3);
  const std::vector<bf16> k = ints_bf16(rows * kDi, g, 3);
  std::vector<float> w(size_t{1} * T * c.heads);
  std::uniform_int_distribution<int> wd(-2, 3);
  for (auto& x : w) x = static_cast<float>(wd(g));
  std::vector<int32_t> table(c.block_size ? c.seqs * blocks_per_seq : 0);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), g);
  std::vector<int32_t> q_pos = c.q_pos, token_seq = c.token_seq, row_len = c.row_len;
  if (token_seq.empty()) token_seq.assign(T, 0);
  if (row_len.empty()) row_len.assign(T, c.ctx);

  IndexerParams p;
  p.q = q.data();
  p.q_st = int64_t{c.heads} * kDi;
  p.q_sh = kDi;
  p.k = k.data();
  p.k_sr = kDi;
  p.w = w.data();
  p.w_st = c.heads;
  p.w_f32 = true;
  p.q_pos = q_pos.data();
  p.row_len = row_len.data();
  if (c.block_size) {
    p.block_tables = table.data();
    p.bt_ld = blocks_per_seq;
    p.num_seqs = c.seqs;
    p.max_blocks = blocks_per_seq;
    p.token_seq = token_seq.data();
    p.block_size = c.block_size;
  }
  p.num_rows = rows;
  p.key_bound = c.ctx;
  p.T = T;
  p.Hi = c.heads;
  p.Di = kDi;
  p.scale = 0.25f;
  const int64_t ld = c.topk > 0 ? indexer_scores_ld(p) : (c.ctx + 3) / 4 * 4;
  std::vector<float> scores(T * ld, NAN);
  std::vector<int32_t> chosen(size_t{1} * T * std::max(c.topk, 1), -2);
  p.topk = c.topk;
  p.chosen = chosen.data();
  emu::set_device_sms(c.sms);
  if (c.topk > 0) {
    EXPECT_EQ(launch_indexer_topk(p, 0, T, scores.data(), nullptr), cudaSuccess);
  } else {
    EXPECT_EQ(launch_indexer_scores_wgmma(p, 0, T, scores.data(), ld, nullptr), cudaSuccess);
  }
  emu::set_device_sms(0);

  for (int t = 0; t < T; ++t) {
    const int s = token_seq[t];
    const bool seq_ok = !c.block_size || (s >= 0 && s < c.seqs);
    const int64_t n =
        seq_ok ? std::max<int64_t>(0, std::min<int64_t>({q_pos[t] + 1, row_len[t], c.ctx})) : 0;
    std::vector<std::pair<float, int32_t>> ranked;  // (−score, position): the selection's order
    for (int64_t j = 0; j < c.ctx; ++j) {
      const float got = scores[t * ld + j];
      if (j >= n) {
        if (c.topk == 0) {
          EXPECT_TRUE(std::isnan(got)) << "query " << t << " position " << j << " written";
        }
        continue;
      }
      const int64_t row =
          c.block_size ? int64_t{table[s * blocks_per_seq + j / c.block_size]} * c.block_size +
                             j % c.block_size
                       : j;
      double want = 0.0;
      for (int h = 0; h < c.heads; ++h) {
        double dot = 0.0;
        for (int d = 0; d < kDi; ++d)
          dot += static_cast<double>(__bfloat162float(q[(size_t{1} * t * c.heads + h) * kDi + d])) *
                 __bfloat162float(k[row * kDi + d]);
        want += w[t * c.heads + h] * std::max(0.0, p.scale * dot);
      }
      ranked.push_back({-static_cast<float>(want), static_cast<int32_t>(j)});
      if (n > c.topk) {
        ASSERT_EQ(got, static_cast<float>(want)) << "query " << t << " position " << j;
      }
    }
    if (c.topk == 0) continue;
    // Rows of at most topk positions keep them all without scoring.
    std::sort(ranked.begin(), ranked.end());
    std::vector<int32_t> want(c.topk, -1);
    for (int i = 0; i < std::min<int>(c.topk, static_cast<int>(ranked.size())); ++i)
      want[i] = ranked[i].second;
    std::sort(want.begin(), want.begin() + std::min<int>(c.topk, static_cast<int>(ranked.size())));
    const std::vector<int32_t> got(chosen.begin() + t * c.topk, chosen.begin() + (t + 1) * c.topk);
    ASSERT_EQ(got, want) << "query " << t;
  }
}

std::vector<int32_t> positions(int from, int count) {
  std::vector<int32_t> v(count);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(EmulatedIndexerScores, GroupsOfFourRowsAt64Heads) {
  Case c;
  c.q_pos = positions(120, 30);  // a prompt's last rows: groups of 4, the last one partial
  check(c);
}

TEST(EmulatedIndexerScores, GroupsOfEightAndSixteenRows) {
  for (const int heads : {20, 9}) {  // padded to 32 and 16 heads
    Case c;
    c.heads = heads;
    c.q_pos = positions(100, 37);
    check(c);
  }
}

// Groups holding rows of two or three sequences (runs taken one after another), rows cut short
// by row_len, and a row whose sequence is out of range (no keys).
TEST(EmulatedIndexerScores, GroupsStraddlingSequences) {
  Case c;
  c.heads = 32;  // groups of 8 rows
  c.seqs = 3;
  for (int t = 0; t < 21; ++t) {
    c.token_seq.push_back(t < 5 ? 0 : t < 13 ? 1 : 2);
    c.q_pos.push_back(t < 5 ? 40 + t : t < 13 ? 140 + t : 60 + t);
    c.row_len.push_back(t == 7 ? 30 : 1000);
  }
  c.token_seq[17] = 3;  // out of range
  check(c);
}

TEST(EmulatedIndexerScores, UnpagedKeys) {
  Case c;
  c.block_size = 0;
  c.q_pos = positions(130, 9);
  check(c);
}

// Two CTAs a group: each warpgroup takes several of the 11 key tiles through its ring.
TEST(EmulatedIndexerScores, PersistentCtasTakeManyTiles) {
  Case c;
  c.ctx = 700;
  c.block_size = 64;
  c.q_pos = positions(690, 8);
  c.sms = 2;
  check(c);
}

// ---- Scores and selection (launch_indexer_topk) ----

// A decode step: a row a sequence, the one-token score kernel, the register selection; a row
// shorter than topk keeps all its positions.
TEST(EmulatedIndexerTopk, DecodeRowsOnTheRegisterSelection) {
  Case c;
  c.heads = 20;
  c.ctx = 700;
  c.seqs = 3;
  c.token_seq = {0, 1, 2};
  c.q_pos = {699, 30, 400};
  c.topk = 64;
  check(c);
}

// A prompt step: rows sharing their sequence take the token-group kernels (warpgroup MMAs at 64
// heads, mma.sync groups at 8).
TEST(EmulatedIndexerTopk, PromptRowsOnTokenGroups) {
  for (const int heads : {64, 8}) {
    Case c;
    c.heads = heads;
    c.ctx = 520;
    c.q_pos = positions(505, 11);
    c.topk = 128;
    check(c);
  }
}

// Rows past 8,192 keys take the radix selection, cached in shared memory up to 16,384 keys.
TEST(EmulatedIndexerTopk, LongRowsOnTheRadixSelection) {
  for (const int ctx : {9000, 17000}) {
    Case c;
    c.heads = 4;
    c.ctx = ctx;
    c.block_size = 64;
    c.q_pos = {ctx - 1, ctx / 2};
    c.topk = 512;
    check(c);
  }
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
