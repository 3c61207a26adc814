// The CUDA MoE routing ops against the CPU ops: routing (ids as sets, weights per expert),
// the expert grouping (bitwise), the weighted un-permutation, and the whole path
// route → align → gather → identity experts → unpermute; the grouped FP8 experts against a host
// emulation, and their batch invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "ops/copy.h"
#include "ops/cuda/test_util.h"
#include "ops/moe_experts.h"
#include "ops/moe_routing.h"

namespace mls::ops {
namespace {

using test::random;
using test::rel_l2;
using test::to_cpu;
using test::to_gpu;

Tensor gpu_empty(const Shape& s, DType dt) {
  return Tensor::empty(s, dt, MemTag::kActivation, test::gpu());
}

Tensor cpu_empty(const Shape& s, DType dt) {
  return Tensor::empty(s, dt, MemTag::kActivation);
}

// --- moe_route ---------------------------------------------------------------------------

// The gap at the row's selection boundaries, in the CPU op's own float arithmetic: between the
// last kept and the first dropped group score, and between the k-th and (k+1)-th biased score
// of the kept experts. Where it is tiny the CPU (torch's tie order) and the GPU (lower index
// first) may both be right yet differ. Both compute the sigmoid with a correctly rounded exp,
// so only (near-)exact ties do that; the test skips such rows, counting them.
float decision_margin(const float* logits, const float* bias, int64_t E, const RoutingArgs& a) {
  std::vector<float> sc(E);
  for (int64_t e = 0; e < E; ++e)
    sc[e] = 1.0f / (1.0f + std::exp(-logits[e])) + (bias ? bias[e] : 0.0f);
  float margin = INFINITY;
  if (a.n_group > 1) {
    const int64_t per = E / a.n_group;
    std::vector<float> gs(a.n_group);
    for (int g = 0; g < a.n_group; ++g) {
      std::vector<float> v(sc.begin() + g * per, sc.begin() + (g + 1) * per);
      std::sort(v.begin(), v.end(), std::greater<>());
      gs[g] = per >= 2 ? v[0] + v[1] : v[0];
    }
    std::vector<float> sorted = gs;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    if (a.topk_group < a.n_group) margin = sorted[a.topk_group - 1] - sorted[a.topk_group];
    const float cut = sorted[a.topk_group - 1];
    for (int64_t e = 0; e < E; ++e)
      if (gs[e / per] < cut) sc[e] = -INFINITY;
  }
  std::sort(sc.begin(), sc.end(), std::greater<>());
  if (a.top_k < E && std::isfinite(sc[a.top_k]))
    margin = std::min(margin, sc[a.top_k - 1] - sc[a.top_k]);
  return margin;
}

struct RouteCase {
  int64_t T, E;
  RoutingArgs a;
  bool bias;
};

void check_route(const RouteCase& c, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "T " << c.T << " E " << c.E << " k " << c.a.top_k << " groups "
                                  << c.a.topk_group << "/" << c.a.n_group << " bias " << c.bias
                                  << " norm " << c.a.norm_topk_prob);
  const int64_t T = c.T, E = c.E, K = c.a.top_k;
  const Tensor logits = random({T, E}, seed, 1.5f);
  Tensor bias;
  if (c.bias) bias = random({E}, seed + 1, 0.3f);
  Tensor ids = cpu_empty({T, K}, DType::kI32), w = cpu_empty({T, K}, DType::kF32);
  cpu::moe_route(logits, bias, c.a, ids, w);

  Tensor g_bias = c.bias ? to_gpu(bias, DType::kF32) : Tensor();
  Tensor g_ids = gpu_empty({T, K}, DType::kI32), g_w = gpu_empty({T, K}, DType::kF32);
  moe_route(to_gpu(logits, DType::kF32), g_bias, c.a, g_ids, g_w);
  const Tensor h_ids = to_cpu(g_ids), h_w = to_cpu(g_w);

