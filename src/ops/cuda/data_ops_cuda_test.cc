// The CUDA data-path ops (copy, row scatter/gather, norms, RoPE, elementwise) against the CPU
// ops on the same inputs, rounded to bf16 where the GPU sees bf16. Shapes cover every kernel
// path (vectorised and scalar, warp- and block-per-row), strided views, aliasing and the GLM-5
// sizes. Tolerances: an output stored as bf16 may differ from the fp32 reference by its own
// rounding, at most half an ulp = 2^-8 relative, so elements must agree within 4e-3·|ref|
// (2^-8 plus fp32 order differences, ~1e-6); f32 outputs within 2e-5·|ref| (fp32 reductions in
// another order). Both add 1e-5·rms(ref) for values that cancel to near zero. Data moves and
// fills are compared bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda/clock_probe_kernels.h"
#include "ops/cuda/test_util.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/test_inputs.h"

namespace mls::ops::test {
namespace {

constexpr DType kBF = DType::kBF16;
constexpr DType kF = DType::kF32;

double out_tol(DType t) {
  return t == kBF ? kBf16OutTol : kF32OutTol;
}
std::string dn(DType t) {
  return std::string(dtype_name(t));
}

Tensor host_empty(const Shape& s, DType d = kF) {
  return Tensor::empty(s, d, MemTag::kActivation);
}

// A contiguous host copy of a (possibly strided) host tensor.
Tensor contiguous(const Tensor& h) {
  Tensor out = host_empty(h.shape(), h.dtype());
  copy(h, out);
  return out;
}

// The host f32 values as a kernel reading dtype `d` sees them.
Tensor seen_as(const Tensor& host, DType d) {
  return d == kBF ? bf16_rounded(contiguous(host)) : contiguous(host);
}

// Every element within rtol·|ref| + atol·rms(ref) (rtol = atol = 0: bitwise equal values).
::testing::AssertionResult close(const Tensor& got, const Tensor& ref, double rtol,
                                 double atol = 1e-5) {
  if (!(got.shape() == ref.shape()))
    return ::testing::AssertionFailure() << got.str() << " vs " << ref.str();
  const float* g = got.data<float>();
  const float* r = ref.data<float>();
  double ss = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) ss += static_cast<double>(r[i]) * r[i];
  const double abs_tol = rtol == 0 ? 0 : atol * std::sqrt(ss / std::max<int64_t>(ref.numel(), 1));
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double d = std::fabs(static_cast<double>(g[i]) - r[i]);
    if (!(d <= rtol * std::fabs(r[i]) + abs_tol)) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << ref.numel() << " elements off; first at " << first << ": got "
         << g[first] << " want " << r[first] << " (rel_l2 " << rel_l2(got, ref) << ")";
}

Tensor norm_weight(int64_t n, uint32_t seed) {
  Tensor w = random({n}, seed, 0.2f);
  for (int64_t i = 0; i < n; ++i) w.data<float>()[i] += 1.0f;
  return w;
}

// ---------------------------------------------------------------- the bench's clock probe

// The bench's clock probe (clock_probe_kernels.h): it spins at least the cycles asked, and cycles
// over nanoseconds is a clock an SM can run at.
TEST(CudaClockProbe, SpinsTheCyclesAskedAtAPlausibleClock) {
  MLS_REQUIRE_GPU();
  uint64_t* out = nullptr;
  ASSERT_EQ(
      cudaHostAlloc(reinterpret_cast<void**>(&out), 2 * sizeof(uint64_t), cudaHostAllocMapped),
      cudaSuccess);
  constexpr int64_t kCycles = 200'000;
  ASSERT_EQ(cuda::kernels::launch_sm_clock_probe(out, kCycles, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double mhz = static_cast<double>(out[0]) / static_cast<double>(out[1]) * 1e3;
  EXPECT_GE(out[0], static_cast<uint64_t>(kCycles));
  EXPECT_GT(mhz, 200.0);
  EXPECT_LT(mhz, 3000.0);
  std::printf("clock probe: %llu cycles in %llu ns, %.0f MHz\n",
              static_cast<unsigned long long>(out[0]), static_cast<unsigned long long>(out[1]),
              mhz);
  cudaFreeHost(out);
}

// ---------------------------------------------------------------- copy, scatter, gather

TEST(CudaCopy, HostDeviceRoundTripIsExact) {
  MLS_REQUIRE_GPU();
  const Tensor h = random({123, 77}, 1);
  EXPECT_TRUE(close(to_cpu(to_gpu(h, kF)), h, 0));
  const Tensor ints = ids({0, -1, 7, 2147483647, -2147483647, 42});
  const Tensor back = to_cpu(to_gpu(ints, DType::kI32));
  EXPECT_EQ(std::memcmp(back.raw(), ints.raw(), ints.nbytes()), 0);
  // f32 -> bf16 on the device rounds to nearest even, as the host conversion does.
  const Tensor b = to_cpu(to_gpu(h, kBF));
  for (int64_t i = 0; i < h.numel(); ++i)
    ASSERT_EQ(b.data<float>()[i], bf16_to_f32(f32_to_bf16(h.data<float>()[i]))) << i;
}

TEST(CudaCopy, StridedConvertingCopiesMatchCpu) {
  MLS_REQUIRE_GPU();
  // 2-D: a column window of a wider buffer, f32 -> bf16 into a contiguous tensor.
  const Tensor buf_h = random({33, 64}, 2);
  const Tensor buf = to_gpu(buf_h, kF);
  Tensor dst = dev_empty({33, 50}, kBF);
  copy(buf.narrow(1, 3, 50), dst);
  EXPECT_TRUE(close(to_cpu(dst), seen_as(buf_h.narrow(1, 3, 50), kBF), 0));

  // bf16 -> f32 into a strided window; the rest of the destination stays as it was.
  const Tensor src_h = random({33, 50}, 3);
  const Tensor src = to_gpu(src_h, kBF);
  const Tensor out_h = random({33, 64}, 4);
  Tensor out = to_gpu(out_h, kF);
  Tensor window = out.narrow(1, 7, 50);
  copy(src, window);
  Tensor want = contiguous(out_h);
  Tensor want_window = want.narrow(1, 7, 50);
  copy(seen_as(src_h, kBF), want_window);
  EXPECT_TRUE(close(to_cpu(out), want, 0));

  // 4-D views narrowed in every dimension, both directions of conversion and f32 -> f32.
  const Tensor big_h = random({3, 4, 6, 8}, 5);
  for (DType sd : {kF, kBF})
    for (DType dd : {kF, kBF}) {
      const Tensor big = to_gpu(big_h, sd);
      const Tensor view = big.narrow(0, 1, 2).narrow(1, 1, 3).narrow(2, 2, 4).narrow(3, 1, 5);
      Tensor d = dev_empty({2, 3, 4, 5}, dd);
      copy(view, d);
      const Tensor host_view =
          seen_as(big_h, sd).narrow(0, 1, 2).narrow(1, 1, 3).narrow(2, 2, 4).narrow(3, 1, 5);
      EXPECT_TRUE(close(to_cpu(d), seen_as(host_view, dd), 0)) << dn(sd) << " -> " << dn(dd);
    }
}

TEST(CudaCopy, ScatterRowsIntoCacheSlots) {
  MLS_REQUIRE_GPU();
  const std::vector<int32_t> slots = {5, 63, 0, 17, 18, 40, -1, 2, 33, 60};
  const int64_t T = static_cast<int64_t>(slots.size());
  const Tensor rows_h = ids(slots);
  const Tensor rows = to_gpu(rows_h, DType::kI32);
  struct Case {
    DType dtype;
    int64_t cols, src_col, dst_col, width;  // a window of `width` columns in each buffer
  };
  // 512 bf16 (16-byte words), the full 576-wide cache row, and 65 f32 (byte path).
  for (const Case& c :
       {Case{kBF, 576, 64, 0, 512}, Case{kBF, 576, 0, 0, 576}, Case{kF, 70, 1, 4, 65}}) {
    const Tensor cache_h = random({64, c.cols}, 6);
    const Tensor src_h = random({T, c.cols}, 7);
    Tensor cache = to_gpu(cache_h, c.dtype);
    const Tensor src = to_gpu(src_h, c.dtype);
    Tensor dst_view = cache.narrow(1, c.dst_col, c.width);
    scatter_rows(src.narrow(1, c.src_col, c.width), rows, dst_view);
    Tensor want = seen_as(cache_h, c.dtype);
    Tensor want_view = want.narrow(1, c.dst_col, c.width);
    scatter_rows(seen_as(src_h, c.dtype).narrow(1, c.src_col, c.width), rows_h, want_view);
    EXPECT_TRUE(close(to_cpu(cache), want, 0)) << dn(c.dtype) << " width " << c.width;
  }
}

TEST(CudaCopy, GatherRowsGivesZerosForMisses) {
  MLS_REQUIRE_GPU();
  const Tensor rows_h = ids({3, -1, 49, 0, 3, -1, 20});
  const Tensor rows = to_gpu(rows_h, DType::kI32);
  for (DType d : {kBF, kF})
    for (int64_t width : {512, 13}) {
      const Tensor src_h = random({50, width + 3}, 8);
      const Tensor src = to_gpu(src_h, d).narrow(1, 3, width);
      // Garbage in the destination: misses must be written as zeros.
      Tensor dst = to_gpu(random({7, width}, 9), d);
      gather_rows(src, rows, dst);
      Tensor want = host_empty({7, width});
      gather_rows(seen_as(src_h, d).narrow(1, 3, width), rows_h, want);
      EXPECT_TRUE(close(to_cpu(dst), want, 0)) << dn(d) << " width " << width;
      for (int64_t i = 0; i < width; ++i) ASSERT_EQ(want.data<float>()[width + i], 0.0f);
    }
}

// ---------------------------------------------------------------- norms

// Row lengths that take every path: a warp per row with 1, 2 or 4 packs of 8 (n <= 256, 512,
// 1024), a block per row (up to 16384), and the scalar kernel (n % 8 != 0, or longer rows).
const std::vector<int64_t> kNormSizes = {64,   100,  256,  512,   1000,  1024, 1001,
                                         2048, 6144, 7168, 16384, 16392, 20000};

TEST(CudaNorm, RmsNormMatchesCpuOnEveryPath) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int64_t n : kNormSizes)
    for (int64_t T : {1, 7})
      for (DType xd : {kBF, kF})
        for (DType yd : {kBF, kF}) {
          const Tensor xh = random({T, n}, ++seed, 2.0f);
          const Tensor wh = norm_weight(n, ++seed);
          Tensor ref = host_empty({T, n});
          rms_norm(seen_as(xh, xd), wh, 1e-6f, ref);
          const Tensor x = to_gpu(xh, xd);
          Tensor y = dev_empty({T, n}, yd);
          rms_norm(x, to_gpu(wh, kF), 1e-6f, y);
          EXPECT_TRUE(close(to_cpu(y), ref, out_tol(yd)))
              << "T " << T << " n " << n << " x " << dn(xd) << " y " << dn(yd);
        }
}

TEST(CudaNorm, RmsNormStridedRowsAndInPlace) {
  MLS_REQUIRE_GPU();
  const int64_t T = 9;
  const Tensor buf_h = random({T, 576}, 200, 3.0f);
  // (column offset, width): aligned windows (vector path) and a misaligned one (scalar path).
  const std::pair<int64_t, int64_t> windows[] = {{0, 512}, {64, 512}, {3, 509}, {8, 568}};
  for (auto [off, n] : windows)
    for (DType d : {kBF, kF}) {
      const Tensor wh = norm_weight(n, 201);
      const Tensor w = to_gpu(wh, kF);
      const Tensor seen = seen_as(buf_h, d);
      Tensor ref = host_empty({T, n});
      rms_norm(seen.narrow(1, off, n), wh, 1e-6f, ref);
      // Strided x into a contiguous y.
      const Tensor buf = to_gpu(buf_h, d);
      Tensor y = dev_empty({T, n}, d);
      rms_norm(buf.narrow(1, off, n), w, 1e-6f, y);
      EXPECT_TRUE(close(to_cpu(y), ref, out_tol(d))) << "strided x, off " << off << " " << dn(d);
      // In place on the strided window: the other columns are left alone.
      Tensor window = buf.narrow(1, off, n);
      rms_norm(window, w, 1e-6f, window);
      Tensor want = contiguous(seen);
      Tensor want_window = want.narrow(1, off, n);
      copy(ref, want_window);
      EXPECT_TRUE(close(to_cpu(buf), want, out_tol(d))) << "in place, off " << off << " " << dn(d);
    }
}

TEST(CudaNorm, LayerNormMatchesCpu) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 300;
  for (int64_t n : kNormSizes)
    for (DType xd : {kBF, kF})
      for (DType yd : {kBF, kF}) {
        const int64_t T = 5;
        // A mean well away from zero exercises the centred variance.
        Tensor xh = random({T, n}, ++seed, 2.0f);
        for (int64_t i = 0; i < xh.numel(); ++i) xh.data<float>()[i] += 3.0f;
        const Tensor wh = norm_weight(n, ++seed);
        const Tensor bh = random({n}, ++seed, 0.1f);
        Tensor ref = host_empty({T, n});
        layer_norm(seen_as(xh, xd), wh, bh, 1e-6f, ref);
        Tensor y = dev_empty({T, n}, yd);
        layer_norm(to_gpu(xh, xd), to_gpu(wh, kF), to_gpu(bh, kF), 1e-6f, y);
        EXPECT_TRUE(close(to_cpu(y), ref, out_tol(yd)))
            << "n " << n << " x " << dn(xd) << " y " << dn(yd);
      }
  // Strided and in place (the indexer's key norm runs on a 128-wide window).
  const Tensor buf_h = random({6, 200}, 399);
  const Tensor wh = norm_weight(128, 398), bh = random({128}, 397, 0.1f);
  Tensor buf = to_gpu(buf_h, kBF);
  Tensor window = buf.narrow(1, 8, 128);
  layer_norm(window, to_gpu(wh, kF), to_gpu(bh, kF), 1e-6f, window);
  Tensor want = seen_as(buf_h, kBF);
  Tensor want_window = want.narrow(1, 8, 128);
  layer_norm(seen_as(buf_h, kBF).narrow(1, 8, 128), wh, bh, 1e-6f, want_window);
  EXPECT_TRUE(close(to_cpu(buf), want, kBf16OutTol));
}

