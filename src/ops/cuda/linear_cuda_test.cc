// The CUDA linear ops against the CPU ones on the same bf16-rounded inputs. Tolerances:
// - bf16 output: each element is the fp32 result rounded to bf16 (relative error <= 2^-9, about
//   1.1e-3 rms over random data), so rel-L2 <= 4e-3; f32 output only differs by the fp32
//   summation order (~1e-6 relative at these K), so rel-L2 <= 2e-5.
// - FP8 weights: x is quantised per token and 128-group to e4m3 (3 mantissa bits: relative
//   rounding error up to 2^-4, about 0.025 rms), which passes straight into y, so against the
//   CPU product of the dequantised W and the unquantised x the bound is rel-L2 <= 0.06. Against
//   a host emulation of that quantisation the only differences left are fp32 summation order and
//   the bf16 output rounding: rel-L2 <= 4e-3, which a misplaced or missing scale cannot meet.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/cublaslt_gemm.h"
#include "ops/cuda/fp8_quant_kernels.h"
#include "ops/cuda/test_util.h"
#include "ops/linear.h"

namespace mls::ops::test {
namespace {

constexpr double kFp8VsExactTol = 0.06;
constexpr double kFp8VsEmulatedTol = 4e-3;

float* f(Tensor& t) {
  return t.data<float>();
}
const float* f(const Tensor& t) {
  return t.data<float>();
}

// Columns [c0, c0 + n) of a host f32 matrix [rows, cols], contiguous.
Tensor cols_of(const Tensor& t, int64_t c0, int64_t n) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor r = Tensor::empty({rows, n}, DType::kF32, MemTag::kActivation);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(f(r) + i * n, f(t) + i * cols + c0, n * sizeof(float));
  return r;
}

struct LinearCase {
  int64_t T, in, out;
  bool accumulate = false;
  bool strided = false;  // x and y as column windows of wider matrices
  DType y_dtype = DType::kBF16;
};

// Runs the CUDA linear on (views of) uploads of x, y0 and W, returns y as host f32 and checks
// that a strided y's columns outside the window are untouched.
Tensor run_linear(const LinearCase& c, const Tensor& x, const Tensor& y0, const Tensor& w_dev) {
  const int64_t xpad = c.strided ? 48 : 0, ypad = c.strided ? 24 : 0;
  const int64_t xoff = xpad / 2, yoff = ypad / 2;
  Tensor xw = random({c.T, c.in + xpad}, 91);
  Tensor yw = random({c.T, c.out + ypad}, 92);
  for (int64_t i = 0; i < c.T; ++i) {
    std::memcpy(f(xw) + i * (c.in + xpad) + xoff, f(x) + i * c.in, c.in * sizeof(float));
    std::memcpy(f(yw) + i * (c.out + ypad) + yoff, f(y0) + i * c.out, c.out * sizeof(float));
  }
  Tensor xw_dev = to_gpu(xw);
  Tensor yw_dev = to_gpu(yw, c.y_dtype);
  Tensor x_dev = xw_dev.narrow(1, xoff, c.in);
  Tensor y_dev = yw_dev.narrow(1, yoff, c.out);
  ops::linear(x_dev, w_dev, y_dev, c.accumulate);
  Tensor got = to_cpu(yw_dev);
  if (c.strided) {
    const Tensor before = c.y_dtype == DType::kBF16 ? round_bf16(yw) : yw;
    int64_t changed = 0;
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.out + ypad; ++j) {
        const int64_t e = i * (c.out + ypad) + j;
        if ((j < yoff || j >= yoff + c.out) && f(got)[e] != f(before)[e]) ++changed;
      }
    EXPECT_EQ(changed, 0) << "elements outside y's column window changed";
  }
  return cols_of(got, yoff, c.out);
}

Tensor cpu_linear(const Tensor& x, const Tensor& w, const Tensor& y0, bool accumulate) {
  Tensor y = Tensor::empty({x.dim(0), w.dim(0)}, DType::kF32, MemTag::kActivation);
  std::memcpy(f(y), f(y0), y.nbytes());
  cpu::linear(x, w, y, accumulate);
  return y;
}

