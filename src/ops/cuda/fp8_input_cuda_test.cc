// The FP8 linears' quantised input (ops/fp8_input.h) as the ops producing it write it: every byte
// (e4m3 rows and scales, in the layout for cuBLASLt's leading tokens) equal to the quantisation
// ops::linear runs itself (launch_quantize_fp8_act) on the same stored output, the output itself
// unchanged, and a linear given it computing the same bits as one that quantises x itself.
// Bitwise: both sides run the same arithmetic (fp8_act_rows.cuh) on the same bf16 values.
// Token counts cover decode (T <= 8: no leading tokens), a multiple of 4 taken whole by cuBLASLt
// (36) and one with a 1-token tail (37); row lengths every norm path that quantises itself (a
// warp or a block per row) and the fallback (n not a multiple of 128).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/cuda/fp8_act_kernels.h"
#include "ops/cuda/test_util.h"
#include "ops/elementwise.h"
#include "ops/fp8_input.h"
#include "ops/linear.h"
#include "ops/norm.h"

namespace mls::ops::test {
namespace {

constexpr DType kBF = DType::kBF16;

// The device tensor's bytes on the host.
std::vector<uint8_t> bytes_of(const Tensor& dev) {
  Tensor host = Tensor::empty(dev.shape(), dev.dtype(), MemTag::kActivation);
  copy(dev, host);
  ::mls::cuda::synchronize();
  const auto* p = static_cast<const uint8_t*>(host.raw());
  return {p, p + host.nbytes()};
}

// What ops::linear quantises a bf16 [T, K] activation into, from a block-FP8 weight of K columns.
std::vector<uint8_t> linear_quantization(const Tensor& y) {
  const int64_t T = y.dim(0), K = y.dim(1);
  Tensor q = dev_empty({scratch::fp8_act_bytes(T, K)}, DType::kFP8E4M3);
  const cuda::kernels::Fp8ActBuffer b = cuda::kernels::fp8_act_buffer(q.raw(), T, K);
  ::mls::cuda::check(cuda::kernels::launch_quantize_fp8_act(y.raw(), y.stride(0), T, K, b.ldq,
                                                            scratch::fp8_cublaslt_lead(T, K), b.q,
                                                            b.scales, ::mls::cuda::stream()),
                     "reference quantisation");
  return bytes_of(q);
}

// An empty FP8 weight of K columns: fp8_input sizes its buffer from it.
Tensor fp8_shape(int64_t K) {
  return Tensor::empty({1, K}, DType::kFP8E4M3, MemTag::kWeights);
}

Tensor norm_weight(int64_t n, uint32_t seed) {
  Tensor w = random({n}, seed, 0.2f);
  for (int64_t i = 0; i < n; ++i) w.data<float>()[i] += 1.0f;
  return to_gpu(w, DType::kF32);
}

TEST(Fp8Input, NormsWriteTheLinearsQuantization) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 10;
  for (int64_t n : {512, 2048, 6144, 16384, 200})
    for (int64_t T : {1, 5, 36, 37}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " n " << n);
      const Tensor x = to_gpu(random({T, n}, ++seed, 2.0f), kBF);
      const Tensor w = norm_weight(n, ++seed);
      Tensor y = dev_empty({T, n}, kBF), y_plain = dev_empty({T, n}, kBF);
      Tensor q = fp8_input(T, fp8_shape(n), kBF, gpu());
      rms_norm(x, w, 1e-6f, y, &q);
      rms_norm(x, w, 1e-6f, y_plain);
      EXPECT_EQ(bytes_of(y), bytes_of(y_plain)) << "rms_norm's output";
      EXPECT_EQ(bytes_of(q), linear_quantization(y)) << "rms_norm's quantisation";

      const Tensor delta = to_gpu(random({T, n}, ++seed, 2.0f), kBF);
      Tensor x1 = to_gpu(to_cpu(x), kBF), x2 = to_gpu(to_cpu(x), kBF);
      add_rms_norm(x1, delta, w, 1e-6f, y, &q);
      add_rms_norm(x2, delta, w, 1e-6f, y_plain);
      EXPECT_EQ(bytes_of(x1), bytes_of(x2)) << "add_rms_norm's sum";
      EXPECT_EQ(bytes_of(y), bytes_of(y_plain)) << "add_rms_norm's output";
      EXPECT_EQ(bytes_of(q), linear_quantization(y)) << "add_rms_norm's quantisation";
    }
}

