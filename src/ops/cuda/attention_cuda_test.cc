// The CUDA attention and DSA indexer selection against the CPU ops on the same bf16-rounded
// inputs: decode batches over paged caches (block sizes 1, 16, 64 with shuffled block tables),
// causal prefill, mixed batches, sparse lists, the GLM-5 latent shape (H = 64, Dk = 576, v = the
// first 512 columns of k) on both latent kernels (mma.sync for steps of few queries, warpgroup
// MMAs for steps cut 64 heads per CTA), other head counts, odd shapes and the expanded (Hk == H)
// form.
//
// Attention tolerance: the GPU output is stored in bf16 (half an ulp, 2^-9 relative, per
// element: a relative L2 error of about 2^-9/√3 ≈ 1.1e-3 for uniformly spread rounding) and the
// probabilities enter the P·V product in bf16 (2^-9 relative per weight, averaging out over many
// keys); fp32 accumulation in another order adds ~1e-6. Each query row (H × Dv values) must be
// within 5e-3 relative L2 of the CPU result, 2× the worst expected; a wrongly masked or missing
// key moves a row by ≥ 1/(number of keys) of its weight, which the smaller contexts and the
// peaked softmax (q scaled up) make visible.
//
// Indexer: with integer-valued inputs and a power-of-two scale every score is exact in fp32 on
// both sides, and both break ties at the cut by lower index (TopkTieOrder::kServing), so the
// chosen lists must be identical. With normal inputs, scores differ by fp32 rounding (~1e-6
// relative), so keys within 1e-4·rms of the k-th score may swap. The indexer's two score kernels
// (one query row a CTA for decode, groups of a prompt's rows sharing staged keys) compute the
// same products in the same order: their scores must be equal bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/cuda/test_util.h"
#include "ops/indexer_topk.h"

namespace mls::ops::test {
namespace {

constexpr DType kBF = DType::kBF16;
constexpr DType kI32 = DType::kI32;
constexpr double kAttentionTol = 5e-3;

Tensor host_ints(const std::vector<int32_t>& v, int64_t rows, int64_t cols) {
  return ids(v).view({rows, cols});
}

// Normal values rounded to bf16 on the host: what the GPU reads, exactly.
Tensor bf16_values(const Shape& s, uint32_t seed, float scale = 1.0f) {
  Tensor t = random(s, seed, scale);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = bf16_to_f32(f32_to_bf16(t.data<float>()[i]));
  return t;
}

// Integers in [-r, r] (exact in bf16).
Tensor int_values(const Shape& s, uint32_t seed, int r) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(-r, r);
  Tensor t = Tensor::empty(s, DType::kF32, MemTag::kActivation);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(d(g));
  return t;
}

// A paged cache holding ctx[s] keys of each sequence s in shuffled blocks (with spare blocks of
// unrelated data), or, with block_size 0, one unpaged sequence whose key j is row j.
struct Cache {
  int64_t block_size = 0, rows = 0, max_blocks = 0;
  std::vector<int32_t> table;  // [num_seqs, max_blocks], −1 where unused
  int64_t num_seqs = 0;

  Cache(const std::vector<int64_t>& ctx, int64_t bs, uint32_t seed) : block_size(bs) {
    num_seqs = static_cast<int64_t>(ctx.size());
    if (bs == 0) {
      rows = ctx.at(0) + 5;  // rows past the context must never be read
      return;
    }
    std::vector<int64_t> blocks(ctx.size());
    int64_t total = 0;
    for (size_t s = 0; s < ctx.size(); ++s) {
      blocks[s] = (ctx[s] + bs - 1) / bs;
      total += blocks[s];
      max_blocks = std::max(max_blocks, blocks[s] + 1);
    }
    const int64_t pool = total + 3;
    rows = pool * bs;
    std::vector<int32_t> ids(pool);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    table.assign(num_seqs * max_blocks, -1);
    int64_t next = 0;
    for (int64_t s = 0; s < num_seqs; ++s)
      for (int64_t b = 0; b < blocks[s]; ++b) table[s * max_blocks + b] = ids[next++];
  }
};

// Paging tensors on the host and the device for one step.
struct Pages {
  Tensor bt_h, seq_h, bt_d, seq_d;
  PagedKeys host, dev;

  Pages(const Cache& c, const std::vector<int32_t>& seq, const std::vector<int32_t>& pos) {
    if (c.block_size == 0) return;
    bt_h = host_ints(c.table, c.num_seqs, c.max_blocks);
    seq_h = ids(seq);
    bt_d = to_gpu(bt_h, kI32);
    seq_d = to_gpu(seq_h, kI32);
    const int64_t max_keys = *std::max_element(pos.begin(), pos.end()) + 1;
    host = PagedKeys{&bt_h, &seq_h, c.block_size, max_keys};
    dev = PagedKeys{&bt_d, &seq_d, c.block_size, max_keys};
  }
};

// ---------------------------------------------------------------- attention

struct Query {
  int32_t seq, pos;
};

// The queries' positions and sequences, as q_pos and the paging take them.
struct QueryColumns {
  std::vector<int32_t> pos, seq;
};
QueryColumns columns(const std::vector<Query>& queries) {
  QueryColumns c;
  for (const Query& q : queries) {
    c.pos.push_back(q.pos);
    c.seq.push_back(q.seq);
  }
  return c;
}

struct AttnCase {
  int64_t H = 64, Dk = 576, Dv = 512;
  bool expanded = false;  // k [rows, H, Dk], v [rows, H, Dv]
  bool v_in_k = true;     // latent: v = k narrowed to its first Dv columns
  int64_t block_size = 16;
  std::vector<int64_t> ctx;
  std::vector<Query> queries;
  int64_t sparse_k = 0;        // > 0: allowed lists of this width
  std::vector<int32_t> lists;  // the lists (T × sparse_k); empty: make_allowed's
  float q_scale = 1.5f;
  bool strided_q = false;
  uint32_t seed = 1;
};

// Each query's allowed list: distinct visible positions (at most ~70% of the list), −1s, and
// positions past q_pos, shuffled; query 1 (if any) gets a list of only −1s and future keys.
std::vector<int32_t> make_allowed(const AttnCase& c, std::mt19937& g) {
  const int64_t T = static_cast<int64_t>(c.queries.size()), K = c.sparse_k;
  std::vector<int32_t> all(T * K, -1);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t pos = c.queries[t].pos;
    std::vector<int32_t> cand(pos + 1);
    std::iota(cand.begin(), cand.end(), 0);
    std::shuffle(cand.begin(), cand.end(), g);
    const int64_t take = t == 1 ? 0 : std::min<int64_t>(pos + 1, K * 7 / 10);
    std::vector<int32_t> row(cand.begin(), cand.begin() + take);
    for (int64_t i = take; i < K; ++i)
      row.push_back(i % 3 == 0 ? pos + 1 + static_cast<int32_t>(g() % 50) : -1);
    std::shuffle(row.begin(), row.end(), g);
    std::copy(row.begin(), row.end(), all.begin() + t * K);
  }
  return all;
}