TEST(LinearCuda, Bf16MatchesCpu) {
  MLS_REQUIRE_GPU();
  const std::vector<LinearCase> cases = {
      {.T = 1, .in = 2048, .out = 7168},
      {.T = 37, .in = 384, .out = 200},
      {.T = 64, .in = 7168, .out = 2048},
      {.T = 512, .in = 1024, .out = 768},
      {.T = 5, .in = 96, .out = 100},  // rows of y 200 bytes apart: 8-byte aligned only
      {.T = 37, .in = 512, .out = 576, .accumulate = true},
      {.T = 1, .in = 640, .out = 320, .strided = true},
      {.T = 37, .in = 640, .out = 320, .accumulate = true, .strided = true},
      {.T = 37, .in = 512, .out = 256, .y_dtype = DType::kF32},  // router logits
      {.T = 3, .in = 256, .out = 1000, .accumulate = true, .strided = true, .y_dtype = DType::kF32},
  };
  uint32_t seed = 1;
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "T " << c.T << " in " << c.in << " out " << c.out << " acc " << c.accumulate
                 << " strided " << c.strided << " y " << dtype_name(c.y_dtype));
    const Tensor x = round_bf16(random({c.T, c.in}, seed++));
    const Tensor w = round_bf16(random({c.out, c.in}, seed++, 0.05f));
    Tensor y0 = random({c.T, c.out}, seed++);
    if (c.y_dtype == DType::kBF16) y0 = round_bf16(y0);
    const Tensor got = run_linear(c, x, y0, to_gpu(w));
    const Tensor want = cpu_linear(x, w, y0, c.accumulate);
    EXPECT_LE(rel_l2(got, want), c.y_dtype == DType::kBF16 ? kBf16OutTol : kF32OutTol);
  }
}

TEST(LinearCuda, ZeroTokensAndEmptyReduction) {
  MLS_REQUIRE_GPU();
  Tensor w = to_gpu(random({64, 32}, 5));
  Tensor x0 = to_gpu(random({0, 32}, 6));
  Tensor y0 = to_gpu(random({0, 64}, 7));
  ops::linear(x0, w, y0, false);  // nothing to do, nothing to fail

  Tensor wk = to_gpu(random({64, 0}, 8));
  Tensor xk = to_gpu(random({3, 0}, 9));
  Tensor yk = to_gpu(random({3, 64}, 10));
  ops::linear(xk, wk, yk, false);
  const Tensor got = to_cpu(yk);
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(f(got)[i], 0.0f);
}

TEST(LinearCuda, RejectsMisfits) {
  // The contract comes before any device work: meta tensors for a GPU need none.
  MetaAllocator meta(Device::cuda(0));
  const auto empty = [&](const Shape& s, DType t) {
    return Tensor::empty(s, t, MemTag::kActivation, meta);
  };
  Tensor x = empty({4, 32}, DType::kBF16);
  Tensor w = empty({16, 48}, DType::kBF16);
  Tensor y = empty({4, 16}, DType::kBF16);
  EXPECT_THROW(ops::linear(x, w, y, false), ShapeError);
  Tensor w8 = empty({16, 32}, DType::kFP8E4M3);
  EXPECT_THROW(ops::linear(x, w8, y, false), ShapeError);  // FP8 without block scales
  Tensor xb = empty({4, 2, 32}, DType::kBF16);
  Tensor wb = empty({3, 16, 32}, DType::kBF16);
  Tensor yb = empty({4, 2, 16}, DType::kBF16);
  EXPECT_THROW(ops::linear_batched(xb, wb, yb), ShapeError);
}