// add_rms_norm must equal the unfused add (rounded to x's dtype) followed by rms_norm.
void check_add_rms_norm(int64_t T, int64_t n, DType xd, DType dd, DType yd, uint32_t seed,
                        bool y_aliases_delta, int64_t delta_pad) {
  const Tensor xh = random({T, n}, seed, 1.0f);
  const Tensor dh_buf = random({T, n + delta_pad}, seed + 1, 0.5f);
  const Tensor wh = norm_weight(n, seed + 2);
  Tensor sum = host_empty({T, n});
  add(seen_as(xh, xd), seen_as(dh_buf, dd).narrow(1, delta_pad, n), sum);
  const Tensor new_x = seen_as(sum, xd);
  Tensor ref = host_empty({T, n});
  rms_norm(new_x, wh, 1e-5f, ref);

  Tensor x = to_gpu(xh, xd);
  Tensor delta_buf = to_gpu(dh_buf, dd);
  Tensor delta = delta_buf.narrow(1, delta_pad, n);
  Tensor y = y_aliases_delta ? delta : dev_empty({T, n}, yd);
  add_rms_norm(x, delta, to_gpu(wh, kF), 1e-5f, y);
  const std::string what = "T " + std::to_string(T) + " n " + std::to_string(n) + " x " + dn(xd) +
                           " delta " + dn(dd) + " y " + dn(y.dtype()) +
                           (y_aliases_delta ? " (y = delta)" : "");
  EXPECT_TRUE(close(to_cpu(x), new_x, 0)) << "residual, " << what;
  EXPECT_TRUE(close(to_cpu(y), ref, out_tol(y.dtype()))) << "y, " << what;
}

