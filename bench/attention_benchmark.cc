// The GLM-5 attention kernels alone on the GPU (bench/models/glm5-shaped: 64 heads, latent keys
// of 576 with the first 512 the values, DSA indexer 32 heads × 128, top-2,048), each timed as CUDA
// graph replays over a paged latent cache (blocks of 64 in shuffled order):
//   - absorbed-MLA attention of a prompt of 8,192 tokens, each query over its DSA list (all its
//     positions up to 2,048, then 2,048 chosen ones, ascending, −1-padded as the indexer writes);
//     TFLOP/s against the 989 dense bf16 peak (two FLOPs per multiply-add, Dk + Dv per key);
//   - the same for decode steps of 1, 8, 64 and 256 sequences at 4,096 context; key bytes read
//     per second against the 4.8 TB/s floor;
//   - the DSA indexer's scores and top-k for the 8,192-token prompt (both score kernels) and the
//     decode steps; the scores' TFLOP/s (Hi · Di multiply-adds per valid key);
//   - attention again with batch invariance (--batch-invariant) where it cuts a step otherwise.
//
//   attention_benchmark [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_bench_util.h"
#include "ops/cuda/attention_kernels.h"
#include "ops/cuda/indexer_topk_kernels.h"
#include "ops/scratch_sizes.h"