TEST(Fp8Input, SiluMulWritesTheLinearsQuantization) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 40;
  for (int64_t I : {2048, 1001, 8})
    for (int64_t T : {1, 36, 37}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " I " << I);
      // gate and up as the halves of one [T, 2I] projection (strided rows), as the MLP has them.
      const Tensor gu = to_gpu(random({T, 2 * I}, ++seed, 4.0f), kBF);
      const Tensor gate = gu.narrow(1, 0, I), up = gu.narrow(1, I, I);
      Tensor out = dev_empty({T, I}, kBF), out_plain = dev_empty({T, I}, kBF);
      Tensor q = fp8_input(T, fp8_shape(I), kBF, gpu());
      silu_mul(gate, up, out, &q);
      silu_mul(gate, up, out_plain);
      EXPECT_EQ(bytes_of(out), bytes_of(out_plain)) << "silu_mul's output";
      EXPECT_EQ(bytes_of(q), linear_quantization(out)) << "silu_mul's quantisation";
      // In place over the gate, as the MLP runs it.
      Tensor g2 = to_gpu(to_cpu(gate), kBF);
      const Tensor u2 = to_gpu(to_cpu(up), kBF);
      silu_mul(g2, u2, g2, &q);
      EXPECT_EQ(bytes_of(g2), bytes_of(out_plain)) << "in place";
      EXPECT_EQ(bytes_of(q), linear_quantization(out_plain)) << "in place";
    }
}

// The experts' rows: each token quantised once and written to the rows its pairs went to, byte
// for byte what the plain quantisation writes for those rows gathered; a negative entry writes
// nothing, and rows no entry names (past the last pair) keep their bytes.
TEST(Fp8Input, ScatterWritesEachRowsQuantization) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 60;
  for (int64_t K : {2048, 400})
    for (int64_t T : {1, 37}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " K " << K);
      const int fan = 3;
      const int64_t R = T * fan + 2;       // the last two rows: no pair's
      std::vector<int32_t> dest(T * fan);  // a permutation of the pairs' rows
      for (int64_t i = 0; i < T * fan; ++i) dest[i] = static_cast<int32_t>((i * 7 + 3) % (T * fan));
      if (T > 1) dest[4] = -1;  // a dropped pair: its row stays
      const Tensor x = to_gpu(random({T, K}, ++seed, 3.0f), kBF);
      Tensor dest_dev = dev_empty({T, fan}, DType::kI32);
      copy(Tensor::wrap(dest.data(), {T, fan}, DType::kI32), dest_dev);

      const int64_t KB = (K + 127) / 128;
      Tensor q = dev_empty({scratch::fp8_act_bytes(R, K)}, DType::kFP8E4M3);
      std::vector<uint8_t> fill(q.nbytes(), 0xab);
      copy(Tensor::wrap(fill.data(), {q.numel()}, DType::kFP8E4M3), q);
      const cuda::kernels::Fp8ActBuffer b = cuda::kernels::fp8_act_buffer(q.raw(), R, K);
      ::mls::cuda::check(cuda::kernels::launch_quantize_fp8_act_scatter(
                             x.raw(), x.stride(0), dest_dev.data<int32_t>(), fan, T, K, R, b.ldq, R,
                             b.q, b.scales, ::mls::cuda::stream()),
                         "scatter");
      const std::vector<uint8_t> got = bytes_of(q);

      // The reference: x's rows gathered into their pairs' rows (zero rows elsewhere), then the
      // plain quantisation.
      const Tensor xh = to_cpu(x);
      Tensor gathered = Tensor::zeros({R, K}, DType::kF32, MemTag::kActivation);
      std::vector<int64_t> token_of(R, -1);
      for (int64_t p = 0; p < T * fan; ++p)
        if (dest[p] >= 0) {
          token_of[dest[p]] = p / fan;
          std::memcpy(gathered.data<float>() + dest[p] * K, xh.data<float>() + p / fan * K,
                      K * sizeof(float));
        }
      const Tensor gd = to_gpu(gathered, kBF);
      Tensor qr = dev_empty({scratch::fp8_act_bytes(R, K)}, DType::kFP8E4M3);
      const cuda::kernels::Fp8ActBuffer br = cuda::kernels::fp8_act_buffer(qr.raw(), R, K);
      ::mls::cuda::check(
          cuda::kernels::launch_quantize_fp8_act(gd.raw(), gd.stride(0), R, K, br.ldq, R, br.q,
                                                 br.scales, ::mls::cuda::stream()),
          "reference quantisation");
      const std::vector<uint8_t> want = bytes_of(qr);

      const int64_t scales_at = R * b.ldq;
      for (int64_t r = 0; r < R; ++r) {
        const bool named = token_of[r] >= 0;
        for (int64_t k = 0; k < b.ldq; ++k)
          ASSERT_EQ(got[r * b.ldq + k], named ? want[r * b.ldq + k] : 0xab)
              << "row " << r << " byte " << k;
        for (int64_t kb = 0; kb < KB; ++kb)
          for (int64_t i = 0; i < 4; ++i) {
            const int64_t at = scales_at + 4 * (kb * R + r) + i;
            ASSERT_EQ(got[at], named ? want[at] : 0xab) << "row " << r << " scale " << kb;
          }
      }
    }
}