  int64_t skipped = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* ci = ids.data<int32_t>() + t * K;
    const int32_t* gi = h_ids.data<int32_t>() + t * K;
    std::vector<int32_t> gs(gi, gi + K);
    std::sort(gs.begin(), gs.end());
    ASSERT_TRUE(std::adjacent_find(gs.begin(), gs.end()) == gs.end()) << "row " << t;
    ASSERT_TRUE(gs.front() >= 0 && gs.back() < E) << "row " << t;
    if (decision_margin(logits.data<float>() + t * E, c.bias ? bias.data<float>() : nullptr, E,
                        c.a) <= 1e-6f) {
      ++skipped;
      continue;
    }
    std::vector<int32_t> cs(ci, ci + K);
    std::sort(cs.begin(), cs.end());
    ASSERT_EQ(cs, gs) << "row " << t;
    // The weights: same sigmoid values, but the normaliser's k-term sum runs in another order
    // (CPU: torch's; GPU: descending score), so they differ by at most (k − 1)·2⁻²⁴ of the sum
    // plus two roundings: below 1e-6 relative for k ≤ 16.
    for (int64_t i = 0; i < K; ++i) {
      const int64_t j = std::find(gi, gi + K, ci[i]) - gi;
      const float ref = w.data<float>()[t * K + i], got = h_w.data<float>()[t * K + j];
      ASSERT_LE(std::abs(got - ref), 1e-6f * std::abs(ref))
          << "row " << t << " expert " << ci[i] << ": " << got << " vs " << ref;
    }
  }
  // Ties within 1e-6 at a boundary are rare with continuous random logits: about one row in
  // a thousand at most.
  EXPECT_LE(skipped, T / 500 + 1);
}

TEST(MoeCuda, RouteMatchesCpu) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int64_t T : {1, 37, 4096})
    for (bool bias : {false, true})
      for (bool norm : {true, false}) {
        // GLM-5: 256 experts, top-8, one group; DeepSeek-V3: 8 groups, 4 kept.
        check_route({T, 256, {1, 1, 8, norm, 2.5f}, bias}, seed++);
        check_route({T, 256, {8, 4, 8, norm, 2.5f}, bias}, seed++);
        // Small and odd expert counts: a partial lane set, groups of two, one expert per group.
        check_route({T, 16, {1, 1, 4, norm, 1.0f}, bias}, seed++);
        check_route({T, 72, {4, 2, 6, norm, 1.0f}, bias}, seed++);
        check_route({T, 8, {8, 3, 2, norm, 1.0f}, bias}, seed++);
      }
  // The largest of each limit: 1024 experts, top-32, 32 groups; and top-16 of 512.
  check_route({64, 1024, {32, 8, 32, true, 1.0f}, true}, seed++);
  check_route({64, 512, {1, 1, 16, true, 1.0f}, false}, seed++);
}

TEST(MoeCuda, RouteWritesStridedOutputs) {
  MLS_REQUIRE_GPU();
  const int64_t T = 37, E = 64, K = 4;
  const RoutingArgs a{1, 1, K, true, 1.0f};
  const Tensor logits = random({T, E}, 7);
  Tensor ids = gpu_empty({T, K}, DType::kI32), w = gpu_empty({T, K}, DType::kF32);
  moe_route(to_gpu(logits, DType::kF32), Tensor(), a, ids, w);
  // The same outputs written into column views of wider buffers.
  Tensor wide_ids = gpu_empty({T, 3 * K}, DType::kI32), wide_w = gpu_empty({T, 3 * K}, DType::kF32);
  Tensor v_ids = wide_ids.narrow(1, K, K), v_w = wide_w.narrow(1, K, K);
  moe_route(to_gpu(logits, DType::kF32), Tensor(), a, v_ids, v_w);
  Tensor c_ids = gpu_empty({T, K}, DType::kI32), c_w = gpu_empty({T, K}, DType::kF32);
  copy(v_ids, c_ids);
  copy(v_w, c_w);
  const Tensor x = to_cpu(ids), y = to_cpu(c_ids), p = to_cpu(w), q = to_cpu(c_w);
  for (int64_t i = 0; i < T * K; ++i) {
    ASSERT_EQ(x.data<int32_t>()[i], y.data<int32_t>()[i]);
    ASSERT_EQ(p.data<float>()[i], q.data<float>()[i]);
  }
}