TEST(CudaNorm, AddRmsNormEqualsUnfusedAddThenNorm) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 500;
  for (int64_t n : {512, 6144, 1001, 20000})
    for (DType xd : {kBF, kF})
      for (DType dd : {kBF, kF})
        for (DType yd : {kBF, kF}) check_add_rms_norm(7, n, xd, dd, yd, seed += 3, false, 0);
  // A strided delta (aligned and not), and y written over delta.
  check_add_rms_norm(7, 6144, kBF, kBF, kBF, 600, false, 64);
  check_add_rms_norm(7, 6144, kBF, kBF, kBF, 603, false, 1);
  check_add_rms_norm(7, 6144, kBF, kBF, kBF, 606, true, 0);
  check_add_rms_norm(7, 2048, kF, kF, kF, 609, true, 8);
}

TEST(CudaNorm, PrefillSizedRows) {
  MLS_REQUIRE_GPU();
  // [8192, 6144] bf16: the prefill hidden state, many more rows than resident blocks.
  const int64_t T = 8192, n = 6144;
  const Tensor xh = random({T, n}, 700);
  const Tensor wh = norm_weight(n, 701);
  const Tensor xs = seen_as(xh, kBF);
  Tensor ref = host_empty({T, n});
  rms_norm(xs, wh, 1e-5f, ref);
  const Tensor w = to_gpu(wh, kF);
  Tensor x = to_gpu(xh, kBF);
  Tensor y = dev_empty({T, n}, kBF);
  rms_norm(x, w, 1e-5f, y);
  EXPECT_TRUE(close(to_cpu(y), ref, kBf16OutTol));
  EXPECT_LE(rel_l2(to_cpu(y), ref), 3e-3);

  const Tensor dh = random({T, n}, 702, 0.5f);
  Tensor sum = host_empty({T, n});
  add(xs, seen_as(dh, kBF), sum);
  const Tensor new_x = seen_as(sum, kBF);
  rms_norm(new_x, wh, 1e-5f, ref);
  add_rms_norm(x, to_gpu(dh, kBF), w, 1e-5f, y);
  EXPECT_TRUE(close(to_cpu(x), new_x, 0));
  EXPECT_TRUE(close(to_cpu(y), ref, kBf16OutTol));
}