// Runs the case on both devices; returns the worst per-query relative L2 error.
double run_attention(const AttnCase& c) {
  const int64_t T = static_cast<int64_t>(c.queries.size());
  const Cache cache(c.ctx, c.block_size, c.seed);
  const auto [pos, seq] = columns(c.queries);
  const Pages pages(cache, seq, pos);
  const int64_t Hk = c.expanded ? c.H : 1;
  const int64_t q_cols = c.strided_q ? c.Dk + 64 : c.Dk;
  const Tensor q_full = bf16_values({T, c.H, q_cols}, c.seed + 1, c.q_scale);
  const Tensor k_h = bf16_values({cache.rows, Hk, c.Dk}, c.seed + 2);
  const bool alias = c.v_in_k && !c.expanded;
  const Tensor v_own = alias ? Tensor() : bf16_values({cache.rows, Hk, c.Dv}, c.seed + 3);
  const Tensor q_pos_h = ids(pos);

  std::mt19937 g(c.seed + 4);
  Tensor allowed_h, allowed_d;
  AttentionArgs args_h, args_d;
  args_h.scale = args_d.scale = 1.0f / std::sqrt(static_cast<float>(c.Dk));
  if (c.sparse_k > 0) {
    allowed_h = host_ints(c.lists.empty() ? make_allowed(c, g) : c.lists, T, c.sparse_k);
    allowed_d = to_gpu(allowed_h, kI32);
    args_h.allowed = &allowed_h;
    args_d.allowed = &allowed_d;
  }
  args_h.pages = pages.host;
  args_d.pages = pages.dev;

  Tensor ref = Tensor::empty({T, c.H, c.Dv}, DType::kF32, MemTag::kActivation);
  const Tensor q_h = q_full.narrow(2, 0, c.Dk);
  const Tensor v_h = alias ? k_h.narrow(2, 0, c.Dv) : v_own;
  cpu::attention(q_h, k_h, v_h, q_pos_h, args_h, ref);

  const Tensor q_d = to_gpu(q_full, kBF).narrow(2, 0, c.Dk);
  const Tensor k_d = to_gpu(k_h, kBF);
  const Tensor v_d = alias ? k_d.narrow(2, 0, c.Dv) : to_gpu(v_own, kBF);
  const Tensor q_pos_d = to_gpu(q_pos_h, kI32);
  Tensor out_d = Tensor::empty({T, c.H, c.Dv}, kBF, MemTag::kActivation, gpu());
  attention(q_d, k_d, v_d, q_pos_d, args_d, out_d);
  const Tensor out = to_cpu(out_d);

  double worst = 0;
  const int64_t row = c.H * c.Dv;
  for (int64_t t = 0; t < T; ++t) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < row; ++i) {
      const double r = ref.data<float>()[t * row + i], o = out.data<float>()[t * row + i];
      num += (o - r) * (o - r);
      den += r * r;
    }
    // A query with no visible key attends to nothing: exactly zero on both sides.
    const double err = den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
    EXPECT_LE(err, kAttentionTol) << "query " << t << " (seq " << seq[t] << ", pos " << pos[t]
                                  << ")";
    worst = std::max(worst, err);
  }
  return worst;
}

// One decode token per sequence, at the end of its context.
std::vector<Query> decode_queries(const std::vector<int64_t>& ctx) {
  std::vector<Query> q;
  for (size_t s = 0; s < ctx.size(); ++s)
    q.push_back({static_cast<int32_t>(s), static_cast<int32_t>(ctx[s] - 1)});
  return q;
}

TEST(CudaAttention, DecodeGlm5LatentEveryBlockSize) {
  MLS_REQUIRE_GPU();
  for (int64_t bs : {1, 16, 64}) {
    AttnCase c;
    c.block_size = bs;
    c.ctx = {1, 7, 300, 4096};
    c.queries = decode_queries(c.ctx);
    c.seed = static_cast<uint32_t>(10 + bs);
    const double err = run_attention(c);
    std::printf("decode bs=%ld: worst rel_l2 %.2e\n", static_cast<long>(bs), err);
  }
}

TEST(CudaAttention, DecodeSingleTokenLongContext) {
  MLS_REQUIRE_GPU();
  // Batch 1 at 4k: the step is split across the GPU and merged by the combine kernel.
  for (int64_t ctx : {1, 7, 300, 4096}) {
    AttnCase c;
    c.block_size = 64;
    c.ctx = {ctx};
    c.queries = decode_queries(c.ctx);
    c.seed = static_cast<uint32_t>(ctx);
    run_attention(c);
  }
}