TEST(MoeCuda, RouteRejectsBadShapes) {
  MLS_REQUIRE_GPU();
  const Tensor logits = to_gpu(random({4, 64}, 1), DType::kF32);
  Tensor ids = gpu_empty({4, 8}, DType::kI32), w = gpu_empty({4, 8}, DType::kF32);
  EXPECT_THROW(moe_route(logits, Tensor(), {3, 1, 8, true, 1.0f}, ids, w), ShapeError);
  EXPECT_THROW(moe_route(logits, Tensor(), {1, 1, 4, true, 1.0f}, ids, w), ShapeError);
  Tensor host_ids = cpu_empty({4, 8}, DType::kI32);
  EXPECT_THROW(moe_route(logits, Tensor(), {1, 1, 8, true, 1.0f}, host_ids, w), ShapeError);
  const Tensor many = to_gpu(random({4, 2048}, 1), DType::kF32);
  EXPECT_THROW(moe_route(many, Tensor(), {1, 1, 8, true, 1.0f}, ids, w), Unsupported);
}

// --- moe_align ---------------------------------------------------------------------------

enum class Skew { kUniform, kHot, kOneExpert, kPowerLaw };

Tensor random_ids(int64_t T, int64_t K, int64_t E, Skew skew, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(E - 1));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Tensor ids = cpu_empty({T, K}, DType::kI32);
  for (int64_t i = 0; i < T * K; ++i) {
    int32_t id = any(g);
    if (skew == Skew::kHot && u(g) < 0.9) id = static_cast<int32_t>(E / 3);
    if (skew == Skew::kOneExpert) id = static_cast<int32_t>(E - 1);
    if (skew == Skew::kPowerLaw)  // expert e with probability ∝ 1/(e+1)^2
      id = std::min<int32_t>(static_cast<int32_t>(E - 1),
                             static_cast<int32_t>(std::floor(1.0 / std::sqrt(u(g) + 1e-12))) - 1);
    ids.data<int32_t>()[i] = id;
  }
  return ids;
}

void expect_same_ints(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(got.data<int32_t>()[i], want.data<int32_t>()[i]) << what << " [" << i << "]";
}

void check_align(int64_t T, int64_t K, int64_t E, Skew skew, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "T " << T << " k " << K << " E " << E << " skew "
                                  << static_cast<int>(skew));
  const Tensor ids = random_ids(T, K, E, skew, seed);
  Tensor src = cpu_empty({T * K}, DType::kI32), dest = cpu_empty({T, K}, DType::kI32),
         off = cpu_empty({E + 1}, DType::kI32);
  cpu::moe_align(ids, E, src, dest, off);
  Tensor g_src = gpu_empty({T * K}, DType::kI32), g_dest = gpu_empty({T, K}, DType::kI32),
         g_off = gpu_empty({E + 1}, DType::kI32);
  moe_align(to_gpu(ids, DType::kI32), E, g_src, g_dest, g_off);
  expect_same_ints(to_cpu(g_off), off, "offsets");
  expect_same_ints(to_cpu(g_src), src, "src_token");
  expect_same_ints(to_cpu(g_dest), dest, "dest_row");
}