TEST(CudaNorm, RejectsMisfits) {
  MLS_REQUIRE_GPU();
  const Tensor x = dev_empty({4, 64}, kBF);
  Tensor y = dev_empty({4, 64}, kBF);
  EXPECT_THROW(rms_norm(x, dev_empty({63}, kF), 1e-6f, y), ShapeError);
  EXPECT_THROW(rms_norm(x, dev_empty({64}, kBF), 1e-6f, y), ShapeError);
  Tensor y3 = dev_empty({4, 65}, kBF);
  EXPECT_THROW(rms_norm(x, dev_empty({64}, kF), 1e-6f, y3), ShapeError);
  Tensor xi = dev_empty({4, 64}, DType::kI32);
  EXPECT_THROW(add_rms_norm(xi, x, dev_empty({64}, kF), 1e-6f, y), ShapeError);
}

// ---------------------------------------------------------------- RoPE

const std::vector<int32_t> kPositions = {0,     1,      2,      7,      4095,    4096,  4097,
                                         65535, 100000, 131071, 163839, 1 << 20, 12345, 99999,
                                         3,     31,     500,    8191,   77777};

// Rotates a window of a buffer on both devices and compares the whole buffers (the values
// outside the rotated span must come back unchanged).
void check_rope(const Shape& buf_shape, int narrow_dim, int64_t narrow_start, int64_t narrow_len,
                int64_t offset, const RopeTable& table, RopeStyle style, DType d,
                const std::string& what) {
  const int64_t T = buf_shape[0];
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = kPositions[t % kPositions.size()];
  const Tensor pos_h = ids(pos);
  const Tensor buf_h = random(buf_shape, static_cast<uint32_t>(T + offset), 1.5f);

  Tensor want = seen_as(buf_h, d);
  Tensor want_view = want.narrow(narrow_dim, narrow_start, narrow_len);
  apply_rope(want_view, offset, pos_h, table, style);

  Tensor buf = to_gpu(buf_h, d);
  Tensor view = buf.narrow(narrow_dim, narrow_start, narrow_len);
  apply_rope(view, offset, to_gpu(pos_h, DType::kI32), table, style);
  const char* s = style == RopeStyle::kInterleaved ? "interleaved" : "half-split";
  EXPECT_TRUE(close(to_cpu(buf), want, out_tol(d))) << what << ", " << s << ", " << dn(d);
}