TEST(Fp8Input, LinearsGivenItComputeTheSameBits) {
  MLS_REQUIRE_GPU();
  uint32_t seed = 70;
  for (int64_t T : {1, 8, 36, 37})
    for (int64_t K : {2048, 1000}) {
      SCOPED_TRACE(testing::Message() << "T " << T << " K " << K);
      const Tensor w1 = upload_fp8(make_fp8_weight(1024, K, ++seed));
      const Tensor w2 = upload_fp8(make_fp8_weight(256, K, ++seed));
      const Tensor x = to_gpu(random({T, K}, ++seed, 2.0f), kBF);
      const Tensor nw = norm_weight(K, ++seed);
      Tensor y = dev_empty({T, K}, kBF);
      Tensor q = fp8_input(T, w1, kBF, gpu());
      rms_norm(x, nw, 1e-6f, y, &q);
      const auto out = [&](int64_t n) { return dev_empty({T, n}, kBF); };
      Tensor a = out(1024), b = out(1024), a2 = out(256), b2 = out(256);
      linear(y, w1, a, false, q);
      linear(y, w1, b);
      EXPECT_EQ(bytes_of(a), bytes_of(b)) << "linear";
      linear_pair(y, w1, a, w2, a2, q);
      linear_pair(y, w1, b, w2, b2);
      EXPECT_EQ(bytes_of(a), bytes_of(b)) << "pair, first";
      EXPECT_EQ(bytes_of(a2), bytes_of(b2)) << "pair, second";
    }
}

TEST(Fp8Input, OnlyQuantizedActivationsHaveOne) {
  const Tensor fp8 = fp8_shape(256);
  const Tensor bf16_w = Tensor::empty({1, 256}, kBF, MemTag::kWeights);
  EXPECT_FALSE(fp8_input(4, fp8, DType::kF32, default_allocator()).defined()) << "CPU activations";
  EXPECT_FALSE(fp8_input(4, bf16_w, kBF, default_allocator()).defined()) << "a bf16 weight";
  const Tensor q = fp8_input(4, fp8, kBF, default_allocator());
  ASSERT_TRUE(q.defined());
  EXPECT_EQ(q.numel(), scratch::fp8_act_bytes(4, 256));

  // The CPU computes from x itself: a quantised input there is a caller's mistake.
  const Tensor x = Tensor::empty({4, 256}, DType::kF32, MemTag::kActivation);
  const Tensor w = Tensor::empty({8, 256}, DType::kF32, MemTag::kWeights);
  Tensor y = Tensor::empty({4, 8}, DType::kF32, MemTag::kActivation);
  EXPECT_THROW(linear(x, w, y, false, q), ShapeError);
  Tensor yn = Tensor::empty({4, 256}, DType::kF32, MemTag::kActivation);
  Tensor qc = q;
  EXPECT_THROW(rms_norm(x, Tensor::empty({256}, DType::kF32, MemTag::kWeights), 1e-6f, yn, &qc),
               ShapeError);
}

TEST(Fp8Input, RejectsMisfits) {
  MLS_REQUIRE_GPU();
  const Tensor w = upload_fp8(make_fp8_weight(128, 256, 90));
  const Tensor x = to_gpu(random({4, 256}, 91), kBF);
  Tensor y = dev_empty({4, 128}, kBF);
  const Tensor short_q = dev_empty({scratch::fp8_act_bytes(4, 256) - 1}, DType::kFP8E4M3);
  EXPECT_THROW(linear(x, w, y, false, short_q), ShapeError) << "one byte short";
  const Tensor bf16_q = dev_empty({scratch::fp8_act_bytes(4, 256)}, kBF);
  EXPECT_THROW(linear(x, w, y, false, bf16_q), ShapeError) << "not FP8 bytes";
  const Tensor wb = to_gpu(random({128, 256}, 92), kBF);
  const Tensor q = fp8_input(4, w, kBF, gpu());
  EXPECT_THROW(linear(x, wb, y, false, q), ShapeError) << "a bf16 W";
  Tensor f32_out = dev_empty({4, 256}, DType::kF32);
  Tensor qm = q;
  EXPECT_THROW(silu_mul(x, x, f32_out, &qm), ShapeError) << "f32 output";
}

}  // namespace
}  // namespace mls::ops::test