TEST(CudaAttention, DecodeEightSequences) {
  MLS_REQUIRE_GPU();
  AttnCase c;
  c.block_size = 16;
  c.ctx = {1, 2, 33, 64, 65, 129, 1000, 4096};
  c.queries = decode_queries(c.ctx);
  c.q_scale = 3.0f;  // peaked softmax
  c.seed = 20;
  run_attention(c);
}

TEST(CudaAttention, UnpagedKeysAreRows) {
  MLS_REQUIRE_GPU();
  AttnCase c;
  c.block_size = 0;
  c.ctx = {300};
  c.queries = {{0, 0}, {0, 150}, {0, 299}};
  c.seed = 30;
  run_attention(c);
}

TEST(CudaAttention, PrefillCausal) {
  MLS_REQUIRE_GPU();
  AttnCase c;
  c.block_size = 16;
  c.ctx = {200};
  for (int32_t p = 0; p < 200; ++p) c.queries.push_back({0, p});
  c.seed = 40;
  const double err = run_attention(c);
  std::printf("prefill 200: worst rel_l2 %.2e\n", err);
}

TEST(CudaAttention, MixedBatch) {
  MLS_REQUIRE_GPU();
  AttnCase c;
  c.block_size = 64;
  c.ctx = {50, 1000, 21, 4096};
  for (int32_t p = 45; p < 50; ++p) c.queries.push_back({0, p});
  c.queries.push_back({1, 999});
  for (int32_t p = 0; p < 21; ++p) c.queries.push_back({2, p});
  for (int32_t p = 4090; p < 4096; ++p) c.queries.push_back({3, p});
  c.seed = 50;
  run_attention(c);
}

TEST(CudaAttention, SparseAllowedLists) {
  MLS_REQUIRE_GPU();
  {
    // GLM-5 lists (2048 slots) over long contexts; query 1 has no usable entry.
    AttnCase c;
    c.block_size = 64;
    c.ctx = {4096, 3000, 10, 2500};
    c.queries = {{0, 4095}, {1, 2999}, {2, 9}, {3, 2000}};
    c.sparse_k = 2048;
    c.seed = 60;
    const double err = run_attention(c);
    std::printf("sparse 2048: worst rel_l2 %.2e\n", err);
  }
  {
    // One decode query (batch 1): its list cut into 32 splits of 64 keys, 64 heads a CTA
    // (ops::scratch::attention_splits); and two, whose cut differs again.
    for (const std::vector<int64_t>& ctx : {std::vector<int64_t>{4096}, {4096, 2100}}) {
      AttnCase c;
      c.block_size = 64;
      c.ctx = ctx;
      c.queries = decode_queries(c.ctx);
      c.sparse_k = 2048;
      c.seed = static_cast<uint32_t>(62 + ctx.size());
      const double err = run_attention(c);
      std::printf("sparse 2048, %zu decode queries: worst rel_l2 %.2e\n", ctx.size(), err);
    }
  }
  {
    // Short lists in a prefill-like step (several queries of one sequence).
    AttnCase c;
    c.block_size = 16;
    c.ctx = {500};
    for (int32_t p : {0, 3, 100, 250, 499}) c.queries.push_back({0, p});
    c.sparse_k = 64;
    c.seed = 61;
    run_attention(c);
  }
}

// Steps with queries enough to fill the GPU cut 64 heads per CTA (ops::scratch::attention_splits),
// which at the latent shape (Dk = 576, v = k's first 512 columns) takes the warpgroup-MMA kernel
// (attention_wgmma_kernels.cu): a causal prefill, key lists cut into splits merged by the combine
// kernel, and head counts that leave a group partly empty.
TEST(CudaAttention, WideCutCausalPrefill) {
  MLS_REQUIRE_GPU();
  for (int64_t bs : {1, 16, 0}) {
    AttnCase c;
    c.block_size = bs;
    c.ctx = {300};
    for (int32_t p = 0; p < 300; ++p) c.queries.push_back({0, p});
    c.seed = static_cast<uint32_t>(200 + bs);
    const double err = run_attention(c);
    std::printf("wide prefill 300, block %ld: worst rel_l2 %.2e\n", static_cast<long>(bs), err);
  }
}

TEST(CudaAttention, WideCutSparseListsInSplits) {
  MLS_REQUIRE_GPU();
  // Lists of 4,096 slots: two splits of 2,048 per query; 128 queries × 2 splits fill the GPU.
  AttnCase c;
  c.block_size = 64;
  c.ctx = {700, 650};
  for (int32_t i = 0; i < 64; ++i) {
    c.queries.push_back({0, 699 - 7 * i});
    c.queries.push_back({1, 649 - 10 * i});
  }
  c.sparse_k = 4096;
  c.q_scale = 3.0f;  // peaked softmax
  c.seed = 210;
  const double err = run_attention(c);
  std::printf("wide sparse 4096 in 2 splits: worst rel_l2 %.2e\n", err);
}