TEST(CudaRope, MatchesCpuForBothStylesWithYarn) {
  MLS_REQUIRE_GPU();
  const RopeTable yarn(test::yarn_params(), 64);
  ASSERT_NE(yarn.scaling(), 1.0f);
  RopeParamsF plain;
  plain.theta = 1e6;
  const RopeTable wide(plain, 128);  // 64 pairs: two per lane
  const RopeTable narrow_table(plain, 32);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
    for (DType d : {kBF, kF}) {
      // q: [T, 64 heads, 192 nope + 64 rope], rope last.
      check_rope({19, 64, 256}, 0, 0, 19, 192, yarn, style, d, "q [19, 64, 256]");
      // The latent row [c (512) | k_rot (64)] as 2-D.
      check_rope({37, 576}, 0, 0, 37, 512, yarn, style, d, "ckv [37, 576]");
      // The indexer's rope-first layout: 32 heads x 128, rope at offset 0.
      check_rope({11, 32, 128}, 0, 0, 11, 0, yarn, style, d, "indexer q [11, 32, 128]");
      check_rope({5, 3, 128}, 0, 0, 5, 0, wide, style, d, "dim 128, 3 heads");
      check_rope({6, 16, 48}, 0, 0, 6, 16, narrow_table, style, d, "dim 32, 16 heads");
      // Strided: a window of heads and of each head's values, and a 2-D column window.
      check_rope({7, 10, 300}, 1, 1, 8, 136, yarn, style, d, "heads 1..8 of [7, 10, 300]");
      check_rope({7, 10, 300}, 2, 20, 200, 136, yarn, style, d, "values 20..219 of 300");
      check_rope({9, 700}, 1, 61, 576, 512, yarn, style, d, "columns 61..636 of 700");
    }
}

