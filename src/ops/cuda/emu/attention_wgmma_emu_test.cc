// The absorbed-MLA wgmma attention kernel (attention_wgmma_kernels.cu) run by the CPU emulator
// against a float64 reference: its key gathering through sparse lists and shuffled block tables,
// masked, partial and empty key tiles, the online softmax across tiles, split outputs and partial
// head groups. This checks the kernel's logic on any machine; its numerics on the device are
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
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "ops/cuda/attention_wgmma_kernels.h"
#include "ops/cuda/emu/cta_runtime.h"

namespace mls::ops::cuda::kernels {
namespace {

constexpr int kDk = kMlaWgmmaDk, kDv = kMlaWgmmaDv;
constexpr double kAttentionTol = 5e-3;

using bf16 = __nv_bfloat16;

struct Case {
  int heads = kMlaWgmmaHeads;
  int block_size = 64;
  int ctx = 300;  // positions in the cache (one sequence)
  std::vector<int32_t> q_pos;
  std::vector<int32_t> lists;  // [T, list_len], or empty: dense (every visible position)
  int list_len = 0;
  int splits = 1;
  int64_t keys_per_split = 0;
  float q_scale = 3.0f;  // peaked softmax
  uint32_t seed = 1;
  uint32_t schedule_seed = 0;
};

struct Inputs {
  std::vector<bf16> q, k, out;
  std::vector<int32_t> block_table, token_seq, q_pos, lists;
  std::vector<float> part_o, part_ml;
  AttentionParams p;
};

std::vector<bf16> normal_bf16(size_t n, std::mt19937& g, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(d(g));
  return v;
}

Inputs make_inputs(const Case& c) {
  Inputs in;
  std::mt19937 g(c.seed);
  const int T = static_cast<int>(c.q_pos.size());
  const int blocks = (c.ctx + c.block_size - 1) / c.block_size + 1;  // one spare block
  in.q = normal_bf16(static_cast<size_t>(T) * c.heads * kDk, g, c.q_scale);
  in.k = normal_bf16(static_cast<size_t>(blocks) * c.block_size * kDk, g, 1.0f);
  in.block_table.resize(blocks);
  std::iota(in.block_table.begin(), in.block_table.end(), 0);
  std::shuffle(in.block_table.begin(), in.block_table.end(), g);
  in.token_seq.assign(T, 0);
  in.q_pos = c.q_pos;
  in.lists = c.lists;
  in.out.assign(static_cast<size_t>(T) * c.heads * kDv, __float2bfloat16(NAN));
  if (c.splits > 1) {
    in.part_o.assign(static_cast<size_t>(c.splits) * T * c.heads * kDv, NAN);
    in.part_ml.assign(static_cast<size_t>(c.splits) * T * c.heads * 2, NAN);
  }
  AttentionParams& p = in.p;
  p.q = in.q.data();
  p.q_st = static_cast<int64_t>(c.heads) * kDk;
  p.q_sh = kDk;
  p.k = p.v = in.k.data();
  p.k_sr = p.v_sr = kDk;
  p.k_sh = p.v_sh = kDk;
  p.out = in.out.data();
  p.o_st = static_cast<int64_t>(c.heads) * kDv;
  p.o_sh = kDv;
  p.q_pos = in.q_pos.data();
  p.allowed = in.lists.empty() ? nullptr : in.lists.data();
  p.allowed_k = c.list_len;
  p.block_tables = in.block_table.data();
  p.bt_ld = blocks;
  p.num_seqs = 1;
  p.max_blocks = blocks;
  p.token_seq = in.token_seq.data();
  p.block_size = c.block_size;
  p.num_rows = static_cast<int64_t>(blocks) * c.block_size;
  p.key_bound = c.ctx;
  p.T = T;
  p.H = c.heads;
  p.Hk = 1;
  p.Dk = kDk;
  p.Dv = kDv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kDk));
  return in;
}

double f(bf16 x) {
  return static_cast<double>(__bfloat162float(x));
}

// out[t, h, :] in double: softmax over query t's list (masked entries dropped) of scale · q · k.
std::vector<double> reference(const Case& c, const Inputs& in) {
  const AttentionParams& p = in.p;
  std::vector<double> out(static_cast<size_t>(p.T) * p.H * kDv, 0.0);
  for (int t = 0; t < p.T; ++t) {
    const int64_t nk = std::min<int64_t>(c.q_pos[t] + 1, c.ctx);
    std::vector<int64_t> rows;
    const int64_t len = c.lists.empty() ? nk : c.list_len;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t j = c.lists.empty() ? i : c.lists[t * c.list_len + i];
      if (j < 0 || j >= nk) continue;
      rows.push_back(static_cast<int64_t>(in.block_table[j / c.block_size]) * c.block_size +
                     j % c.block_size);
    }
    for (int h = 0; h < p.H; ++h) {
      const bf16* q = in.q.data() + t * p.q_st + h * p.q_sh;
      std::vector<double> s(rows.size());
      double m = -INFINITY;
      for (size_t r = 0; r < rows.size(); ++r) {
        const bf16* k = in.k.data() + rows[r] * p.k_sr;
        double dot = 0.0;
        for (int d = 0; d < kDk; ++d) dot += f(q[d]) * f(k[d]);
        s[r] = dot * p.scale;
        m = std::max(m, s[r]);
      }
      double l = 0.0;
      for (double& x : s) l += (x = std::exp(x - m));
      double* o = out.data() + (static_cast<size_t>(t) * p.H + h) * kDv;
      for (size_t r = 0; r < rows.size(); ++r) {
        const bf16* v = in.k.data() + rows[r] * p.k_sr;
        for (int d = 0; d < kDv; ++d) o[d] += s[r] / l * f(v[d]);
      }
    }
  }
  return out;
}