// Lists whose 64-entry tiles hold all keys, some keys or none, in every combination of
// neighbouring tiles, an odd number of tiles a list: the warpgroup-MMA kernel skips a tile
// without a key, exactly (DSA lists of a prompt's early tokens end in such tiles).
TEST(CudaAttention, WideCutListsWithEmptyTiles) {
  MLS_REQUIRE_GPU();
  AttnCase c;
  c.block_size = 64;
  c.ctx = {600};
  constexpr int kTiles = 7;
  c.sparse_k = kTiles * 64;
  c.q_scale = 3.0f;  // peaked softmax
  c.seed = 230;
  std::mt19937 g(231);
  std::set<std::pair<int, int>> pairs_seen;  // (tile 2i, tile 2i + 1) kinds: 0 none, 1 some, 2 all
  for (int32_t t = 0; t < 256; ++t) {
    const int32_t pos = 599 - t % 40;
    c.queries.push_back({0, pos});
    std::vector<int32_t> keys(pos + 1);
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), g);
    auto next_key = keys.begin();
    int kinds[kTiles];
    for (int k = 0; k < kTiles; ++k) {
      kinds[k] = static_cast<int>(g() % 3);
      const int n = kinds[k] == 0 ? 0 : kinds[k] == 2 ? 64 : 1 + static_cast<int>(g() % 63);
      std::vector<int32_t> tile(next_key, next_key + n);
      next_key += n;
      for (int i = n; i < 64; ++i)  // padding: unused slots and positions past q_pos
        tile.push_back(i % 2 ? -1 : pos + 1 + static_cast<int32_t>(g() % 50));
      std::shuffle(tile.begin(), tile.end(), g);
      c.lists.insert(c.lists.end(), tile.begin(), tile.end());
    }
    for (int k = 0; k + 1 < kTiles; k += 2) pairs_seen.insert({kinds[k], kinds[k + 1]});
  }
  ASSERT_EQ(pairs_seen.size(), 9u);
  const double err = run_attention(c);
  std::printf("wide lists with empty tiles: worst rel_l2 %.2e\n", err);
}

// Batch invariance (AttentionArgs::batch_invariant): each query of a 320-query prompt step gives
// the bits it gives alone, as a decode step computes it. The demo model's shape (8 heads over a
// latent of 64 + 16, lists of 256) and GLM-5's (64 heads on warpgroup MMAs, lists of 2,048 in
// splits). Without it the same rows differ (printed, not required).
TEST(CudaAttention, BatchInvariantRowsAreTheOneQueryRows) {
  MLS_REQUIRE_GPU();
  struct Shape3 {
    int64_t H, Dk, Dv, list, ctx;
  };
  for (const Shape3 sh : {Shape3{8, 80, 64, 256, 700}, Shape3{64, 576, 512, 2048, 3000}}) {
    AttnCase c;
    c.H = sh.H;
    c.Dk = sh.Dk;
    c.Dv = sh.Dv;
    c.sparse_k = sh.list;
    c.block_size = 64;
    c.ctx = {sh.ctx};
    for (int32_t i = 0; i < 320; ++i)
      c.queries.push_back({0, static_cast<int32_t>(sh.ctx - 320 + i)});
    c.seed = static_cast<uint32_t>(240 + sh.H);
    const int64_t T = static_cast<int64_t>(c.queries.size());
    const Cache cache(c.ctx, c.block_size, c.seed);
    const auto [pos, seq] = columns(c.queries);
    std::mt19937 g(c.seed + 4);
    const Tensor lists = to_gpu(host_ints(make_allowed(c, g), T, c.sparse_k), kI32);
    const Tensor q = to_gpu(bf16_values({T, c.H, c.Dk}, c.seed + 1, c.q_scale), kBF);
    const Tensor k = to_gpu(bf16_values({cache.rows, 1, c.Dk}, c.seed + 2), kBF);
    const Tensor v = k.narrow(2, 0, c.Dv);
    const Tensor q_pos = to_gpu(ids(pos), kI32);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.Dk));
    auto step = [&](int64_t t0, int64_t n, bool invariant) {
      const std::vector<int32_t> s(seq.begin() + t0, seq.begin() + t0 + n);
      const std::vector<int32_t> p(pos.begin() + t0, pos.begin() + t0 + n);
      const Pages pages(cache, s, p);
      const Tensor l = lists.narrow(0, t0, n);
      const AttentionArgs args{
          .scale = scale, .allowed = &l, .pages = pages.dev, .batch_invariant = invariant};
      Tensor out = Tensor::empty({n, c.H, c.Dv}, kBF, MemTag::kActivation, gpu());
      attention(q.narrow(0, t0, n), k, v, q_pos.narrow(0, t0, n), args, out);
      return to_cpu(out);
    };
    const int64_t row = c.H * c.Dv;
    auto same_row = [&](const Tensor& a, int64_t ra, const Tensor& b, int64_t rb) {
      return std::memcmp(a.data<float>() + ra * row, b.data<float>() + rb * row,
                         row * sizeof(float)) == 0;
    };
    const Tensor whole = step(0, T, true), whole_default = step(0, T, false);
    int equal = 0, equal_by_default = 0;
    const std::vector<int64_t> rows = {0, 2, 63, 64, 200, T - 1};
    for (int64_t t : rows) {
      const Tensor alone = step(t, 1, true);
      const bool same = same_row(whole, t, alone, 0);
      EXPECT_TRUE(same) << "H " << c.H << " query " << t;
      equal += same;
      equal_by_default += same_row(whole_default, t, alone, 0);
    }
    std::printf("H %ld, lists of %ld: rows alone = in a %ld-query step: %d of %zu (default: %d)\n",
                static_cast<long>(c.H), static_cast<long>(c.sparse_k), static_cast<long>(T), equal,
                rows.size(), equal_by_default);
  }
}

TEST(CudaAttention, WideCutPartialHeadGroup) {
  MLS_REQUIRE_GPU();
  // 80 heads: a group of 64 and one of 16 heads with 48 empty rows.
  AttnCase c;
  c.H = 80;
  c.block_size = 16;
  c.ctx = {150, 120};
  for (int32_t p = 0; p < 150; ++p) c.queries.push_back({0, p});
  for (int32_t p = 0; p < 120; ++p) c.queries.push_back({1, p});
  c.seed = 220;
  run_attention(c);
}