TEST(MoeCuda, AlignMatchesCpuBitwise) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 500;
  // Decode sizes take the one-CTA path, prefill sizes the three-kernel path; T = 0 writes only
  // zero offsets.
  for (int64_t T : {0, 1, 5, 37, 256, 257, 1000, 8192})
    for (Skew skew : {Skew::kUniform, Skew::kHot, Skew::kOneExpert, Skew::kPowerLaw}) {
      check_align(T, 8, 256, skew, seed++);
      check_align(T, 6, 72, skew, seed++);
    }
  for (Skew skew : {Skew::kUniform, Skew::kOneExpert, Skew::kPowerLaw}) {
    check_align(65536, 8, 256, skew, seed++);   // 2048 warps of 256 pairs
    check_align(65536, 16, 512, skew, seed++);  // more pairs per warp, the most experts asked
  }
  check_align(3000, 3, 1, Skew::kUniform, seed++);
  check_align(4096, 1, 1024, Skew::kUniform, seed++);
  check_align(20000, 8, 1024, Skew::kPowerLaw, seed++);
}

TEST(MoeCuda, AlignReadsStridedIds) {
  MLS_REQUIRE_GPU();
  const int64_t T = 300, K = 8, E = 64;
  const Tensor ids = random_ids(T, K, E, Skew::kUniform, 9);
  Tensor src = cpu_empty({T * K}, DType::kI32), dest = cpu_empty({T, K}, DType::kI32),
         off = cpu_empty({E + 1}, DType::kI32);
  cpu::moe_align(ids, E, src, dest, off);
  // The ids as columns [K, 2K) of a [T, 3K] buffer.
  Tensor wide = gpu_empty({T, 3 * K}, DType::kI32);
  Tensor view = wide.narrow(1, K, K);
  copy(to_gpu(ids, DType::kI32), view);
  Tensor g_src = gpu_empty({T * K}, DType::kI32), g_dest = gpu_empty({T, K}, DType::kI32),
         g_off = gpu_empty({E + 1}, DType::kI32);
  moe_align(view, E, g_src, g_dest, g_off);
  expect_same_ints(to_cpu(g_off), off, "offsets");
  expect_same_ints(to_cpu(g_src), src, "src_token");
  expect_same_ints(to_cpu(g_dest), dest, "dest_row");
}

TEST(MoeCuda, AlignDropsIdsOutOfRange) {
  MLS_REQUIRE_GPU();
  // The CPU op raises on such ids; the GPU cannot, and must not write out of bounds.
  for (int64_t T : {3, 5000}) {
    Tensor ids = random_ids(T, 2, 8, Skew::kUniform, 3);
    ids.data<int32_t>()[1] = 8;
    ids.data<int32_t>()[2] = -5;
    Tensor g_src = gpu_empty({T * 2}, DType::kI32), g_dest = gpu_empty({T, 2}, DType::kI32),
           g_off = gpu_empty({9}, DType::kI32);
    moe_align(to_gpu(ids, DType::kI32), 8, g_src, g_dest, g_off);
    const Tensor off = to_cpu(g_off), src = to_cpu(g_src), dest = to_cpu(g_dest);
    EXPECT_EQ(off.data<int32_t>()[8], T * 2 - 2);
    EXPECT_EQ(dest.data<int32_t>()[1], -1);
    EXPECT_EQ(dest.data<int32_t>()[2], -1);
    EXPECT_EQ(src.data<int32_t>()[T * 2 - 1], -1);
    EXPECT_EQ(src.data<int32_t>()[T * 2 - 2], -1);
  }
}

// --- moe_unpermute -------------------------------------------------------------------------

// A grouping of T·K pairs over E experts and random weights, on the CPU.
struct Routing {
  Tensor dest, w;
};

Routing random_routing(int64_t T, int64_t K, int64_t E, uint32_t seed) {
  const Tensor ids = random_ids(T, K, E, Skew::kUniform, seed);
  Routing r{cpu_empty({T, K}, DType::kI32), random({T, K}, seed + 1, 0.5f)};
  Tensor src = cpu_empty({T * K}, DType::kI32), off = cpu_empty({E + 1}, DType::kI32);
  cpu::moe_align(ids, E, src, r.dest, off);
  return r;
}

