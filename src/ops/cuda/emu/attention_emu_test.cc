// The attention kernels run by the CPU emulator against a float64 reference: the whole op
// (launch_attention: its cut into splits and head groups, the latent mma.sync kernel, the wgmma
// kernel, the split combine and the simple kernel) and the wgmma kernel on its own
// (launch_mla_wgmma, at chosen splits). Key gathering through sparse lists and shuffled block
// tables, masked, partial and empty key tiles, the online softmax across tiles, partial head
// groups. This checks the kernels' logic on any machine; their numerics on the device are
// ops_cuda_attention_test's.
//
// Tolerance: as ops_cuda_attention_test (kAttentionTol there): the output is stored in bf16
// (2^-9 relative per element, about 1.1e-3 relative L2) and the probabilities enter P·V in bf16;
// the emulated MMAs add in double. Each query row (H × Dv values) must be within 5e-3 relative
// L2; a wrongly masked or missing key moves a row by about 1/(number of keys) of its weight,
// which the peaked softmax (q scaled up) and lists of at most a few hundred keys make visible.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "ops/cuda/attention_kernels.h"
#include "ops/cuda/attention_wgmma_kernels.h"
#include "ops/cuda/emu/cta_runtime.h"
#include "ops/scratch_sizes.h"

namespace mls::ops::cuda::kernels {
namespace {

constexpr double kAttentionTol = 5e-3;

using bf16 = __nv_bfloat16;

// One sequence's paged cache and the step's queries. Latent (Hk = 1, v_in_k): v is the first
// Dv columns of each key row, as MLA's latent cache.
struct Case {
  int heads = kMlaWgmmaHeads, key_heads = 1;
  int dk = kMlaWgmmaDk, dv = kMlaWgmmaDv;
  bool v_in_k = true;
  int block_size = 64;
  int ctx = 300;  // positions in the cache
  std::vector<int32_t> q_pos;
  std::vector<int32_t> lists;  // [T, list_len], or empty: dense (every visible position)
  int list_len = 0;
  float q_scale = 3.0f;  // peaked softmax
  uint32_t seed = 1;
  uint32_t schedule_seed = 0;
};

struct Inputs {
  std::vector<bf16> q, k, v, out;
  std::vector<int32_t> block_table, token_seq, q_pos, lists;
  std::vector<float> scratch;
  AttentionParams p;
};

std::vector<bf16> normal_bf16(size_t n, std::mt19937& g, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(d(g));
  return v;
}

void make_inputs(const Case& c, Inputs& in) {
  std::mt19937 g(c.seed);
  const int T = static_cast<int>(c.q_pos.size());
  const int blocks = (c.ctx + c.block_size - 1) / c.block_size + 1;  // one spare block
  const int64_t rows = int64_t{blocks} * c.block_size;
  in.q = normal_bf16(size_t{1} * T * c.heads * c.dk, g, c.q_scale);
  in.k = normal_bf16(rows * c.key_heads * c.dk, g, 1.0f);
  if (!c.v_in_k) in.v = normal_bf16(rows * c.key_heads * c.dv, g, 1.0f);
  in.block_table.resize(blocks);
  std::iota(in.block_table.begin(), in.block_table.end(), 0);
  std::shuffle(in.block_table.begin(), in.block_table.end(), g);
  // The spare block, never visible, is the cache's first and holds NaNs: the kernels copy a
  // masked key from row 0 as zeros (a NaN there would reach O through P = 0 · V).
  std::swap(*std::find(in.block_table.begin(), in.block_table.end(), 0), in.block_table.back());
  std::fill_n(in.k.begin(), size_t{1} * c.block_size * c.key_heads * c.dk, __float2bfloat16(NAN));
  if (!c.v_in_k)
    std::fill_n(in.v.begin(), size_t{1} * c.block_size * c.key_heads * c.dv, __float2bfloat16(NAN));
  in.token_seq.assign(T, 0);
  in.q_pos = c.q_pos;
  in.lists = c.lists;
  in.out.assign(size_t{1} * T * c.heads * c.dv, __float2bfloat16(NAN));
  AttentionParams& p = in.p;
  p = AttentionParams{};
  p.q = in.q.data();
  p.q_st = int64_t{c.heads} * c.dk;
  p.q_sh = c.dk;
  p.k = in.k.data();
  p.k_sr = int64_t{c.key_heads} * c.dk;
  p.k_sh = c.dk;
  p.v = c.v_in_k ? in.k.data() : in.v.data();
  p.v_sr = c.v_in_k ? p.k_sr : int64_t{c.key_heads} * c.dv;
  p.v_sh = c.v_in_k ? p.k_sh : c.dv;
  p.out = in.out.data();
  p.o_st = int64_t{c.heads} * c.dv;
  p.o_sh = c.dv;
  p.q_pos = in.q_pos.data();
  p.allowed = in.lists.empty() ? nullptr : in.lists.data();
  p.allowed_k = c.list_len;
  p.block_tables = in.block_table.data();
  p.bt_ld = blocks;
  p.num_seqs = 1;
  p.max_blocks = blocks;
  p.token_seq = in.token_seq.data();
  p.block_size = c.block_size;
  p.num_rows = rows;
  p.key_bound = c.ctx;
  p.T = T;
  p.H = c.heads;
  p.Hk = c.key_heads;
  p.Dk = c.dk;
  p.Dv = c.dv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.dk));
}

