// The few-token bf16 GEMM (ops/cuda/bf16_gemv_kernels.h) through ops::linear, which routes
// these shapes to it where allowed (ops::Bf16LinearsByStepSize, as an FP8 model's forward does),
// against the CPU op on the same bf16-rounded inputs, at the tolerances of linear_cuda_test.cc: a
// bf16 output is the fp32 result rounded to bf16 (rel-L2 <= 4e-3); an f32 output differs only by
// the fp32 summation order (rel-L2 <= 2e-5). And a token's output bitwise the same alone as in a
// batch. The same for the per-head kernel (MLA's absorbed key and value projections), which
// ops::linear_batched takes for one token.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/bf16_gemv_kernels.h"
#include "ops/cuda/test_util.h"
#include "ops/linear.h"

namespace mls::ops::test {
namespace {

namespace kernels = ::mls::ops::cuda::kernels;

// Rows [t0, t0 + n) of a host f32 matrix, contiguous.
Tensor rows_of(const Tensor& t, int64_t t0, int64_t n) {
  const int64_t cols = t.dim(1);
  Tensor r = Tensor::empty({n, cols}, DType::kF32, MemTag::kActivation);
  std::memcpy(r.data<float>(), t.data<float>() + t0 * cols, n * cols * sizeof(float));
  return r;
}

// ops::linear on the GPU: x as a window of a wider (16-byte aligned) matrix when `strided`.
Tensor gpu_linear(const Tensor& x, const Tensor& w_dev, const Tensor& y0, DType y_dtype,
                  bool accumulate, bool strided) {
  const int64_t T = x.dim(0), K = x.dim(1), pad = strided ? 16 : 0;
  Tensor xw = random({T, K + pad}, 77);
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(xw.data<float>() + t * (K + pad) + pad / 2, x.data<float>() + t * K,
                K * sizeof(float));
  const Tensor xw_dev = to_gpu(xw);
  const Tensor x_dev = xw_dev.narrow(1, pad / 2, K);
  Tensor y_dev = to_gpu(y0, y_dtype);
  const kernels::Bf16GemvArgs g{.x = x_dev.raw(),
                                .ldx = x_dev.stride(0),
                                .w = w_dev.raw(),
                                .y = y_dev.raw(),
                                .ldy = y_dev.stride(0),
                                .y_f32 = y_dtype == DType::kF32,
                                .accumulate = accumulate,
                                .N = w_dev.dim(0),
                                .K = static_cast<int>(K),
                                .T = static_cast<int>(T)};
  EXPECT_TRUE(kernels::bf16_gemv_applies(g)) << "T " << T << " N " << g.N << " K " << K;
  ops::linear(x_dev, w_dev, y_dev, accumulate);
  return to_cpu(y_dev);
}

TEST(Bf16GemvCuda, MatchesTheCpuOp) {
  MLS_REQUIRE_GPU();
  const Bf16LinearsByStepSize on(true);
  uint32_t seed = 1;
  int cases = 0;
  for (int64_t K : {8, 6144})
    for (int64_t N : {1, 256, 1000}) {
      const Tensor w = round_bf16(random({N, K}, seed++, 0.05f));
      const Tensor w_dev = to_gpu(w);
      for (int64_t T = 1; T <= kernels::kBf16GemvMaxTokens; ++T) {
        // Output type, accumulation and a strided x in turn.
        const DType y_dtype = T % 2 ? DType::kF32 : DType::kBF16;
        const bool accumulate = T % 3 == 0, strided = T % 4 == 1;
        SCOPED_TRACE(testing::Message()
                     << "T " << T << " N " << N << " K " << K << " y " << dtype_name(y_dtype)
                     << " acc " << accumulate << " strided " << strided);
        const Tensor x = round_bf16(random({T, K}, seed++));
        Tensor y0 = random({T, N}, seed++);
        if (y_dtype == DType::kBF16) y0 = round_bf16(y0);
        const Tensor got = gpu_linear(x, w_dev, y0, y_dtype, accumulate, strided);
        Tensor want = Tensor::empty({T, N}, DType::kF32, MemTag::kActivation);
        std::memcpy(want.data<float>(), y0.data<float>(), want.nbytes());
        cpu::linear(x, w, want, accumulate);
        EXPECT_LE(rel_l2(got, want), y_dtype == DType::kBF16 ? kBf16OutTol : kF32OutTol);
        ++cases;
      }
    }
  EXPECT_EQ(cases, 48);
}

TEST(Bf16GemvCuda, ATokensOutputIsTheSameAloneAndInABatch) {
  MLS_REQUIRE_GPU();
  const Bf16LinearsByStepSize on(true);
  const int64_t T = kernels::kBf16GemvMaxTokens, N = 256, K = 6144;  // the router's shape
  const Tensor w_dev = to_gpu(round_bf16(random({N, K}, 3, 0.05f)));
  const Tensor x = round_bf16(random({T, K}, 4));
  for (DType y_dtype : {DType::kF32, DType::kBF16}) {
    const Tensor batch =
        gpu_linear(x, w_dev, random({T, N}, 5), y_dtype, /*accumulate=*/false, false);
    for (int64_t t = 0; t < T; ++t) {
      const Tensor alone =
          gpu_linear(rows_of(x, t, 1), w_dev, random({1, N}, 6), y_dtype, false, false);
      // Also as the second token of a pair (t paired with its neighbour).
      const int64_t t0 = t == 0 ? 0 : t - 1;
      const Tensor pair =
          gpu_linear(rows_of(x, t0, 2), w_dev, random({2, N}, 7), y_dtype, false, true);
      for (int64_t n = 0; n < N; ++n) {
        ASSERT_EQ(alone.data<float>()[n], batch.data<float>()[t * N + n]) << "token " << t;
        ASSERT_EQ(pair.data<float>()[(t - t0) * N + n], batch.data<float>()[t * N + n])
            << "token " << t;
      }
    }
  }
}

// The per-head kernel on the GPU: x [T, B, K] as a head-strided view of a wider row (as MLA's
// q_nope is a narrow of q), W [B, N, K] as given, y [T, B, N]. Launched directly:
// ops::linear_batched routes only one token to it.
Tensor gpu_linear_batched(const Tensor& x, const Tensor& w_dev, DType y_dtype) {
  const int64_t T = x.dim(0), B = x.dim(1), K = x.dim(2), pad = 64;
  Tensor xw = random({T, B, K + pad}, 78);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(xw.data<float>() + (t * B + b) * (K + pad), x.data<float>() + (t * B + b) * K,
                  K * sizeof(float));
  const Tensor xw_dev = to_gpu(xw);
  const Tensor x_dev = xw_dev.narrow(2, 0, K);
  Tensor y_dev = to_gpu(random({T, B, w_dev.dim(1)}, 79), y_dtype);
  const kernels::Bf16GemvBatchedArgs g{.x = x_dev.raw(),
                                       .x_st = x_dev.stride(0),
                                       .x_sb = x_dev.stride(1),
                                       .w = w_dev.raw(),
                                       .w_sb = w_dev.stride(0),
                                       .w_sn = w_dev.stride(1),
                                       .y = y_dev.raw(),
                                       .y_st = y_dev.stride(0),
                                       .y_sb = y_dev.stride(1),
                                       .y_f32 = y_dtype == DType::kF32,
                                       .B = static_cast<int>(B),
                                       .N = static_cast<int>(w_dev.dim(1)),
                                       .K = static_cast<int>(K),
                                       .T = static_cast<int>(T)};
  EXPECT_TRUE(kernels::bf16_gemv_batched_applies(g)) << "T " << T << " B " << B << " K " << K;
  ::mls::cuda::check(kernels::launch_bf16_gemv_batched(g, ::mls::cuda::stream()), "batched GEMV");
  return to_cpu(y_dev);
}

TEST(Bf16GemvCuda, BatchedMatchesTheCpuOpAndATokenIsTheSameAlone) {
  MLS_REQUIRE_GPU();
  struct Shape3 {
    int64_t B, N, K;
  };
  uint32_t seed = 40;
  // GLM-5's absorbed key (64 × [512 × 192]) and value (64 × [256 × 512]) projections, a row
  // count that leaves a CTA partly empty, and K of one chunk.
  for (const Shape3 sh : {Shape3{64, 512, 192}, Shape3{64, 256, 512}, Shape3{3, 45, 8}}) {
    const Tensor w = round_bf16(random({sh.B, sh.N, sh.K}, seed++, 0.05f));
    const Tensor w_dev = to_gpu(w);
    const int64_t T = kernels::kBf16GemvMaxTokens;
    const Tensor x = round_bf16(random({T, sh.B, sh.K}, seed++));
    for (DType y_dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "B " << sh.B << " N " << sh.N << " K " << sh.K << " y "
                                      << dtype_name(y_dtype));
      const Tensor got = gpu_linear_batched(x, w_dev, y_dtype);
      Tensor want = Tensor::empty({T, sh.B, sh.N}, DType::kF32, MemTag::kActivation);
      cpu::linear_batched(x, w, want);
      EXPECT_LE(rel_l2(got, want), y_dtype == DType::kBF16 ? kBf16OutTol : kF32OutTol);
      for (int64_t t : {int64_t{0}, T - 1}) {
        Tensor xt = Tensor::empty({1, sh.B, sh.K}, DType::kF32, MemTag::kActivation);
        std::memcpy(xt.data<float>(), x.data<float>() + t * sh.B * sh.K, xt.nbytes());
        const Tensor alone = gpu_linear_batched(xt, w_dev, y_dtype);
        ASSERT_EQ(
            std::memcmp(alone.data<float>(), got.data<float>() + t * sh.B * sh.N, alone.nbytes()),
            0)
            << "token " << t;
        // ops::linear_batched routes one token to the kernel where skinny linears are on.
        const Bf16LinearsByStepSize on(true);
        Tensor routed = to_gpu(random({1, sh.B, sh.N}, 80), y_dtype);
        ops::linear_batched(to_gpu(xt), w_dev, routed);
        const Tensor r = to_cpu(routed);
        EXPECT_EQ(std::memcmp(r.data<float>(), alone.data<float>(), r.nbytes()), 0)
            << "linear_batched of token " << t;
      }
    }
  }
}

}  // namespace
}  // namespace mls::ops::test