TEST(CudaAttention, OtherHeadCounts) {
  MLS_REQUIRE_GPU();
  // 8, 16 and 32 heads use the narrower CTA shapes; 128 heads two head groups of 64.
  for (int64_t H : {8, 16, 32, 128}) {
    AttnCase c;
    c.H = H;
    c.block_size = 16;
    c.ctx = {5, 700};
    c.queries = {{0, 4}, {1, 699}, {1, 300}};
    c.seed = static_cast<uint32_t>(70 + H);
    run_attention(c);
  }
}

TEST(CudaAttention, StridedQueryView) {
  MLS_REQUIRE_GPU();
  AttnCase c;
  c.strided_q = true;
  c.block_size = 16;
  c.ctx = {100, 33};
  c.queries = {{0, 99}, {1, 32}, {0, 50}};
  c.seed = 80;
  run_attention(c);
}

TEST(CudaAttention, SmallOddShapes) {
  MLS_REQUIRE_GPU();
  struct Shape3 {
    int64_t H, Dk, Dv;
  };
  // Dk = 40: 16-byte rows (cp.async path); Dk = 36, Dv = 20: element loads; separate v.
  for (const Shape3 s : {Shape3{4, 40, 32}, Shape3{3, 36, 20}})
    for (int64_t bs : {0, 1, 16})
      for (int64_t sparse : {0, 8}) {
        AttnCase c;
        c.H = s.H;
        c.Dk = s.Dk;
        c.Dv = s.Dv;
        c.v_in_k = false;
        c.block_size = bs;
        c.ctx = {bs == 0 ? 90 : 37};
        if (bs != 0) c.ctx.push_back(90);
        c.queries = {{0, 0}, {0, 20}, {0, 36}};
        if (bs != 0) c.queries.push_back({1, 89});
        c.sparse_k = sparse;
        c.seed = static_cast<uint32_t>(90 + bs + sparse + s.Dk);
        run_attention(c);
      }
}

TEST(CudaAttention, ExpandedHeads) {
  MLS_REQUIRE_GPU();
  for (int64_t sparse : {0, 16}) {
    AttnCase c;
    c.expanded = true;
    c.H = 4;
    c.Dk = 48;
    c.Dv = 32;
    c.block_size = 16;
    c.ctx = {70, 5};
    c.queries = {{0, 0}, {0, 69}, {1, 4}, {0, 33}};
    c.sparse_k = sparse;
    c.seed = static_cast<uint32_t>(120 + sparse);
    run_attention(c);
  }
}

// ---------------------------------------------------------------- indexer

struct IdxQuery {
  int32_t seq, pos, row_len;
};

struct IdxCase {
  int64_t Hi = 32, Di = 128, topk = 2048;
  int64_t block_size = 64;
  std::vector<int64_t> ctx;
  std::vector<IdxQuery> queries;
  bool integer = true;  // exact scores on both sides
  bool w_f32 = false;
  uint32_t seed = 1;
};

// Every position of each sequence, as one prefill step (row_len = the prompt length): rows of
// one sequence run in consecutive tokens and the sequences' boundaries fall anywhere.
std::vector<IdxQuery> prompt_queries(const std::vector<int64_t>& ctx) {
  std::vector<IdxQuery> q;
  for (size_t s = 0; s < ctx.size(); ++s)
    for (int64_t p = 0; p < ctx[s]; ++p)
      q.push_back({static_cast<int32_t>(s), static_cast<int32_t>(p), static_cast<int32_t>(ctx[s])});
  return q;
}