double f(bf16 x) {
  return static_cast<double>(__bfloat162float(x));
}

// out[t, h, :] in double: softmax over query t's list (masked entries dropped) of scale · q · k.
std::vector<double> reference(const Case& c, const Inputs& in) {
  const AttentionParams& p = in.p;
  std::vector<double> out(size_t{1} * p.T * p.H * c.dv, 0.0);
  for (int t = 0; t < p.T; ++t) {
    const int64_t nk = std::min<int64_t>(c.q_pos[t] + 1, c.ctx);
    std::vector<int64_t> rows;
    const int64_t len = c.lists.empty() ? nk : c.list_len;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t j = c.lists.empty() ? i : c.lists[t * c.list_len + i];
      if (j < 0 || j >= nk) continue;
      rows.push_back(int64_t{in.block_table[j / c.block_size]} * c.block_size + j % c.block_size);
    }
    for (int h = 0; h < p.H; ++h) {
      const int hk = c.key_heads == 1 ? 0 : h;
      const bf16* q = in.q.data() + t * p.q_st + h * p.q_sh;
      std::vector<double> s(rows.size());
      double m = -INFINITY;
      for (size_t r = 0; r < rows.size(); ++r) {
        const bf16* k = in.k.data() + rows[r] * p.k_sr + hk * p.k_sh;
        double dot = 0.0;
        for (int d = 0; d < c.dk; ++d) dot += f(q[d]) * f(k[d]);
        s[r] = dot * p.scale;
        m = std::max(m, s[r]);
      }
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      double* o = out.data() + (size_t{1} * t * p.H + h) * c.dv;
      const bf16* vbase = static_cast<const bf16*>(p.v);
      for (size_t r = 0; r < rows.size(); ++r) {
        const bf16* v = vbase + rows[r] * p.v_sr + hk * p.v_sh;
        for (int d = 0; d < c.dv; ++d) o[d] += s[r] / l * f(v[d]);
      }
    }
  }
  return out;
}

// The worst relative L2 error of a query row of `got` (every query row must be within the
// tolerance).
double worst_row_error(const Case& c, const Inputs& in, const std::vector<double>& got) {
  const std::vector<double> want = reference(c, in);
  double worst = 0.0;
  const size_t row = size_t{1} * in.p.H * c.dv;
  for (int t = 0; t < in.p.T; ++t) {
    double e2 = 0.0, r2 = 0.0;
    for (size_t i = t * row; i < (t + 1) * row; ++i) {
      e2 += (got[i] - want[i]) * (got[i] - want[i]);
      r2 += want[i] * want[i];
    }
    const double rel = std::sqrt(e2 / std::max(r2, 1e-30));
    EXPECT_LE(rel, kAttentionTol) << "query " << t << " (position " << c.q_pos[t] << ")";
    worst = std::max(worst, std::isnan(rel) ? INFINITY : rel);
  }
  return worst;
}

std::vector<double> as_double(const std::vector<bf16>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = f(v[i]);
  return d;
}

// The whole op (launch_attention) with the scratch its host allocates.
double run_op(const Case& c, Inputs& in) {
  make_inputs(c, in);
  const ops::scratch::AttentionSplits s =
      ops::scratch::attention_splits(in.p.T, c.heads, c.key_heads, c.dv,
                                     c.lists.empty() ? c.ctx : c.list_len, !c.lists.empty(), false);
  in.scratch.assign(static_cast<size_t>(s.floats), NAN);
  emu::set_schedule_seed(c.schedule_seed);
  EXPECT_EQ(launch_attention(in.p, in.scratch.empty() ? nullptr : in.scratch.data(), nullptr),
            cudaSuccess);
  emu::set_schedule_seed(0);
  return worst_row_error(c, in, as_double(in.out));
}
double run_op(const Case& c) {
  Inputs in;
  return run_op(c, in);
}