// rope_into on the GPU: bit for bit what the GPU's apply_rope leaves in place, for the MLA
// query's rotary columns into the latent query's (both strided), and within the rope tolerance of
// the CPU op.
TEST(CudaRope, IntoEqualsApplyRopeInPlace) {
  MLS_REQUIRE_GPU();
  const RopeTable table(test::yarn_params(), 64);
  const Tensor pos_h = ids({3, 0, 4095, 77, 12});
  const Tensor pos = to_gpu(pos_h, DType::kI32);
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalfSplit})
    for (DType d : {kBF, kF}) {
      const Tensor q_h = random({5, 16, 192}, 31);
      const Tensor q = to_gpu(q_h, d);
      Tensor lat = dev_empty({5, 16, 576}, d);
      Tensor out = lat.narrow(2, 512, 64);
      rope_into(q.narrow(2, 128, 64), pos, table, style, out);
      Tensor in_place = to_gpu(q_h, d);
      Tensor rot = in_place.narrow(2, 128, 64);
      apply_rope(rot, 0, pos, table, style);
      const Tensor got = to_cpu(out), want = to_cpu(rot);
      ASSERT_TRUE(close(got, want, 0)) << dn(d);
      Tensor cpu_out = host_empty({5, 16, 64});
      rope_into(seen_as(q_h, d).narrow(2, 128, 64), pos_h, table, style, cpu_out);
      EXPECT_TRUE(close(got, cpu_out, out_tol(d))) << dn(d);
    }
}

TEST(CudaRope, RejectsMisfits) {
  MLS_REQUIRE_GPU();
  const RopeTable table(test::yarn_params(), 64);
  const Tensor pos = to_gpu(ids({0, 1}), DType::kI32);
  Tensor x = dev_empty({2, 4, 60}, kBF);
  EXPECT_THROW(apply_rope(x, 0, pos, table, RopeStyle::kHalfSplit), ShapeError);
  Tensor y = dev_empty({3, 4, 64}, kBF);
  EXPECT_THROW(apply_rope(y, 0, pos, table, RopeStyle::kHalfSplit), ShapeError);
  RopeParamsF plain;
  const RopeTable too_wide(plain, 256);
  Tensor z = dev_empty({2, 256}, kBF);
  EXPECT_THROW(apply_rope(z, 0, pos, too_wide, RopeStyle::kHalfSplit), Unsupported);
}

// ---------------------------------------------------------------- elementwise

TEST(CudaElementwise, SiluMulMatchesCpu) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 800;
  for (int64_t I : {2048, 1001, 8})
    for (DType in : {kBF, kF})
      for (DType out_d : {kBF, kF}) {
        const int64_t T = 6;
        // gate and up as the two halves of one fused [T, 2I] projection (strided rows).
        const Tensor gu_h = random({T, 2 * I}, ++seed, 2.0f);
        const Tensor seen = seen_as(gu_h, in);
        Tensor ref = host_empty({T, I});
        silu_mul(seen.narrow(1, 0, I), seen.narrow(1, I, I), ref);
        const Tensor gu = to_gpu(gu_h, in);
        Tensor out = dev_empty({T, I}, out_d);
        silu_mul(gu.narrow(1, 0, I), gu.narrow(1, I, I), out);
        EXPECT_TRUE(close(to_cpu(out), ref, out_tol(out_d)))
            << "strided, I " << I << " " << dn(in) << " -> " << dn(out_d);
        // Contiguous inputs, result written over the gate.
        Tensor gate = to_gpu(contiguous(gu_h.narrow(1, 0, I)), in);
        const Tensor up = to_gpu(contiguous(gu_h.narrow(1, I, I)), in);
        silu_mul(gate, up, gate);
        EXPECT_TRUE(close(to_cpu(gate), ref, out_tol(in))) << "in place, I " << I << " " << dn(in);
      }
}