// Per-head products through head-strided weight views, as MLA's absorbed attention uses them.
TEST(LinearCuda, BatchedMatchesCpuLoop) {
  MLS_REQUIRE_GPU();
  struct Case {
    int64_t T, H, dn, dv, r;
  };
  for (const Case c :
       {Case{1, 4, 32, 48, 64}, Case{37, 16, 192, 256, 512}, Case{130, 8, 64, 128, 256}}) {
    SCOPED_TRACE(testing::Message() << "T " << c.T << " H " << c.H << " r " << c.r);
    // o_h = o_lat_h · W_UVᵀ with W_UV the last dv rows of each head's block of kv_b_proj.
    const Tensor kv_b = round_bf16(random({c.H * (c.dn + c.dv), c.r}, 21, 0.05f));
    const Tensor o_lat = round_bf16(random({c.T, c.H, c.r}, 22));
    const Tensor w_uv = kv_b.view({c.H, c.dn + c.dv, c.r}).narrow(1, c.dn, c.dv);
    Tensor want = Tensor::empty({c.T, c.H, c.dv}, DType::kF32, MemTag::kActivation);
    cpu::linear_batched(o_lat, w_uv, want);

    Tensor kv_b_dev = to_gpu(kv_b);
    Tensor o_dev = Tensor::empty({c.T, c.H, c.dv}, DType::kBF16, MemTag::kActivation, gpu());
    ops::linear_batched(to_gpu(o_lat), kv_b_dev.view({c.H, c.dn + c.dv, c.r}).narrow(1, c.dn, c.dv),
                        o_dev);
    EXPECT_LE(rel_l2(to_cpu(o_dev), want), kBf16OutTol);

    // q_lat_c = q_nope · W_UK per head, written into a column window of a wider q_lat, from a
    // column window of q (strided x and y).
    const Tensor w_uk_t = round_bf16(random({c.H, c.r, c.dn}, 23, 0.05f));
    const Tensor q = round_bf16(random({c.T, c.H, c.dn + 16}, 24));
    Tensor want2 = Tensor::empty({c.T, c.H, c.r}, DType::kF32, MemTag::kActivation);
    cpu::linear_batched(q.narrow(2, 0, c.dn), w_uk_t, want2);
    Tensor q_lat = Tensor::zeros({c.T, c.H, c.r + 16}, DType::kBF16, MemTag::kActivation, gpu());
    Tensor q_lat_c = q_lat.narrow(2, 0, c.r);
    ops::linear_batched(to_gpu(q).narrow(2, 0, c.dn), to_gpu(w_uk_t), q_lat_c);
    const Tensor got2 = to_cpu(q_lat);
    Tensor got2_c = Tensor::empty({c.T, c.H, c.r}, DType::kF32, MemTag::kActivation);
    for (int64_t i = 0; i < c.T * c.H; ++i) {
      std::memcpy(f(got2_c) + i * c.r, f(got2) + i * (c.r + 16), c.r * sizeof(float));
      for (int64_t j = c.r; j < c.r + 16; ++j) ASSERT_EQ(f(got2)[i * (c.r + 16) + j], 0.0f);
    }
    EXPECT_LE(rel_l2(got2_c, want2), kBf16OutTol);
  }
}

TEST(LinearCuda, Fp8BlockScaledMatchesCpu) {
  MLS_REQUIRE_GPU();
  // Paths: up to 8 tokens, or up to 32 not divisible by 4, our weight-streaming kernel (split-K
  // at small N); otherwise the leading multiple of 4 tokens through cuBLASLt's block-scaled GEMM
  // and the rest through ours; `in` not a multiple of 128 (or of 16) always ours.
  const std::vector<LinearCase> cases = {
      {.T = 1, .in = 7168, .out = 2048},    // decode, split-K
      {.T = 4, .in = 2048, .out = 7168},    // decode, wide
      {.T = 16, .in = 512, .out = 576},     // cuBLASLt, kv_b-like
      {.T = 29, .in = 6144, .out = 320},    // ours, 2 token groups; out not a multiple of 128
      {.T = 37, .in = 7168, .out = 2048},   // cuBLASLt 36 + ours 1
      {.T = 64, .in = 6144, .out = 320},    // cuBLASLt, partial last row block
      {.T = 40, .in = 384, .out = 200},     // cuBLASLt, scale rows padded 3 -> 4
      {.T = 130, .in = 1024, .out = 1000},  // cuBLASLt 128 + ours 2
      {.T = 256, .in = 2048, .out = 1536},  // cuBLASLt
      {.T = 3, .in = 96, .out = 100},       // in < 128
      {.T = 33, .in = 200, .out = 72},      // ours, 3 token groups; in not a multiple of 16
      {.T = 5, .in = 198, .out = 130},      // x rows not 8-byte aligned: scalar quantiser loads
      {.T = 2, .in = 2048, .out = 1024, .accumulate = true, .strided = true},
      {.T = 68, .in = 2048, .out = 1024, .accumulate = true, .strided = true},
      {.T = 70, .in = 640, .out = 384, .accumulate = true},  // cuBLASLt 68 + ours 2
      // Ours with 8 K blocks a warp (kernels::SkinnyKernel::kAuto takes the shared-memory ring):
      // 8-token and 16-token tiles.
      {.T = 1, .in = 8192, .out = 4352},
      {.T = 12, .in = 8192, .out = 4352, .accumulate = true, .strided = true},
  };
  uint32_t seed = 100;
  for (const LinearCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "T " << c.T << " in " << c.in << " out " << c.out << " acc "
                                    << c.accumulate << " strided " << c.strided);
    const Fp8Weight w = make_fp8_weight(c.out, c.in, seed++);
    const Tensor x = round_bf16(random({c.T, c.in}, seed++));
    const Tensor y0 = round_bf16(random({c.T, c.out}, seed++));
    const Tensor got = run_linear(c, x, y0, upload_fp8(w));
    const double exact = rel_l2(got, cpu_linear(x, w.deq, y0, c.accumulate));
    const double emulated = rel_l2(got, cpu_linear(emulate_act_quant(x), w.deq, y0, c.accumulate));
    EXPECT_LE(exact, kFp8VsExactTol);
    EXPECT_LE(emulated, kFp8VsEmulatedTol);
  }
}