// The wgmma kernel alone at `splits` splits of `keys_per_split` list entries, its split outputs
// merged as the combine kernel merges them (out = Σ 2^(m_s − M) O_s / Σ 2^(m_s − M) l_s).
double run_wgmma(const Case& c, int splits, int64_t keys_per_split, Inputs& in) {
  make_inputs(c, in);
  const AttentionParams& p = in.p;
  const size_t parts = size_t{1} * splits * p.T * p.H;
  std::vector<float> part_o(splits > 1 ? parts * c.dv : 0, NAN);
  std::vector<float> part_ml(splits > 1 ? parts * 2 : 0, NAN);
  const int groups = (c.heads + kMlaWgmmaHeads - 1) / kMlaWgmmaHeads;
  const int64_t kps = splits > 1 ? keys_per_split : (c.lists.empty() ? c.ctx : c.list_len);
  emu::set_schedule_seed(c.schedule_seed);
  EXPECT_EQ(launch_mla_wgmma(p, splits, kps, groups, part_o.data(), part_ml.data(), nullptr),
            cudaSuccess);
  emu::set_schedule_seed(0);
  if (splits == 1) return worst_row_error(c, in, as_double(in.out));
  std::vector<double> out(size_t{1} * p.T * p.H * c.dv, 0.0);
  for (int t = 0; t < p.T; ++t)
    for (int h = 0; h < p.H; ++h) {
      auto at = [&](int s) { return (size_t{1} * s * p.T + t) * p.H + h; };
      double m = -INFINITY, l = 0.0;
      for (int s = 0; s < splits; ++s) m = std::max(m, double{part_ml[at(s) * 2]});
      double* o = out.data() + (size_t{1} * t * p.H + h) * c.dv;
      for (int s = 0; s < splits; ++s) {
        const double ms = part_ml[at(s) * 2];
        if (ms == -INFINITY) continue;
        const double w = std::exp2(ms - m);
        l += w * part_ml[at(s) * 2 + 1];
        for (int d = 0; d < c.dv; ++d) o[d] += w * part_o[at(s) * c.dv + d];
      }
      for (int d = 0; d < c.dv; ++d) o[d] = l > 0.0 ? o[d] / l : 0.0;
    }
  return worst_row_error(c, in, out);
}
double run_wgmma(const Case& c, int splits = 1, int64_t keys_per_split = 0) {
  Inputs in;
  return run_wgmma(c, splits, keys_per_split, in);
}

// Lists of `len` entries in 64-entry tiles (the last one cut short when `len` is not a multiple
// of 64) that hold no key, some or all, padded with unused slots (-1) and positions past the
// query's.
Case sparse_case(int queries, int len, uint32_t seed) {
  Case c;
  c.seed = seed;
  c.list_len = len;
  std::mt19937 g(seed + 1);
  for (int t = 0; t < queries; ++t) {
    const int32_t pos = c.ctx - 1 - t % 40;
    c.q_pos.push_back(pos);
    std::vector<int32_t> keys(pos + 1);
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), g);
    auto next = keys.begin();
    std::vector<int32_t> list;
    for (int k = 0; k < (len + 63) / 64; ++k) {
      const int kind = static_cast<int>((g() + t + k) % 3);
      const int want = kind == 0 ? 0 : kind == 2 ? 64 : 1 + static_cast<int>(g() % 63);
      const int n = std::min(want, static_cast<int>(keys.end() - next));  // keys left
      std::vector<int32_t> tile(next, next + n);
      next += n;
      for (int i = n; i < 64; ++i) tile.push_back(i % 2 ? -1 : pos + 1 + static_cast<int>(g() % 9));
      std::shuffle(tile.begin(), tile.end(), g);
      list.insert(list.end(), tile.begin(), tile.end());
    }
    c.lists.insert(c.lists.end(), list.begin(), list.begin() + len);
  }
  return c;
}

// ---- The wgmma kernel alone ----

TEST(EmulatedMlaWgmma, SparseListsWithEmptyPartialAndFullTiles) {
  std::printf("sparse lists: worst rel_l2 %.2e\n", run_wgmma(sparse_case(6, 4 * 64, 11)));
}