TEST(CudaElementwise, AddAndScaleMatchCpu) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 900;
  for (int64_t N : {6144, 1001, 16})
    for (DType ad : {kBF, kF})
      for (DType bd : {kBF, kF})
        for (DType od : {kBF, kF}) {
          const int64_t T = 5;
          const Tensor ah = random({T, N}, ++seed), bh_buf = random({T, N + 8}, ++seed);
          Tensor ref = host_empty({T, N});
          add(seen_as(ah, ad), seen_as(bh_buf, bd).narrow(1, 8, N), ref);
          const Tensor b = to_gpu(bh_buf, bd).narrow(1, 8, N);
          Tensor out = dev_empty({T, N}, od);
          add(to_gpu(ah, ad), b, out);
          EXPECT_TRUE(close(to_cpu(out), ref, out_tol(od)))
              << "add N " << N << " " << dn(ad) << " + " << dn(bd) << " -> " << dn(od);
          if (ad == od) {  // out aliasing a
            Tensor a = to_gpu(ah, ad);
            add(a, b, a);
            EXPECT_TRUE(close(to_cpu(a), ref, out_tol(od))) << "add in place N " << N;
          }
          if (bd != kBF) continue;
          for (float alpha : {0.125f, -1.7f}) {
            Tensor sref = host_empty({T, N});
            scale(seen_as(ah, ad), alpha, sref);
            Tensor s = dev_empty({T, N}, od);
            scale(to_gpu(ah, ad), alpha, s);
            EXPECT_TRUE(close(to_cpu(s), sref, out_tol(od)))
                << "scale " << alpha << " N " << N << " " << dn(ad) << " -> " << dn(od);
          }
        }
  // scale in place on a strided window.
  const Tensor buf_h = random({4, 40}, 950);
  Tensor buf = to_gpu(buf_h, kBF);
  Tensor window = buf.narrow(1, 3, 30);
  scale(window, 0.5f, window);
  Tensor want = seen_as(buf_h, kBF);
  Tensor want_window = want.narrow(1, 3, 30);
  scale(seen_as(buf_h, kBF).narrow(1, 3, 30), 0.5f, want_window);
  EXPECT_TRUE(close(to_cpu(buf), want, kBf16OutTol));
}

TEST(CudaElementwise, EmbeddingLooksUpThisShardOnly) {
  MLS_REQUIRE_GPU();
  const int64_t rows = 300, vocab_start = 300;
  // Below, at and above both ends of the shard [300, 600).
  const Tensor ids_h = ids({0, 299, 300, 301, 450, 599, 600, 1000, 154879, 300});
  const Tensor ids = to_gpu(ids_h, DType::kI32);
  for (int64_t H : {512, 100})
    for (int64_t col : {0, 8, 4})  // table as a column window: aligned, and not 16-byte aligned
      for (DType td : {kBF, kF})
        for (DType od : {kBF, kF}) {
          const Tensor table_h = random({rows, H + 8}, static_cast<uint32_t>(H + col));
          // The host op reads its table as contiguous rows; the GPU honours the row stride.
          const Tensor seen = seen_as(table_h.narrow(1, col, H), td);
          Tensor ref = host_empty({ids_h.numel(), H});
          embedding(seen, ids_h, vocab_start, ref);
          Tensor out = dev_empty({ids_h.numel(), H}, od);
          embedding(to_gpu(table_h, td).narrow(1, col, H), ids, vocab_start, out);
          EXPECT_TRUE(close(to_cpu(out), seen_as(ref, od), 0))
              << "H " << H << " col " << col << " " << dn(td) << " -> " << dn(od);
        }
}

// The host fill (f32) of a tensor of this shape and parameters.
Tensor host_fill(const Shape& s, const UniformFill& f) {
  Tensor t = host_empty(s);
  fill_uniform(t, f);
  return t;
}