// The kernel's result in double: out, or the splits merged as the combine kernel merges them
// (out = Σ 2^(m_s − M) O_s / Σ 2^(m_s − M) l_s).
std::vector<double> result(const Case& c, const Inputs& in) {
  const AttentionParams& p = in.p;
  std::vector<double> out(static_cast<size_t>(p.T) * p.H * kDv);
  if (c.splits == 1) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(in.out[i]);
    return out;
  }
  for (int t = 0; t < p.T; ++t)
    for (int h = 0; h < p.H; ++h) {
      auto at = [&](int s) { return (static_cast<size_t>(s) * p.T + t) * p.H + h; };
      double m = -INFINITY, l = 0.0;
      for (int s = 0; s < c.splits; ++s) m = std::max(m, double{in.part_ml[at(s) * 2]});
      double* o = out.data() + (static_cast<size_t>(t) * p.H + h) * kDv;
      std::fill(o, o + kDv, 0.0);
      for (int s = 0; s < c.splits; ++s) {
        const double ms = in.part_ml[at(s) * 2];
        if (ms == -INFINITY) continue;
        const double w = std::exp2(ms - m);
        l += w * in.part_ml[at(s) * 2 + 1];
        for (int d = 0; d < kDv; ++d) o[d] += w * in.part_o[at(s) * kDv + d];
      }
      for (int d = 0; d < kDv; ++d) o[d] = l > 0.0 ? o[d] / l : 0.0;
    }
  return out;
}

// Runs the kernel on the emulator; returns the worst relative L2 error of a query row.
double run(const Case& c, Inputs& in) {
  in = make_inputs(c);
  emu::set_schedule_seed(c.schedule_seed);
  const int groups = (c.heads + kMlaWgmmaHeads - 1) / kMlaWgmmaHeads;
  const int64_t kps = c.splits > 1 ? c.keys_per_split : (c.lists.empty() ? c.ctx : c.list_len);
  EXPECT_EQ(
      launch_mla_wgmma(in.p, c.splits, kps, groups, in.part_o.data(), in.part_ml.data(), nullptr),
      cudaSuccess);
  const std::vector<double> want = reference(c, in), got = result(c, in);
  double worst = 0.0;
  const size_t row = static_cast<size_t>(in.p.H) * kDv;
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
  emu::set_schedule_seed(0);
  return worst;
}
double run(const Case& c) {
  Inputs in;
  return run(c, in);
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
      const int n = kind == 0 ? 0 : kind == 2 ? 64 : 1 + static_cast<int>(g() % 63);
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

TEST(EmulatedMlaWgmma, SparseListsWithEmptyPartialAndFullTiles) {
  const double err = run(sparse_case(6, 4 * 64, 11));
  std::printf("sparse lists: worst rel_l2 %.2e\n", err);
}

TEST(EmulatedMlaWgmma, SplitsOfTheListMergeToTheWhole) {
  // Splits of 96 entries (the host cuts them in multiples of 32): splits end inside a key tile,
  // and the fourth holds nothing (marked empty).
  Case c = sparse_case(4, 4 * 64, 21);
  c.splits = 4;
  c.keys_per_split = 96;
  const double err = run(c);
  std::printf("splits: worst rel_l2 %.2e\n", err);
}

TEST(EmulatedMlaWgmma, ListsCutInsideATile) {
  const double err = run(sparse_case(4, 160, 51));
  std::printf("lists of 160: worst rel_l2 %.2e\n", err);
}

TEST(EmulatedMlaWgmma, DenseCausalKeysInSmallBlocks) {
  Case c;
  c.block_size = 16;
  c.ctx = 150;
  c.q_pos = {0, 5, 63, 64, 100, 149};
  const double err = run(c);
  std::printf("dense causal: worst rel_l2 %.2e\n", err);
}

TEST(EmulatedMlaWgmma, PartialHeadGroup) {
  Case c = sparse_case(3, 2 * 64, 31);
  c.heads = 40;  // heads 40..63 of the group are zero rows of Q and are not stored
  const double err = run(c);
  std::printf("40 heads: worst rel_l2 %.2e\n", err);
}

// Threads resumed in another order (another interleaving of the same program) give the same
// bits: no result depends on a race between the kernel's threads.
TEST(EmulatedMlaWgmma, InterleavingDoesNotChangeTheBits) {
  Case c = sparse_case(3, 3 * 64, 41);
  Inputs a, b;
  run(c, a);
  c.schedule_seed = 12345;
  run(c, b);
  ASSERT_EQ(a.out.size(), b.out.size());
  EXPECT_EQ(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(bf16)), 0);
}

}  // namespace
}  // namespace mls::ops::cuda::kernels