// Split-K partials are summed in a fixed order by the last CTA of each tile: repeated calls
// give the same bits (and leave the tile counters ready for the next call).
TEST(LinearCuda, Fp8DecodeIsDeterministic) {
  MLS_REQUIRE_GPU();
  const Fp8Weight w = make_fp8_weight(576, 6144, 7);
  Tensor w_dev = upload_fp8(w);
  Tensor x = to_gpu(random({3, 6144}, 8));
  Tensor y1 = Tensor::empty({3, 576}, DType::kBF16, MemTag::kActivation, gpu());
  Tensor y2 = Tensor::empty({3, 576}, DType::kBF16, MemTag::kActivation, gpu());
  ops::linear(x, w_dev, y1);
  ops::linear(x, w_dev, y2);
  const Tensor a = to_cpu(y1), b = to_cpu(y2);
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
}

// ops::linear_pair is two ops::linear calls in fewer launches: bit for bit the same outputs, on
// the decode kernel (one launch for both weights, split-K sized per weight), cuBLASLt with our
// kernel's tail, bf16 weights, and a bf16 weight beside an FP8 one (a model's slice that is not
// whole blocks stays bf16); the pairs' widths are the model's (gate/up, q_b/indexer wq_b) scaled
// down, and one pair's second weight is 24 rows (a partial row tile).
TEST(LinearCuda, PairEqualsTwoLinears) {
  MLS_REQUIRE_GPU();
  struct PairCase {
    int64_t T, in, out1, out2;
    bool fp8_1, fp8_2;
  };
  const std::vector<PairCase> cases = {
      {1, 2048, 4096, 1024, true, true}, {8, 2048, 4096, 1024, true, true},
      {13, 6144, 512, 512, true, true},  {37, 1024, 768, 24, true, true},
      {3, 6144, 576, 576, true, true},   {64, 1024, 768, 512, true, true},
      {5, 512, 256, 128, false, false},  {4, 256, 96, 128, false, true},
  };
  uint32_t seed = 300;
  for (const PairCase& c : cases) {
    SCOPED_TRACE(testing::Message() << "T " << c.T << " in " << c.in << " out " << c.out1 << "+"
                                    << c.out2 << " fp8 " << c.fp8_1 << c.fp8_2);
    const auto weight = [&](int64_t out, bool fp8) {
      return fp8 ? upload_fp8(make_fp8_weight(out, c.in, seed++))
                 : to_gpu(round_bf16(random({out, c.in}, seed++)), DType::kBF16);
    };
    const Tensor w1 = weight(c.out1, c.fp8_1), w2 = weight(c.out2, c.fp8_2);
    const Tensor x = to_gpu(round_bf16(random({c.T, c.in}, seed++)), DType::kBF16);
    const auto out = [&](int64_t n) {
      return Tensor::empty({c.T, n}, DType::kBF16, MemTag::kActivation, gpu());
    };
    Tensor a1 = out(c.out1), a2 = out(c.out2), b1 = out(c.out1), b2 = out(c.out2);
    ops::linear_pair(x, w1, a1, w2, a2);
    ops::linear(x, w1, b1);
    ops::linear(x, w2, b2);
    for (const auto& [got, want] : {std::pair{&a1, &b1}, std::pair{&a2, &b2}}) {
      const Tensor g = to_cpu(*got), w = to_cpu(*want);
      EXPECT_EQ(std::memcmp(g.raw(), w.raw(), g.nbytes()), 0);
    }
  }
}

// Device buffers of the raw kernel test below, freed on scope exit.
struct DeviceBytes {
  explicit DeviceBytes(size_t n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1)), cudaSuccess); }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void* p = nullptr;
};

template <typename T>
void upload(const DeviceBytes& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}