void check_unpermute(int64_t T, int64_t K, int64_t H, DType y_dt, DType out_dt, int64_t pad,
                     uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "T " << T << " k " << K << " H " << H << " y "
                                  << dtype_name(y_dt) << " out " << dtype_name(out_dt) << " pad "
                                  << pad);
  const Routing r = random_routing(T, K, 64, seed);
  const Tensor y = random({T * K, H}, seed + 2);
  // The reference on the values the GPU reads (bf16-rounded when y is bf16).
  const Tensor y_seen = y_dt == DType::kBF16 ? test::bf16_rounded(y) : y;
  Tensor ref = cpu_empty({T, H}, DType::kF32);
  cpu::moe_unpermute(y_seen, r.dest, r.w, ref);

  // out as a row-strided view when pad > 0.
  Tensor out_buf = gpu_empty({T, H + pad}, out_dt);
  Tensor out = out_buf.narrow(1, 0, H);
  moe_unpermute(to_gpu(y, y_dt), to_gpu(r.dest, DType::kI32), to_gpu(r.w, DType::kF32), out);
  Tensor packed = gpu_empty({T, H}, out_dt);
  copy(out, packed);
  const Tensor got = to_cpu(packed);
  // f32 out: the same fp32 sum in the same order with unfused products as the CPU, so equal
  // up to the last bit (1e-6 leaves room for a host compiler that contracts to FMA).
  // bf16 out: one round-to-nearest-even of that sum: at most 2⁻⁸ relative per element (half
  // an ulp of an 8-bit significand), about 1.7e-3 relative L2 for random data.
  EXPECT_LE(rel_l2(got, ref), out_dt == DType::kBF16 ? 3e-3 : 1e-6);
  if (out_dt == DType::kBF16)
    for (int64_t i = 0; i < T * H; ++i) {
      const float want = ref.data<float>()[i], have = got.data<float>()[i];
      ASSERT_LE(std::abs(have - want), std::ldexp(std::abs(want), -8) * 1.0001f) << "at " << i;
    }
}

TEST(MoeCuda, UnpermuteMatchesCpu) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 900;
  for (DType y_dt : {DType::kBF16, DType::kF32})
    for (DType out_dt : {DType::kBF16, DType::kF32}) {
      check_unpermute(1, 8, 6144, y_dt, out_dt, 0, seed++);    // decode, GLM-5 hidden size
      check_unpermute(37, 8, 6144, y_dt, out_dt, 64, seed++);  // row-strided out
      check_unpermute(256, 8, 1024, y_dt, out_dt, 0, seed++);
      check_unpermute(37, 6, 100, y_dt, out_dt, 0, seed++);  // H % 8 != 0: scalar path
      check_unpermute(37, 8, 512, y_dt, out_dt, 3, seed++);  // misaligned rows: scalar path
      check_unpermute(9, 20, 64, y_dt, out_dt, 0, seed++);   // k past one batch of 8 slots
    }
  check_unpermute(0, 8, 64, DType::kBF16, DType::kBF16, 0, seed++);
}

// --- the whole path ------------------------------------------------------------------------