TEST(CudaElementwise, FillUniformMatchesHostBitwise) {
  MLS_REQUIRE_GPU();
  // A TP shard of a [400, 200] weight, an odd shape, a norm weight (offset 1), 1-D.
  const UniformFill shard{12345, 0.05f, 0.0f, 100, 50, 200};
  const UniformFill odd{777, 0.3f, 0.0f, 0, 0, 13};
  const UniformFill norm{99, 0.1f, 1.0f, 7, 0, 1};
  struct Case {
    Shape shape;
    UniformFill f;
  };
  for (const Case& c :
       {Case{{37, 50}, shard}, Case{{37, 13}, odd}, Case{{1001}, norm}, Case{{4096, 8}, shard}}) {
    const Tensor want = host_fill(c.shape, c.f);
    Tensor f32 = dev_empty(c.shape, kF);
    fill_uniform(f32, c.f);
    EXPECT_TRUE(close(to_cpu(f32), want, 0)) << "f32 " << c.shape.str();
    Tensor b16 = dev_empty(c.shape, kBF);
    fill_uniform(b16, c.f);
    const Tensor got = to_cpu(b16);
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], bf16_to_f32(f32_to_bf16(want.data<float>()[i])))
          << "bf16 " << c.shape.str() << " at " << i;
  }
  // Misaligned start (one f32 into a buffer) and a tail that is not a multiple of 8.
  Tensor buf = dev_empty({1 + 37 * 13}, kF);
  Tensor tail = buf.narrow(0, 1, 37 * 13).view({37, 13});
  fill_uniform(tail, odd);
  EXPECT_TRUE(close(to_cpu(tail), host_fill({37, 13}, odd), 0));
}

// fp8 bytes of a device tensor, read back as they are.
std::vector<uint8_t> fp8_bytes(const Tensor& dev) {
  Tensor h = host_empty(dev.shape(), DType::kFP8E4M3);
  copy(dev, h);
  const uint8_t* p = static_cast<const uint8_t*>(h.raw());
  return {p, p + h.numel()};
}

// The host's e4m3 byte with the kernel's saturation (the host cast gives NaN past 448).
uint8_t fp8_saturated(float v) {
  return f32_to_fp8e4m3(std::clamp(v, -448.0f, 448.0f));
}

TEST(CudaElementwise, FillUniformFp8RoundsAndSaturates) {
  MLS_REQUIRE_GPU();
  for (float bound : {0.07f, 300.0f, 1000.0f}) {
    const UniformFill f{4242, bound, 0.0f, 3, 0, 64};
    const Tensor want = host_fill({129, 64}, f);
    Tensor dev = dev_empty({129, 64}, DType::kFP8E4M3);
    fill_uniform(dev, f);
    const std::vector<uint8_t> got = fp8_bytes(dev);
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got[i], fp8_saturated(want.data<float>()[i]))
          << "bound " << bound << " at " << i << " value " << want.data<float>()[i];
  }
}

TEST(CudaElementwise, FillUniformIndexesPast32Bits) {
  MLS_REQUIRE_GPU();
  const int64_t n = (int64_t{1} << 32) + 13;  // 4 GiB of fp8
  int64_t free_bytes = 0, total = 0;
  cuda_memory_info(::mls::cuda::device(), &free_bytes, &total);
  if (free_bytes < n + (int64_t{1} << 30)) GTEST_SKIP() << "needs 5 GiB of free device memory";
  const UniformFill f{31337, 2.0f, 0.0f, 5, 0, 1};
  Tensor dev = dev_empty({n}, DType::kFP8E4M3);
  fill_uniform(dev, f);
  for (int64_t i : {int64_t{0}, int64_t{1}, (int64_t{1} << 31) - 1, int64_t{1} << 31,
                    (int64_t{1} << 32) - 1, int64_t{1} << 32, n - 1}) {
    // Element i of a 1-D fill is element 0 of a fill starting i rows later.
    UniformFill one = f;
    one.row0 += i;
    const float v = host_fill({1}, one).data<float>()[0];
    EXPECT_EQ(fp8_bytes(dev.narrow(0, i, 1))[0], fp8_saturated(v)) << "element " << i;
  }
}

TEST(CudaElementwise, RejectsMisfits) {
  MLS_REQUIRE_GPU();
  const Tensor a = dev_empty({4, 64}, kBF);
  Tensor out = dev_empty({4, 65}, kBF);
  EXPECT_THROW(add(a, a, out), ShapeError);
  Tensor i32 = dev_empty({4, 64}, DType::kI32);
  EXPECT_THROW(silu_mul(a, a, i32), ShapeError);
  Tensor three = dev_empty({2, 2, 2}, kF);
  EXPECT_THROW(fill_uniform(three, UniformFill{}), ShapeError);
  Tensor emb = dev_empty({3, 64}, kBF);
  EXPECT_THROW(embedding(a, to_gpu(ids({0, 1}), DType::kI32), 0, emb), ShapeError);
}

}  // namespace
}  // namespace mls::ops::test