void run_indexer(const IdxCase& c) {
  const int64_t T = static_cast<int64_t>(c.queries.size());
  const Cache cache(c.ctx, c.block_size, c.seed);
  std::vector<int32_t> pos, seq, len;
  for (const IdxQuery& q : c.queries) {
    pos.push_back(q.pos);
    seq.push_back(q.seq);
    len.push_back(q.row_len);
  }
  const Pages pages(cache, seq, pos);
  const Tensor q_h = c.integer ? int_values({T, c.Hi, c.Di}, c.seed + 1, 2)
                               : bf16_values({T, c.Hi, c.Di}, c.seed + 1);
  const Tensor k_h = c.integer ? int_values({cache.rows, c.Di}, c.seed + 2, 2)
                               : bf16_values({cache.rows, c.Di}, c.seed + 2);
  Tensor w_h =
      c.integer ? int_values({T, c.Hi}, c.seed + 3, 2) : bf16_values({T, c.Hi}, c.seed + 3, 0.2f);
  if (c.integer)
    for (int64_t i = 0; i < w_h.numel(); ++i) w_h.data<float>()[i] *= 0.5f;
  const float scale = c.integer ? 1.0f / 16 : 1.0f / std::sqrt(static_cast<float>(c.Di));
  const Tensor q_pos_h = ids(pos), len_h = ids(len);

  Tensor ref = Tensor::empty({T, c.topk}, kI32, MemTag::kActivation);
  cpu::indexer_topk(q_h, k_h, w_h, q_pos_h, len_h, scale, pages.host, TopkTieOrder::kServing, ref);

  Tensor got_d = Tensor::empty({T, c.topk}, kI32, MemTag::kActivation, gpu());
  indexer_topk(to_gpu(q_h, kBF), to_gpu(k_h, kBF), to_gpu(w_h, c.w_f32 ? DType::kF32 : kBF),
               to_gpu(q_pos_h, kI32), to_gpu(len_h, kI32), scale, pages.dev, TopkTieOrder::kServing,
               got_d);
  const Tensor got = to_cpu(got_d);
  if (c.integer) {
    const int32_t* g = got.data<int32_t>();
    const int32_t* r = ref.data<int32_t>();
    EXPECT_EQ(std::vector<int32_t>(g, g + T * c.topk), std::vector<int32_t>(r, r + T * c.topk));
  }

  for (int64_t t = 0; t < T; ++t) {
    // Scores in double from the same (exact bf16) inputs.
    const int64_t n = pos[t] + 1;
    std::vector<double> score(n, 0.0);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t r = cache.block_size == 0
                            ? j
                            : static_cast<int64_t>(
                                  cache.table[seq[t] * cache.max_blocks + j / cache.block_size]) *
                                      cache.block_size +
                                  j % cache.block_size;
      for (int64_t h = 0; h < c.Hi; ++h) {
        double dot = 0;
        for (int64_t d = 0; d < c.Di; ++d)
          dot += static_cast<double>(q_h.data<float>()[(t * c.Hi + h) * c.Di + d]) *
                 k_h.data<float>()[r * c.Di + d];
        score[j] += w_h.data<float>()[t * c.Hi + h] * std::max(dot * scale, 0.0);
      }
    }
    double rms = 0;
    for (double s : score) rms += s * s;
    rms = std::sqrt(rms / static_cast<double>(n));
    const double tol = c.integer ? 0.0 : 1e-4 * rms;
    const int64_t take = std::min(c.topk, n);
    std::vector<double> sorted = score;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    const double kth = sorted[take - 1];

    // The chosen positions of a row: `take` distinct valid keys, every other slot −1.
    auto chosen_set = [&](const Tensor& sel, const char* who) {
      std::set<int32_t> s;
      int64_t picks = 0;
      const int32_t* r = sel.data<int32_t>() + t * c.topk;
      for (int64_t i = 0; i < c.topk; ++i) {
        if (r[i] == -1) continue;
        EXPECT_TRUE(r[i] >= 0 && r[i] < n) << who << " row " << t << " slot " << i << ": " << r[i];
        s.insert(r[i]);
        ++picks;
      }
      EXPECT_EQ(picks, take) << who << " row " << t;
      EXPECT_EQ(static_cast<int64_t>(s.size()), picks) << who << " row " << t << ": duplicates";
      return s;
    };
    const std::set<int32_t> want = chosen_set(ref, "cpu"), have = chosen_set(got, "gpu");
    int64_t swapped = 0;
    for (int32_t j : have) {
      if (j < 0 || j >= n) continue;
      EXPECT_GE(score[j], kth - tol) << "row " << t << ": gpu chose key " << j;
      if (!want.count(j)) {
        ++swapped;
        EXPECT_LE(std::fabs(score[j] - kth), tol) << "row " << t << ": gpu-only key " << j;
      }
    }
    for (int32_t j : want) {
      if (j >= 0 && j < n && !have.count(j)) {
        EXPECT_LE(std::fabs(score[j] - kth), tol) << "row " << t << ": cpu-only key " << j;
      }
    }
    if (swapped > 0)
      std::printf("indexer row %ld: %ld keys differ, all tied with the k-th score\n",
                  static_cast<long>(t), static_cast<long>(swapped));
  }
}

TEST(CudaIndexer, DecodeRowsGlm5) {
  MLS_REQUIRE_GPU();
  for (bool integer : {true, false}) {
    IdxCase c;
    c.integer = integer;
    c.ctx = {100, 2048, 2049, 3000, 5000};
    for (size_t s = 0; s < c.ctx.size(); ++s) {
      const int32_t p = static_cast<int32_t>(c.ctx[s] - 1);
      c.queries.push_back({static_cast<int32_t>(s), p, p + 1});
    }
    c.seed = integer ? 200 : 201;
    run_indexer(c);
  }
}

TEST(CudaIndexer, DecodeStepsOfOneTwoAndEightRowsAt4kAnd8kKeys) {
  MLS_REQUIRE_GPU();
  // GLM-5's decode: 2048 of 4096 or 8192 keys (rows of the step's whole reach and one key
  // short of it); small integers tie often at the cut, so the lists must agree exactly.
  for (int64_t keys : {4096, 8192})
    for (int64_t T : {1, 2, 8}) {
      IdxCase c;
      for (int64_t s = 0; s < T; ++s) {
        c.ctx.push_back(s % 2 ? keys - 1 : keys);
        const auto p = static_cast<int32_t>(c.ctx.back() - 1);
        c.queries.push_back({static_cast<int32_t>(s), p, p + 1});
      }
      c.seed = static_cast<uint32_t>(250 + keys + T);
      SCOPED_TRACE(testing::Message() << "keys " << keys << " T " << T);
      run_indexer(c);
      c.integer = false;
      run_indexer(c);
    }
}

TEST(CudaIndexer, PromptRowsSpanThePrompt) {
  MLS_REQUIRE_GPU();
  // A chunk of a 3000-token prompt: each row spans the prompt, later positions masked; rows
  // early in the prompt have fewer valid keys than topk.
  IdxCase c;
  c.block_size = 16;
  c.ctx = {3000};
  for (int32_t p : {0, 5, 1000, 2047, 2048, 2500, 2999}) c.queries.push_back({0, p, 3000});
  c.w_f32 = true;
  c.seed = 210;
  run_indexer(c);
}

TEST(CudaIndexer, LongRowsAndUnpagedKeys) {
  MLS_REQUIRE_GPU();
  // 40k keys: past the shared-memory row cache of the selection kernel.
  IdxCase c;
  c.block_size = 0;
  c.ctx = {40000};
  c.queries = {{0, 39999, 40000}, {0, 20000, 40000}};
  c.seed = 220;
  run_indexer(c);
  c.integer = false;
  c.seed = 221;
  run_indexer(c);
}

TEST(CudaIndexer, SmallShapes) {
  MLS_REQUIRE_GPU();
  // Few heads and narrow keys (the tiny fixtures: topk 8), block size 1, odd Di (element loads).
  for (int64_t Di : {32, 20})
    for (int64_t bs : {1, 16}) {
      IdxCase c;
      c.Hi = 4;
      c.Di = Di;
      c.topk = 8;
      c.block_size = bs;
      c.ctx = {3, 30, 70};
      c.queries = {{0, 2, 3}, {1, 29, 30}, {2, 10, 70}, {2, 69, 70}};
      c.seed = static_cast<uint32_t>(230 + Di + bs);
      run_indexer(c);
    }
}