// The skinny GEMM's two ways of streaming the weights (registers, shared-memory ring) compute the
// same K blocks in the same order: bit for bit the same outputs, over 8- and 16-token tiles,
// partial row and token tiles, K a multiple of 16 but not of 128, split-K, a pair launch and
// accumulation. Random e4m3 bytes (NaN codes masked) and scales stand in for quantised inputs.
TEST(LinearCuda, SkinnyRingEqualsRegisters) {
  MLS_REQUIRE_GPU();
  namespace k = cuda::kernels;
  struct Case {
    int64_t T, K, N0, N1;
    bool accumulate;
  };
  const std::vector<Case> cases = {
      {1, 16384, 6144, 0, false}, {8, 8192, 4352, 0, true},   {5, 2048, 4096, 1024, false},
      {12, 6144, 2048, 0, false}, {16, 8320, 4352, 24, true}, {3, 2064, 200, 0, true},
      {29, 1040, 72, 40, false},
  };
  int num_sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  std::mt19937 rng(404);
  const auto bytes = [&](size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xF7);  // never 0x7F / 0xFF (NaN)
    return v;
  };
  const auto floats = [&](size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "T " << c.T << " K " << c.K << " N " << c.N0 << "+" << c.N1
                                    << " acc " << c.accumulate);
    const int64_t KB = (c.K + 127) / 128, ldq = c.K + 16;
    DeviceBytes xq(c.T * ldq), xs(KB * c.T * sizeof(float));
    upload(xq, bytes(c.T * ldq));
    upload(xs, floats(KB * c.T, 0.001f, 0.02f));
    const int64_t Ns[2] = {c.N0, c.N1};
    std::vector<std::unique_ptr<DeviceBytes>> w, ws;
    for (const int64_t N : Ns) {
      w.push_back(std::make_unique<DeviceBytes>(N * c.K));
      upload(*w.back(), bytes(N * c.K));
      ws.push_back(std::make_unique<DeviceBytes>((N + 127) / 128 * KB * sizeof(float)));
      upload(*ws.back(), floats((N + 127) / 128 * KB, 0.001f, 0.05f));
    }
    const size_t partial_bytes = size_t{16} << 20;
    const int64_t num_counters = 4096;
    DeviceBytes partial(partial_bytes), counters(num_counters * sizeof(int));
    ASSERT_EQ(cudaMemset(counters.p, 0, num_counters * sizeof(int)), cudaSuccess);
    const std::vector<float> y0 = floats(c.T * (c.N0 + c.N1), -1.0f, 1.0f);
    std::vector<std::vector<uint8_t>> got;
    for (const k::SkinnyKernel kernel :
         {k::SkinnyKernel::kRegisters, k::SkinnyKernel::kSharedRing}) {
      DeviceBytes y(c.T * (c.N0 + c.N1) * 2);
      std::vector<uint16_t> y0_bf16(y0.size());
      for (size_t i = 0; i < y0.size(); ++i) {
        const __nv_bfloat16 b = __float2bfloat16(y0[i]);
        std::memcpy(&y0_bf16[i], &b, 2);
      }
      upload(y, y0_bf16);
      k::Fp8GemmArgs a{.out = {},
                       .xq = xq.as<uint8_t>(),
                       .ldq = ldq,
                       .x_scale = xs.as<float>(),
                       .x_scale_ld = c.T,
                       .K = c.K,
                       .T = c.T,
                       .accumulate = c.accumulate,
                       .partial = partial.as<float>(),
                       .partial_bytes = partial_bytes,
                       .counters = counters.as<int>(),
                       .num_counters = num_counters,
                       .num_sms = num_sms,
                       .kernel = kernel};
      int64_t col = 0;
      for (int o = 0; o < 2; ++o) {
        a.out[o] = {.w = w[o]->as<uint8_t>(),
                    .w_scale = ws[o]->as<float>(),
                    .y = y.as<__nv_bfloat16>() + col,
                    .ldy = c.N0 + c.N1,
                    .N = Ns[o]};
        col += Ns[o];
      }
      ASSERT_EQ(k::launch_fp8_gemm_skinny(a, ::mls::cuda::stream()), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(::mls::cuda::stream()), cudaSuccess);
      std::vector<uint8_t> out(c.T * (c.N0 + c.N1) * 2);
      ASSERT_EQ(cudaMemcpy(out.data(), y.p, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      got.push_back(std::move(out));
    }
    EXPECT_EQ(got[0], got[1]);
    EXPECT_NE(std::vector<uint8_t>(got[0].size(), 0), got[0]);
  }
}

TEST(LinearCuda, WorkspaceIsAConstant) {
  EXPECT_EQ(ops::linear_workspace_bytes(Device::cuda(0)), 32LL << 20);
}

}  // namespace
}  // namespace mls::ops::test