// Lists of one key in every 128 entries (two tiles), at a different entry each time: over the
// lists every one of the 128 entries of a tile pair holds the only key of its pair once, so a
// kernel that decides from some of a tile's entries that the tile holds no key drops a key.
TEST(EmulatedMlaWgmma, LoneKeysAtEveryEntryOfATilePair) {
  constexpr int kQueries = 8, kPairs = 16;
  Case c;
  c.seed = 71;
  c.list_len = kPairs * 128;
  std::vector<int> entry(kQueries * kPairs);
  std::iota(entry.begin(), entry.end(), 0);
  std::mt19937 g(72);
  std::shuffle(entry.begin(), entry.end(), g);
  for (int t = 0; t < kQueries; ++t) {
    c.q_pos.push_back(c.ctx - 1 - t);
    std::vector<int32_t> list(c.list_len, -1);
    for (int i = 0; i < kPairs; ++i)
      list[i * 128 + entry[t * kPairs + i] % 128] = static_cast<int32_t>(g() % (c.ctx - t));
    c.lists.insert(c.lists.end(), list.begin(), list.end());
  }
  std::printf("lone keys: worst rel_l2 %.2e\n", run_wgmma(c));
}

// Splits of 96 entries (the host cuts them in multiples of 32): splits end inside a key tile,
// and the fourth holds nothing (marked empty).
TEST(EmulatedMlaWgmma, SplitsOfTheListMergeToTheWhole) {
  std::printf("splits: worst rel_l2 %.2e\n", run_wgmma(sparse_case(4, 4 * 64, 21), 4, 96));
}

TEST(EmulatedMlaWgmma, ListsCutInsideATile) {
  std::printf("lists of 160: worst rel_l2 %.2e\n", run_wgmma(sparse_case(4, 160, 51)));
}

TEST(EmulatedMlaWgmma, DenseCausalKeysInSmallBlocks) {
  Case c;
  c.block_size = 16;
  c.ctx = 150;
  c.q_pos = {0, 5, 63, 64, 100, 149};
  std::printf("dense causal: worst rel_l2 %.2e\n", run_wgmma(c));
}

TEST(EmulatedMlaWgmma, PartialHeadGroup) {
  Case c = sparse_case(3, 2 * 64, 31);
  c.heads = 40;  // heads 40..63 of the group are zero rows of Q and are not stored
  std::printf("40 heads: worst rel_l2 %.2e\n", run_wgmma(c));
}

// Threads resumed in another order (another interleaving of the same program) give the same
// bits: no result depends on a race between the kernel's threads.
TEST(EmulatedMlaWgmma, InterleavingDoesNotChangeTheBits) {
  Case c = sparse_case(3, 3 * 64, 41);
  Inputs a, b;
  run_wgmma(c, 1, 0, a);
  c.schedule_seed = 12345;
  run_wgmma(c, 1, 0, b);
  ASSERT_EQ(a.out.size(), b.out.size());
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(bf16)), 0);
}

// ---- The whole op: the cut, the kernel it picks, the combine ----

// GLM-5's DSA decode: 64-head CTAs on warpgroup MMAs, the lists cut into splits, combined.
TEST(EmulatedAttention, SparseDecodeAtTheLatentShape) {
  std::printf("DSA decode: worst rel_l2 %.2e\n", run_op(sparse_case(2, 8 * 64, 61)));
}

// A dense decode of few queries: the latent mma.sync kernel in narrower head groups, splits.
TEST(EmulatedAttention, DenseDecodeOnTheMmaSyncKernel) {
  Case c;
  c.ctx = 300;
  c.q_pos = {299, 150, 7};
  std::printf("dense decode: worst rel_l2 %.2e\n", run_op(c));
}

// The demo model's latent shape (8 heads over 64 + 16 columns): a group of 16 heads, 8 of them
// padding; a causal prompt step over blocks of 16.
TEST(EmulatedAttention, DemoModelShape) {
  Case c;
  c.heads = 8;
  c.dk = 80;
  c.dv = 64;
  c.block_size = 16;
  c.ctx = 90;
  for (int t = 0; t < 12; ++t) c.q_pos.push_back(78 + t);
  std::printf("demo shape: worst rel_l2 %.2e\n", run_op(c));
}

// Expanded heads (Hk = H, separate values of an odd width): the simple kernel, its warps each
// taking several groups of 32 keys.
TEST(EmulatedAttention, ExpandedHeadsOnTheSimpleKernel) {
  Case c;
  c.heads = c.key_heads = 4;
  c.dk = 40;
  c.dv = 24;
  c.v_in_k = false;
  c.block_size = 16;
  c.ctx = 300;
  c.q_pos = {299, 3, 200};
  std::printf("expanded heads: worst rel_l2 %.2e\n", run_op(c));
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