TEST(CudaIndexer, PrefillOfSeveralSequences) {
  MLS_REQUIRE_GPU();
  // A prefill step (more rows than sequences: the token-group score kernel) of prompts of 77, 1,
  // 2, 300, 130 and 523 tokens: 1033 rows, so groups of 4 (or 2) rows straddle boundaries, one
  // group holds rows of three sequences, and the last group is short. topk 64: most rows are
  // cut.
  for (int64_t Hi : {32, 8})
    for (int64_t bs : {1, 64}) {
      IdxCase c;
      c.Hi = Hi;
      c.topk = 64;
      c.block_size = bs;
      c.ctx = {77, 1, 2, 300, 130, 523};
      c.queries = prompt_queries(c.ctx);
      c.seed = static_cast<uint32_t>(260 + Hi + bs);
      SCOPED_TRACE(testing::Message() << "Hi " << Hi << " block size " << bs);
      run_indexer(c);
    }
  IdxCase c;
  c.integer = false;
  c.w_f32 = true;
  c.topk = 64;
  c.ctx = {77, 1, 2, 300, 130, 523};
  c.queries = prompt_queries(c.ctx);
  c.seed = 270;
  run_indexer(c);
  // Unpaged keys (one sequence), an odd number of rows.
  c = IdxCase{};
  c.topk = 64;
  c.block_size = 0;
  c.ctx = {699};
  c.queries = prompt_queries(c.ctx);
  c.seed = 271;
  run_indexer(c);
}

// The token-group score kernel against the one-token kernel on the same rows, bit for bit, and
// neither writing a position past a row's valid keys: prompts of several sequences, paged with
// block sizes 1, 16 and 64 and unpaged, 64, 48, 32, 8 and 4 heads (groups of 2 and 4 rows), a
// mixed step (decode rows among prompt rows), GLM-5's 8,192-token prompt, a few rows of a long
// context (row chunks across CTAs), narrow odd Di (element-wise staging).
TEST(CudaIndexer, TokenGroupScoresEqualOneTokenScores) {
  MLS_REQUIRE_GPU();
  constexpr float kUnwritten = -3.25e38f;
  auto check = [&](const IdxCase& c) {
    const auto T = static_cast<int64_t>(c.queries.size());
    const Cache cache(c.ctx, c.block_size, c.seed);
    std::vector<int32_t> pos, seq, len;
    for (const IdxQuery& q : c.queries) {
      pos.push_back(q.pos);
      seq.push_back(q.seq);
      len.push_back(q.row_len);
    }
    const Pages pages(cache, seq, pos);
    const Tensor q = to_gpu(bf16_values({T, c.Hi, c.Di}, c.seed + 1));
    const Tensor k = to_gpu(bf16_values({cache.rows, c.Di}, c.seed + 2));
    const Tensor w = to_gpu(bf16_values({T, c.Hi}, c.seed + 3, 0.2f), c.w_f32 ? DType::kF32 : kBF);
    const Tensor q_pos = to_gpu(ids(pos), kI32), row_len = to_gpu(ids(len), kI32);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.Di));
    const int64_t bound = key_bound(pages.dev, cache.rows), ld = bound + 5;
    Tensor unwritten = Tensor::empty({T, ld}, DType::kF32, MemTag::kActivation);
    std::fill_n(unwritten.data<float>(), T * ld, kUnwritten);
    auto scores = [&](cuda::IndexerScoreKernel kernel) {
      Tensor s = to_gpu(unwritten, DType::kF32);
      cuda::indexer_scores(q, k, w, q_pos, row_len, scale, pages.dev, kernel, s);
      return to_cpu(s);
    };
    const Tensor one = scores(cuda::IndexerScoreKernel::kOneToken);
    const Tensor groups = scores(cuda::IndexerScoreKernel::kTokenGroups);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = std::min<int64_t>({pos[t] + 1, len[t], bound});
      const float* a = one.data<float>() + t * ld;
      const float* b = groups.data<float>() + t * ld;
      for (int64_t j = 0; j < ld; ++j) {
        if (std::memcmp(a + j, b + j, sizeof(float)) != 0) {
          ADD_FAILURE() << "row " << t << " key " << j << ": one-token " << a[j] << ", groups "
                        << b[j];
          return;
        }
        if ((a[j] == kUnwritten) != (j >= n)) {
          ADD_FAILURE() << "row " << t << " key " << j << " of " << n
                        << " valid: " << (j >= n ? "written" : "not written");
          return;
        }
      }
    }
  };

  for (int64_t Hi : {64, 48, 32, 8})
    for (int64_t bs : {1, 16, 64, 0}) {
      IdxCase c;
      c.Hi = Hi;
      c.block_size = bs;
      c.ctx = bs == 0 ? std::vector<int64_t>{699} : std::vector<int64_t>{77, 1, 2, 300, 130, 523};
      c.queries = prompt_queries(c.ctx);
      c.w_f32 = Hi == 32;
      c.seed = static_cast<uint32_t>(280 + Hi + bs);
      SCOPED_TRACE(testing::Message() << "prompts, Hi " << Hi << " block size " << bs);
      check(c);
    }
  {
    // Decode rows of sequences 0 and 2 among prompt chunks of sequences 1 and 3.
    IdxCase c;
    c.ctx = {3000, 200, 4100, 64};
    c.queries.push_back({0, 2999, 3000});
    for (int32_t p = 50; p < 200; ++p) c.queries.push_back({1, p, 200});
    c.queries.push_back({2, 4099, 4100});
    for (int32_t p = 0; p < 64; ++p) c.queries.push_back({3, p, 64});
    c.seed = 290;
    SCOPED_TRACE("mixed step");
    check(c);
  }
  {
    // GLM-5's 8,192-token prefill (one layer's scores; nsys on this test times both kernels at
    // the shape of the model's prompt).
    IdxCase c;
    c.ctx = {8192};
    c.queries = prompt_queries(c.ctx);
    c.seed = 296;
    SCOPED_TRACE("8192-token prompt");
    check(c);
  }
  for (int64_t Hi : {64, 32}) {
    // 10 rows at the end of a 9000-key context: few CTAs, so each row's keys are split in chunks.
    IdxCase c;
    c.Hi = Hi;
    c.block_size = 16;
    c.ctx = {9000};
    for (int32_t p = 8990; p < 9000; ++p) c.queries.push_back({0, p, 9000});
    c.seed = static_cast<uint32_t>(291 + Hi);
    SCOPED_TRACE(testing::Message() << "long rows, Hi " << Hi);
    check(c);
  }
  {
    IdxCase c;
    c.Hi = 4;
    c.Di = 20;
    c.block_size = 16;
    c.ctx = {3, 30, 70};
    c.queries = prompt_queries(c.ctx);
    c.seed = 295;
    SCOPED_TRACE("Hi 4, Di 20");
    check(c);
  }
}