// Routing, grouping, gathering each pair's token row, identity experts and the weighted sum
// give Σ_i w[t, i]·x[t] for every token.
void check_round_trip(int64_t T, int64_t E, const RoutingArgs& a, int64_t H, DType dt,
                      uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "T " << T << " E " << E << " k " << a.top_k << " H " << H
                                  << " " << dtype_name(dt));
  const int64_t K = a.top_k;
  const Tensor x = random({T, H}, seed);
  const Tensor g_x = to_gpu(x, dt);
  Tensor ids = gpu_empty({T, K}, DType::kI32), w = gpu_empty({T, K}, DType::kF32);
  moe_route(to_gpu(random({T, E}, seed + 1), DType::kF32), Tensor(), a, ids, w);
  Tensor src = gpu_empty({T * K}, DType::kI32), dest = gpu_empty({T, K}, DType::kI32),
         off = gpu_empty({E + 1}, DType::kI32);
  moe_align(ids, E, src, dest, off);
  Tensor xin = gpu_empty({T * K, H}, dt);
  gather_rows(g_x, src, xin);
  Tensor out = gpu_empty({T, H}, dt);
  moe_unpermute(xin, dest, w, out);

  const Tensor h_off = to_cpu(off), h_w = to_cpu(w), got = to_cpu(out);
  EXPECT_EQ(h_off.data<int32_t>()[E], T * K);
  const Tensor x_seen = dt == DType::kBF16 ? test::bf16_rounded(x) : x;
  Tensor want = cpu_empty({T, H}, DType::kF32);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float acc = 0.0f;
      for (int64_t i = 0; i < K; ++i) {
        const float p = h_w.data<float>()[t * K + i] * x_seen.data<float>()[t * H + h];
        acc += p;
      }
      want.data<float>()[t * H + h] = acc;
    }
  // As in UnpermuteMatchesCpu: exact in f32 up to FMA contraction, one bf16 rounding in bf16.
  EXPECT_LE(rel_l2(got, want), dt == DType::kBF16 ? 3e-3 : 1e-6);
}

TEST(MoeCuda, RouteAlignGatherUnpermuteRoundTrip) {
  MLS_REQUIRE_GPU();
  check_round_trip(1, 256, {1, 1, 8, true, 2.5f}, 6144, DType::kBF16, 1);
  check_round_trip(37, 256, {8, 4, 8, true, 2.5f}, 512, DType::kF32, 2);
  check_round_trip(300, 256, {1, 1, 8, true, 1.0f}, 1024, DType::kBF16, 3);
  check_round_trip(2048, 256, {1, 1, 8, false, 1.0f}, 256, DType::kF32, 4);
  check_round_trip(0, 256, {1, 1, 8, true, 1.0f}, 64, DType::kBF16, 5);
}

// --- moe_experts_fp8 ----------------------------------------------------------------------

struct Fp8Experts {
  std::vector<test::Fp8Weight> gate, up, down;
  std::vector<Tensor> dev;  // uploaded, 3 per expert
  Tensor table;             // i64 [6, E] on the GPU
};

Fp8Experts make_experts(int64_t E, int64_t H, int64_t I, uint32_t seed) {
  Fp8Experts x;
  std::vector<int64_t> host(static_cast<size_t>(kExpertTableRows * E));
  const auto put = [&](int64_t row, int64_t e, const void* p) {
    host[static_cast<size_t>(row * E + e)] = static_cast<int64_t>(reinterpret_cast<intptr_t>(p));
  };
  for (int64_t e = 0; e < E; ++e) {
    x.gate.push_back(test::make_fp8_weight(I, H, seed++));
    x.up.push_back(test::make_fp8_weight(I, H, seed++));
    x.down.push_back(test::make_fp8_weight(H, I, seed++));
    for (const test::Fp8Weight* w : {&x.gate.back(), &x.up.back(), &x.down.back()})
      x.dev.push_back(test::upload_fp8(*w));
    const Tensor* d = &x.dev[x.dev.size() - 3];
    put(kGate, e, d[0].raw());
    put(kGateScale, e, d[0].block_scale()->raw());
    put(kUp, e, d[1].raw());
    put(kUpScale, e, d[1].block_scale()->raw());
    put(kDown, e, d[2].raw());
    put(kDownScale, e, d[2].block_scale()->raw());
  }
  Tensor h = Tensor::wrap(host.data(), {kExpertTableRows, E}, DType::kI64);
  x.table = Tensor::empty(h.shape(), DType::kI64, MemTag::kWeights, test::gpu());
  copy(h, x.table);
  return x;
}