namespace {

namespace k = mls::ops::cuda::kernels;
using mls::bench::check;
using mls::bench::device_alloc;
using mls::bench::time_graph;

constexpr int kH = 64, kDk = 576, kDv = 512, kHi = 32, kDi = 128, kTopk = 2048;
constexpr int64_t kBlock = 64;
constexpr double kBf16Peak = 989.0, kFloorTBs = 4.8;

template <typename T>
T* upload(const std::vector<T>& host) {
  T* d = device_alloc<T>(host.size());
  check(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return d;
}

// bf16 values of N(0, scale²)-like spread (bit patterns of floats in [-2, 2) · scale).
uint16_t* random_bf16(size_t count, float scale, uint32_t seed) {
  std::vector<uint16_t> host(count);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-2.0f * scale, 2.0f * scale);
  for (auto& v : host) {
    const float f = d(g);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  return upload(host);
}

// One step: `ctx[s]` keys of sequence s in shuffled blocks of a paged cache, queries at `pos`.
struct Step {
  int T = 0;
  int64_t rows = 0, max_blocks = 0, num_seqs = 0, key_bound = 0;
  int32_t *q_pos = nullptr, *token_seq = nullptr, *block_tables = nullptr, *allowed = nullptr;
  int32_t* row_len = nullptr;
  double keys = 0;        // valid (query, key) pairs of the attention lists
  double score_keys = 0;  // (query, key) pairs the indexer scores
};

Step make_step(const std::vector<int64_t>& ctx, const std::vector<int32_t>& seq,
               const std::vector<int32_t>& pos, uint32_t seed) {
  Step s;
  s.T = static_cast<int>(pos.size());
  s.num_seqs = static_cast<int64_t>(ctx.size());
  int64_t total = 0;
  for (int64_t c : ctx) {
    s.max_blocks = std::max(s.max_blocks, (c + kBlock - 1) / kBlock);
    total += (c + kBlock - 1) / kBlock;
  }
  std::vector<int32_t> ids(total);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 g(seed);
  std::shuffle(ids.begin(), ids.end(), g);
  std::vector<int32_t> table(s.num_seqs * s.max_blocks, -1);
  int64_t next = 0;
  for (int64_t q = 0; q < s.num_seqs; ++q)
    for (int64_t b = 0; b < (ctx[q] + kBlock - 1) / kBlock; ++b)
      table[q * s.max_blocks + b] = ids[next++];
  s.rows = total * kBlock;
  s.key_bound = *std::max_element(pos.begin(), pos.end()) + 1;
  // DSA lists: every position up to kTopk, else kTopk of them chosen at random; ascending, −1s.
  std::vector<int32_t> allowed(static_cast<size_t>(s.T) * kTopk, -1), row_len(s.T);
  std::vector<int32_t> cand;
  for (int t = 0; t < s.T; ++t) {
    const int32_t n = pos[t] + 1;
    row_len[t] = n;
    s.score_keys += n;
    cand.resize(n);
    std::iota(cand.begin(), cand.end(), 0);
    if (n > kTopk) {
      std::shuffle(cand.begin(), cand.end(), g);
      cand.resize(kTopk);
      std::sort(cand.begin(), cand.end());
    }
    std::copy(cand.begin(), cand.end(), allowed.begin() + static_cast<size_t>(t) * kTopk);
    s.keys += static_cast<double>(cand.size());
  }
  s.q_pos = upload(pos);
  s.token_seq = upload(seq);
  s.block_tables = upload(table);
  s.allowed = upload(allowed);
  s.row_len = upload(row_len);
  return s;
}

// The step's queries and paged keys: the same fields in the attention's and the indexer's
// parameters.
template <class Params>
void set_step(Params& p, const Step& s) {
  p.q_pos = s.q_pos;
  p.block_tables = s.block_tables;
  p.bt_ld = s.max_blocks;
  p.num_seqs = s.num_seqs;
  p.max_blocks = s.max_blocks;
  p.token_seq = s.token_seq;
  p.block_size = kBlock;
  p.num_rows = s.rows;
  p.key_bound = s.key_bound;
  p.T = s.T;
}

void bench_step(cudaStream_t stream, const char* name, const Step& s, int iters, bool decode) {
  const uint16_t* q = random_bf16(static_cast<size_t>(s.T) * kH * kDk, 0.5f, 1);
  const uint16_t* kv = random_bf16(static_cast<size_t>(s.rows) * kDk, 0.5f, 2);
  uint16_t* out = device_alloc<uint16_t>(static_cast<size_t>(s.T) * kH * kDv);
  k::AttentionParams p;
  p.q = q;
  p.q_st = kH * kDk;
  p.q_sh = kDk;
  p.k = kv;
  p.k_sr = kDk;
  p.k_sh = 0;
  p.v = kv;
  p.v_sr = kDk;
  p.v_sh = 0;
  p.out = out;
  p.o_st = kH * kDv;
  p.o_sh = kDv;
  set_step(p, s);
  p.allowed = s.allowed;
  p.allowed_k = kTopk;
  p.H = kH;
  p.Hk = 1;
  p.Dk = kDk;
  p.Dv = kDv;
  p.scale = 0.0416667f;
  // Batch invariance takes one cut for every step: timed where that is another cut.
  const auto cut_for = [&](bool invariant) {
    return mls::ops::scratch::attention_splits(s.T, kH, 1, kDv, kTopk, true, invariant);
  };
  for (const bool invariant : {false, true}) {
    const auto cut = cut_for(invariant);
    if (invariant && cut.splits == cut_for(false).splits &&
        cut.head_group == cut_for(false).head_group)
      continue;
    float* scratch = cut.floats > 0 ? device_alloc<float>(cut.floats) : nullptr;
    p.batch_invariant = invariant;
    const double us = time_graph(
        stream, iters, [&](int) { check(k::launch_attention(p, scratch, stream), "attention"); });
    const double flop = s.keys * kH * (kDk + kDv) * 2.0;
    const double bytes = s.keys * kDk * 2.0;
    std::printf("  %-22s attention %9.1f µs  %6.1f TFLOP/s (%4.1f%% of %.0f)",
                invariant ? "  batch-invariant" : name, us, flop / us * 1e-6,
                100.0 * flop / us * 1e-6 / kBf16Peak, kBf16Peak);
    if (decode)
      std::printf("  keys %.2f TB/s (%4.1f%%)", bytes / us * 1e-6,
                  100.0 * bytes / us * 1e-6 / kFloorTBs);
    std::printf("  [%ld splits of %ld keys, %ld heads a CTA]\n", static_cast<long>(cut.splits),
                static_cast<long>(cut.keys_per_split), static_cast<long>(cut.head_group));
    check(cudaFree(scratch), "free");
  }

  // The indexer over the same step: its own queries and keys, f32 head weights.
  const uint16_t* iq = random_bf16(static_cast<size_t>(s.T) * kHi * kDi, 0.5f, 3);
  const uint16_t* ik = random_bf16(static_cast<size_t>(s.rows) * kDi, 0.5f, 4);
  std::vector<float> w_host(static_cast<size_t>(s.T) * kHi, 0.03f);
  const float* w = upload(w_host);
  int32_t* chosen = device_alloc<int32_t>(static_cast<size_t>(s.T) * kTopk);
  k::IndexerParams ip;
  ip.q = iq;
  ip.q_st = kHi * kDi;
  ip.q_sh = kDi;
  ip.k = ik;
  ip.k_sr = kDi;
  ip.w = w;
  ip.w_st = kHi;
  ip.w_f32 = true;
  set_step(ip, s);
  ip.row_len = s.row_len;
  ip.Hi = kHi;
  ip.Di = kDi;
  ip.topk = kTopk;
  ip.scale = 0.0883883f;
  ip.chosen = chosen;
  const int64_t ld = k::indexer_scores_ld(ip);
  float* scores = device_alloc<float>(static_cast<size_t>(s.T) * ld);
  const double sflop = s.score_keys * kHi * kDi * 2.0;
  for (const bool groups : {false, true}) {
    if (groups && decode) continue;
    const double sus = time_graph(stream, iters, [&](int) {
      check(k::launch_indexer_scores(ip, 0, s.T, scores, ld, groups, stream), "scores");
    });
    std::printf("  %-22s indexer scores (%s) %9.1f µs  %6.1f TFLOP/s\n", name,
                groups ? "token groups" : "one token a CTA", sus, sflop / sus * 1e-6);
  }
  const double tus = time_graph(stream, iters, [&](int) {
    check(k::launch_indexer_topk(ip, 0, s.T, scores, stream), "indexer");
  });
  std::printf("  %-22s indexer scores + top-k %9.1f µs\n", name, tus);
  for (const void* ptr :
       {static_cast<const void*>(q), static_cast<const void*>(kv), static_cast<const void*>(out),
        static_cast<const void*>(iq), static_cast<const void*>(ik), static_cast<const void*>(w),
        static_cast<const void*>(chosen), static_cast<const void*>(scores)})
    check(cudaFree(const_cast<void*>(ptr)), "free");
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 10;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--iters N]\n", argv[0]);
      return 2;
    }
  }
  const cudaStream_t stream = mls::bench::open_device("attention_benchmark", iters);
  if (!stream) return 0;

  {
    std::vector<int32_t> pos(8192), seq(8192, 0);
    std::iota(pos.begin(), pos.end(), 0);
    bench_step(stream, "prefill 8192", make_step({8192}, seq, pos, 11), std::max(1, iters / 5),
               false);
  }
  for (const int b : {1, 8, 64, 256}) {
    std::vector<int32_t> pos(b, 4095), seq(b);
    std::iota(seq.begin(), seq.end(), 0);
    char name[32];
    std::snprintf(name, sizeof(name), "decode %d at 4096", b);
    bench_step(stream, name, make_step(std::vector<int64_t>(b, 4096), seq, pos, 12 + b), iters,
               true);
  }
  return 0;
}