// The serving tie rule on the GPU: small integers tie often at the cut, and a row keeps the
// lowest-indexed of the tied keys whatever comes with it: its row length (a prompt's or its
// own), the other rows of the step, the step's key bound. This is what lets a cached prefix's
// selections stand for any continuation. The CPU's kServing picks the same lists.
TEST(CudaIndexer, TiesGoToLowerIndicesWhateverFollows) {
  MLS_REQUIRE_GPU();
  const int64_t Hi = 4, Di = 32, topk = 8;
  const int32_t ctx = 300, zero_row = 100;
  const Cache cache({ctx}, 16, 240);
  const Tensor k_all = int_values({cache.rows, Di}, 241, 1);
  Tensor q_all = int_values({ctx, Hi, Di}, 242, 1);
  for (int64_t i = 0; i < Hi * Di; ++i) q_all.data<float>()[zero_row * Hi * Di + i] = 0.0f;
  const Tensor w_all = int_values({ctx, Hi}, 243, 2);
  const float scale = 1.0f / 16;

  // Selects rows `pos` (each with row length `len`) in one step; checks GPU == CPU.
  int64_t ties = 0;
  auto select = [&](const std::vector<int32_t>& pos, const std::vector<int32_t>& len) {
    const auto T = static_cast<int64_t>(pos.size());
    Tensor q_h = Tensor::empty({T, Hi, Di}, DType::kF32, MemTag::kActivation);
    Tensor w_h = Tensor::empty({T, Hi}, DType::kF32, MemTag::kActivation);
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(q_all.data<float>() + pos[t] * Hi * Di, Hi * Di, q_h.data<float>() + t * Hi * Di);
      std::copy_n(w_all.data<float>() + pos[t] * Hi, Hi, w_h.data<float>() + t * Hi);
    }
    const std::vector<int32_t> seq(T, 0);
    const Pages pages(cache, seq, pos);
    const Tensor pos_h = ids(pos), len_h = ids(len);
    Tensor ref = Tensor::empty({T, topk}, kI32, MemTag::kActivation);
    cpu::indexer_topk(q_h, k_all, w_h, pos_h, len_h, scale, pages.host, TopkTieOrder::kServing,
                      ref);
    Tensor got_d = Tensor::empty({T, topk}, kI32, MemTag::kActivation, gpu());
    indexer_topk(to_gpu(q_h, kBF), to_gpu(k_all, kBF), to_gpu(w_h, kBF), to_gpu(pos_h, kI32),
                 to_gpu(len_h, kI32), scale, pages.dev, TopkTieOrder::kServing, got_d);
    const Tensor got = to_cpu(got_d);
    for (bool tie : cpu::indexer_ties_at_cut(q_h, k_all, w_h, pos_h, scale, pages.host, topk))
      ties += tie;
    std::map<int32_t, std::vector<int32_t>> rows;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t* g = got.data<int32_t>() + t * topk;
      const int32_t* r = ref.data<int32_t>() + t * topk;
      EXPECT_EQ(std::vector<int32_t>(g, g + topk), std::vector<int32_t>(r, r + topk))
          << "row at position " << pos[t];
      rows[pos[t]] = std::vector<int32_t>(g, g + topk);
    }
    return rows;
  };

  const std::vector<int32_t> probes = {8, 37, zero_row, 150, 299};
  std::vector<int32_t> all(ctx), prompt_len(ctx, ctx);
  std::iota(all.begin(), all.end(), 0);
  const auto whole_prompt = select(all, prompt_len);
  const int64_t prompt_ties = ties;
  EXPECT_GT(prompt_ties, 0) << "the inputs must tie at the cut for this test to mean anything";
  for (int32_t p : probes) {
    EXPECT_EQ(select({p}, {p + 1}).at(p), whole_prompt.at(p)) << "position " << p;
    EXPECT_EQ(select({p, ctx - 1}, {ctx, ctx}).at(p), whole_prompt.at(p)) << "position " << p;
  }
  std::vector<int32_t> lowest(topk);
  std::iota(lowest.begin(), lowest.end(), 0);
  EXPECT_EQ(whole_prompt.at(zero_row), lowest) << "every score 0: the lowest indices";
  std::printf("%ld of %d rows tie at the cut\n", static_cast<long>(prompt_ties), ctx);
}

}  // namespace
}  // namespace mls::ops::test