// Routes every token (ids [T, K] host) through the grouped path: align, then the experts.
// Returns y [T·K, H] (host f32) with the permutation's source tokens.
struct GroupedRun {
  Tensor y, src_token, dest_row;
};
GroupedRun run_grouped(const Fp8Experts& ex, const Tensor& x_host, const Tensor& ids_host,
                       int64_t E, int64_t I,
                       cuda::ExpertKernel kernel = cuda::ExpertKernel::kAuto) {
  const int64_t T = ids_host.dim(0), K = ids_host.dim(1), H = x_host.dim(1);
  Tensor src = gpu_empty({T * K}, DType::kI32), dest = gpu_empty({T, K}, DType::kI32);
  Tensor off = gpu_empty({E + 1}, DType::kI32);
  moe_align(to_gpu(ids_host, DType::kI32), E, src, dest, off);
  const Tensor x = to_gpu(x_host);
  Tensor h = gpu_empty({T * K, I}, DType::kBF16), y = gpu_empty({T * K, H}, DType::kBF16);
  const ExpertShapes s{.hidden = H,
                       .inter = I,
                       .gate_up_scale_ld = (H + 127) / 128,
                       .down_scale_ld = (I + 127) / 128};
  if (kernel == cuda::ExpertKernel::kAuto)
    moe_experts_fp8(x, dest, off, ex.table, s, h, y);
  else
    cuda::moe_experts_fp8(x, dest, off, ex.table, s, h, y, kernel);
  return {to_cpu(y), to_cpu(src), to_cpu(dest)};
}

// Against a host emulation of the same arithmetic (rows quantised per 128-group to e4m3,
// dequantised weights, SiLU(gate)·up rounded to bf16 and quantised again for down): only fp32
// summation order and the bf16 roundings differ, plus the rare e4m3 rounding of an
// intermediate tipped by them, so the FP8 linear's emulated tolerance (4e-3 rel-L2) holds; a
// wrong expert, scale or row would not. Experts with no rows, with one row, and with more rows
// than one tile; widths not multiples of 128 (partial K blocks and weight tiles).
void check_grouped_against_emulation(int64_t T, cuda::ExpertKernel kernel) {
  const int64_t E = 12, H = 400, I = 208, K = 3;
  const Fp8Experts ex = make_experts(E, H, I, 500);
  std::vector<int32_t> ids(T * K);
  std::mt19937 g(9);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * K] = 0;  // expert 0 takes every token: several tiles, the last one partial
    ids[t * K + 1] = 1 + static_cast<int32_t>(g() % 5);
    ids[t * K + 2] = 6 + static_cast<int32_t>(g() % 4);  // experts 10, 11 stay empty
  }
  ids[5 * K + 2] = 10;  // expert 10: a single row
  Tensor ids_host = cpu_empty({T, K}, DType::kI32);
  std::copy(ids.begin(), ids.end(), ids_host.data<int32_t>());
  const Tensor x = test::round_bf16(random({T, H}, 77));
  const GroupedRun got = run_grouped(ex, x, ids_host, E, I, kernel);

  Tensor want = cpu_empty({T * K, H}, DType::kF32);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < K; ++i) {
      const int64_t r = got.dest_row.data<int32_t>()[t * K + i];
      ASSERT_EQ(got.src_token.data<int32_t>()[r], t);
      const auto e = static_cast<size_t>(ids[t * K + i]);
      Tensor xr = cpu_empty({1, H}, DType::kF32);
      std::copy(x.data<float>() + t * H, x.data<float>() + (t + 1) * H, xr.data<float>());
      const Tensor xq = test::emulate_act_quant(xr);
      Tensor hr = cpu_empty({1, I}, DType::kF32);
      for (int64_t n = 0; n < I; ++n) {
        double gs = 0, us = 0;
        for (int64_t k = 0; k < H; ++k) {
          gs += static_cast<double>(xq.data<float>()[k]) * ex.gate[e].deq.data<float>()[n * H + k];
          us += static_cast<double>(xq.data<float>()[k]) * ex.up[e].deq.data<float>()[n * H + k];
        }
        const double v = gs / (1.0 + std::exp(-gs)) * us;
        hr.data<float>()[n] = bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
      }
      const Tensor hq = test::emulate_act_quant(hr);
      for (int64_t n = 0; n < H; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < I; ++k)
          acc += static_cast<double>(hq.data<float>()[k]) * ex.down[e].deq.data<float>()[n * I + k];
        want.data<float>()[r * H + n] = static_cast<float>(acc);
      }
    }
  const double err = rel_l2(got.y, want);
  std::printf("%ld tokens, kernel %d: rel-L2 %.2e\n", static_cast<long>(T),
              static_cast<int>(kernel), err);
  EXPECT_LE(err, 4e-3) << T << " tokens";
}

// 69 rows: the skinny kernel (three 8-row tiles for expert 0), and the same kernel forced on
// 2,100 rows.
TEST(MoeCuda, GroupedFp8ExpertsMatchEmulation) {
  MLS_REQUIRE_GPU();
  check_grouped_against_emulation(23, cuda::ExpertKernel::kAuto);
  check_grouped_against_emulation(700, cuda::ExpertKernel::kSkinny);
}

// 2,100 rows, past scratch::kMoeSkinnyMaxPairs: the tensor-core kernel (expert 0's 700 rows in
// six 128-row tiles, the last partial), and the same kernel forced on 69 rows.
TEST(MoeCuda, GroupedFp8ExpertsOnTensorCoresMatchEmulation) {
  MLS_REQUIRE_GPU();
  static_assert(700 * 3 > scratch::kMoeSkinnyMaxPairs);
  check_grouped_against_emulation(700, cuda::ExpertKernel::kAuto);
  check_grouped_against_emulation(23, cuda::ExpertKernel::kTensorCores);
}

// A token's rows depend on that token alone: run by itself, its expert outputs equal, bit for
// bit, the ones it got inside the batch (what the engine's batch invariance rests on). The
// batches' means of 4.75 and 10 rows per expert make the launcher split each gate·up tile's rows
// between 2 and 3 CTAs; the single token takes one.
TEST(MoeCuda, GroupedFp8ExpertsAreBatchInvariant) {
  MLS_REQUIRE_GPU();
  const int64_t E = 8, H = 256, I = 128, K = 2;
  const Fp8Experts ex = make_experts(E, H, I, 900);
  for (const int64_t T : {19, 40}) {
    Tensor ids = cpu_empty({T, K}, DType::kI32);
    std::mt19937 g(3);
    for (int64_t t = 0; t < T; ++t) {
      ids.data<int32_t>()[t * K] = static_cast<int32_t>(g() % 4);
      ids.data<int32_t>()[t * K + 1] = 4 + static_cast<int32_t>(g() % 4);
    }
    const Tensor x = test::round_bf16(random({T, H}, 78));
    const GroupedRun all = run_grouped(ex, x, ids, E, I);
    for (int64_t t : {int64_t{0}, int64_t{11}, T - 1}) {
      Tensor one_ids = cpu_empty({1, K}, DType::kI32), one_x = cpu_empty({1, H}, DType::kF32);
      std::copy(ids.data<int32_t>() + t * K, ids.data<int32_t>() + (t + 1) * K,
                one_ids.data<int32_t>());
      std::copy(x.data<float>() + t * H, x.data<float>() + (t + 1) * H, one_x.data<float>());
      const GroupedRun one = run_grouped(ex, one_x, one_ids, E, I);
      for (int64_t i = 0; i < K; ++i) {
        const int64_t rb = all.dest_row.data<int32_t>()[t * K + i];
        const int64_t r1 = one.dest_row.data<int32_t>()[i];
        for (int64_t n = 0; n < H; ++n)
          ASSERT_EQ(all.y.data<float>()[rb * H + n], one.y.data<float>()[r1 * H + n])
              << T << " tokens: token " << t << " slot " << i << " column " << n;
      }
    }
  }
}

}  // namespace
}  // namespace mls::ops
