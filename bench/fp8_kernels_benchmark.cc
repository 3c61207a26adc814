// The block-FP8 decode kernels at the GLM-5 shapes, each timed alone on the GPU: the skinny GEMM
// of every decode linear (1 and 8 tokens; alone and as a pair of weights in one launch), the
// activation quantisation, and the grouped expert GEMMs (gate·up with SiLU, down): the skinny
// kernel at decode batch sizes for the pass counts the launcher chooses between, and the
// tensor-core kernel at every size (prefill: 8,192 tokens), so that the launchers' choices are
// measurements (bench/RESULTS.md); TFLOP/s against the 1,979 dense FP8 peak. Launches are captured
// in a CUDA graph, as serving replays them, and rotate over enough weight copies that every launch
// reads its weights from DRAM. Figures: µs per launch and the weight bytes read per second against
// the 4.8 TB/s floor.
//
//   fp8_kernels_benchmark [--iters N] [--experts-only] [--balanced] [--batches 1,8,64,256,512,8192]
// (--experts-only with one batch size and --iters 5 gives a profiler one replayed graph per
// expert configuration. --balanced gives every expert the same rows instead of a random router's:
// at 8,192 tokens 256 each, whole tiles of the tensor-core kernel, so against the default it
// shows what the padding rows of the last tiles cost.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda_bench_util.h"
#include "ops/cuda/fp8_act_kernels.h"
#include "ops/cuda/fp8_quant_kernels.h"
#include "ops/cuda/moe_fp8_kernels.h"
#include "ops/scratch_sizes.h"

namespace {

namespace k = mls::ops::cuda::kernels;
using mls::bench::check;
using mls::bench::device_alloc;
using mls::bench::time_graph;

// Bytes of e4m3 values spread over [-2, 2] (no NaN encodings), filled on the host once.
void fill_fp8(uint8_t* dst, size_t bytes) {
  std::vector<uint8_t> host(std::min<size_t>(bytes, size_t{64} << 20));
  std::mt19937 g(7);
  for (auto& b : host) b = static_cast<uint8_t>((g() % 0x40) | (g() & 0x80));
  for (size_t off = 0; off < bytes; off += host.size())
    check(cudaMemcpy(dst + off, host.data(), std::min(host.size(), bytes - off),
                     cudaMemcpyHostToDevice),
          "fill");
}

// Values spread over [value / 2, 3 value / 2], as real scales vary by row and block.
void fill_f32(float* dst, size_t count, float value) {
  std::vector<float> host(count);
  std::mt19937 g(5);
  for (auto& v : host) v = value * (0.5f + static_cast<float>(g() % 1024) / 1024.0f);
  check(cudaMemcpy(dst, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "fill");
}

constexpr double kFloorTBs = 4.8;
constexpr size_t kRotateBytes = size_t{512} << 20;  // weight copies per shape: past the 50 MB L2

struct Linear {
  const char* name;
  int64_t N, K;
};

// The FP8 linears of one GLM-5 decode step (bench/models/glm5-shaped).
const Linear kLinears[] = {
    {"q_a", 2048, 6144},         {"kv_a", 576, 6144},
    {"q_b", 16384, 2048},        {"o_proj", 6144, 16384},
    {"indexer wq", 4096, 2048},  {"shared gate/up", 2048, 6144},
    {"shared down", 6144, 2048}, {"dense gate/up", 12288, 6144},
    {"dense down", 6144, 12288},
};

void bench_skinny(cudaStream_t stream, int num_sms, int iters) {
  std::printf("skinny FP8 GEMM (µs per launch, weight TB/s, %% of %.1f)\n", kFloorTBs);
  const int64_t max_t = 8, max_k = 16384, max_n = 16384;
  uint8_t* xq = device_alloc<uint8_t>(max_t * max_k);
  fill_fp8(xq, max_t * max_k);
  float* xs = device_alloc<float>(max_t * (max_k / 128));
  fill_f32(xs, max_t * (max_k / 128), 0.01f);
  void* y = device_alloc<uint16_t>(max_t * max_n);
  const size_t partial_bytes = size_t{32} * max_t * max_n * sizeof(float);
  float* partial = device_alloc<float>(partial_bytes / sizeof(float));
  const int64_t num_counters = 4096;
  int* counters = device_alloc<int>(num_counters);
  check(cudaMemset(counters, 0, num_counters * sizeof(int)), "memset");
  for (const Linear& l : kLinears) {
    const size_t bytes = static_cast<size_t>(l.N * l.K);
    const int copies = static_cast<int>(std::max<size_t>(2, kRotateBytes / bytes));
    uint8_t* w = device_alloc<uint8_t>(bytes * copies);
    fill_fp8(w, bytes * copies);
    const int64_t scales = (l.N + 127) / 128 * ((l.K + 127) / 128);
    float* ws = device_alloc<float>(scales);
    fill_f32(ws, scales, 0.02f);
    for (const int64_t T : {int64_t{1}, int64_t{8}}) {
      k::Fp8GemmArgs a{.out = {},
                       .xq = xq,
                       .ldq = l.K,
                       .x_scale = xs,
                       .x_scale_ld = T,
                       .K = l.K,
                       .T = T,
                       .accumulate = false,
                       .partial = partial,
                       .partial_bytes = partial_bytes,
                       .counters = counters,
                       .num_counters = num_counters,
                       .num_sms = num_sms};
      a.out[0] = {.w = w, .w_scale = ws, .y = y, .ldy = l.N, .N = l.N};
      const double us = time_graph(stream, iters, [&](int i) {
        a.out[0].w = w + bytes * (i % copies);
        check(k::launch_fp8_gemm_skinny(a, stream), "skinny");
      });
      // The pair launch: the same weight twice (both outputs into y: timing only).
      a.out[1] = a.out[0];
      const double pair_us = time_graph(stream, iters, [&](int i) {
        a.out[0].w = w + bytes * (i % copies);
        a.out[1].w = w + bytes * ((i + 1) % copies);
        check(k::launch_fp8_gemm_skinny(a, stream), "skinny pair");
      });
      const double tbs = static_cast<double>(bytes) / us * 1e-6;
      const double pair_tbs = 2.0 * static_cast<double>(bytes) / pair_us * 1e-6;
      std::printf(
          "  %-15s N %5ld K %5ld T %ld: %6.2f µs %4.2f TB/s (%2.0f%%); two in one launch "
          "%6.2f µs %4.2f TB/s (%2.0f%%)\n",
          l.name, static_cast<long>(l.N), static_cast<long>(l.K), static_cast<long>(T), us, tbs,
          100 * tbs / kFloorTBs, pair_us, pair_tbs, 100 * pair_tbs / kFloorTBs);
    }
    cudaFree(w);
    cudaFree(ws);
  }
  const int64_t K = 6144;
  for (const int64_t T : {int64_t{1}, int64_t{8}, int64_t{256}}) {
    const double us = time_graph(stream, iters, [&](int) {
      check(k::launch_quantize_fp8_act(y, K, T, K, K, T, xq, xs, stream), "quantise");
    });
    std::printf("  activation quantisation, K %ld, T %ld: %.2f µs\n", static_cast<long>(K),
                static_cast<long>(T), us);
  }
  cudaFree(xq);
  cudaFree(xs);
  cudaFree(y);
  cudaFree(partial);
  cudaFree(counters);
}

// ‖a − b‖ / ‖a‖ of two bf16 device arrays.
double rel_l2_diff(const void* a, const void* b, int64_t n) {
  std::vector<uint16_t> ha(n), hb(n);
  check(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost), "copy back");
  check(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost), "copy back");
  const auto f = [](uint16_t v) {
    const uint32_t u = static_cast<uint32_t>(v) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return static_cast<double>(x);
  };
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (f(ha[i]) - f(hb[i])) * (f(ha[i]) - f(hb[i]));
    norm += f(ha[i]) * f(ha[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// GLM-5's routed experts: 256 of hidden 6144, intermediate 2048, 8 per token, chosen uniformly
// at random (a dummy model's router), each weight and scale at its own address as loaded.
void bench_experts(cudaStream_t stream, int iters, const std::vector<int64_t>& batches,
                   bool balanced) {
  const int64_t E = 256, H = 6144, I = 2048, top_k = 8;
  std::printf("grouped FP8 experts (µs per launch, TB/s of the active experts' weights)\n");
  const size_t gate_bytes = static_cast<size_t>(I * H), down_bytes = static_cast<size_t>(H * I);
  uint8_t* weights = device_alloc<uint8_t>(E * (2 * gate_bytes + down_bytes));
  fill_fp8(weights, E * (2 * gate_bytes + down_bytes));
  const int64_t gu_scales = (I / 128) * (H / 128), down_scales = (H / 128) * (I / 128);
  float* scales = device_alloc<float>(E * (2 * gu_scales + down_scales));
  fill_f32(scales, E * (2 * gu_scales + down_scales), 0.02f);
  std::vector<uint64_t> table(6 * E);
  for (int64_t e = 0; e < E; ++e) {
    uint8_t* base = weights + e * (2 * gate_bytes + down_bytes);
    float* sbase = scales + e * (2 * gu_scales + down_scales);
    table[0 * E + e] = reinterpret_cast<uint64_t>(base);
    table[1 * E + e] = reinterpret_cast<uint64_t>(base + gate_bytes);
    table[2 * E + e] = reinterpret_cast<uint64_t>(base + 2 * gate_bytes);
    table[3 * E + e] = reinterpret_cast<uint64_t>(sbase);
    table[4 * E + e] = reinterpret_cast<uint64_t>(sbase + gu_scales);
    table[5 * E + e] = reinterpret_cast<uint64_t>(sbase + 2 * gu_scales);
  }
  uint64_t* dtable = device_alloc<uint64_t>(table.size());
  check(cudaMemcpy(dtable, table.data(), table.size() * sizeof(uint64_t), cudaMemcpyHostToDevice),
        "table");
  const int64_t max_rows = *std::max_element(batches.begin(), batches.end()) * top_k;
  uint8_t* xq = device_alloc<uint8_t>(max_rows * H);
  fill_fp8(xq, max_rows * H);
  float* xs = device_alloc<float>(max_rows * (H / 128));
  fill_f32(xs, max_rows * (H / 128), 0.01f);
  void* y = device_alloc<uint16_t>(max_rows * H);
  void* y_tc = device_alloc<uint16_t>(max_rows * H);
  int32_t* offsets = device_alloc<int32_t>(E + 1);
  int32_t* active = device_alloc<int32_t>(E + 1);
  void* tc_workspace = device_alloc<uint8_t>(mls::ops::scratch::moe_fp8_tc_workspace_bytes(E));
  std::mt19937 g(11);
  for (const int64_t T : batches) {
    std::vector<int32_t> count(E, 0);
    if (balanced) {
      for (int64_t e = 0; e < E; ++e)
        count[e] = static_cast<int32_t>(T * top_k / E + (e < T * top_k % E ? 1 : 0));
    } else {
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> ids(E);
        for (int64_t e = 0; e < E; ++e) ids[e] = static_cast<int32_t>(e);
        std::shuffle(ids.begin(), ids.end(), g);
        for (int64_t j = 0; j < top_k; ++j) ++count[ids[j]];
      }
    }
    std::vector<int32_t> off(E + 1, 0);
    int64_t used = 0, most = 0, padded = 0;
    for (int64_t e = 0; e < E; ++e) {
      off[e + 1] = off[e] + count[e];
      used += count[e] > 0;
      most = std::max<int64_t>(most, count[e]);
      padded += (count[e] + k::kMoeFp8TcRowTile - 1) / k::kMoeFp8TcRowTile * k::kMoeFp8TcRowTile;
    }
    check(cudaMemcpy(offsets, off.data(), off.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
          "offsets");
    check(k::launch_moe_active_experts(offsets, static_cast<int>(E), active, stream), "active");
    const int64_t R = T * top_k;
    std::printf(
        "  batch %3ld: %3ld experts active, at most %2ld rows; tensor-core tiles %.1f %% padding\n",
        static_cast<long>(T), static_cast<long>(used), static_cast<long>(most),
        100.0 * static_cast<double>(padded - R) / static_cast<double>(padded));
    for (const bool gated : {true, false}) {
      const size_t bytes = used * (gated ? 2 * gate_bytes : down_bytes);
      const double flops = 2.0 * static_cast<double>(R) * I * H * (gated ? 2 : 1);
      k::MoeFp8GemmArgs a{.w1 = dtable + (gated ? 0 : 2) * E,
                          .s1 = dtable + (gated ? 3 : 5) * E,
                          .w2 = gated ? dtable + 1 * E : nullptr,
                          .s2 = gated ? dtable + 4 * E : nullptr,
                          .sw_ld = (gated ? H : I) / 128,
                          .xq = xq,
                          .ldq = gated ? H : I,
                          .x_scale = xs,
                          .x_scale_ld = R,
                          .offsets = offsets,
                          .active = active,
                          .max_active = static_cast<int>(std::min(E, R)),
                          .experts = static_cast<int>(E),
                          .rows = R,
                          .tc_workspace = tc_workspace,
                          .y = y,
                          .ldy = gated ? I : H,
                          .N = gated ? I : H,
                          .K = gated ? H : I,
                          .gated = gated};
      const auto report = [&](const char* what, double us) {
        const double tbs = static_cast<double>(bytes) / us * 1e-6;
        std::printf("  %s %s %7.1f µs %4.2f TB/s (%2.0f%%) %4.0f TFLOP/s",
                    gated ? "gate·up" : "down", what, us, tbs, 100 * tbs / kFloorTBs,
                    flops / us * 1e-6);
      };
      // The skinny kernel's pass counts (decode sizes), then the tensor-core kernel on the same
      // rows and the largest difference between their outputs.
      for (const int passes : R <= 4096 ? std::vector<int>{1, 2, 4} : std::vector<int>{0}) {
        a.passes = passes;
        char what[16];
        std::snprintf(what, sizeof what, passes ? "x%d" : "skinny", passes);
        report(what, time_graph(stream, iters,
                                [&](int) { check(k::launch_moe_fp8_gemm(a, stream), "experts"); }));
      }
      a.y = y_tc;
      for (const int promote_k : {128, 64, 32}) {
        a.promote_k = promote_k;
        char what[16];
        std::snprintf(what, sizeof what, "tc/%d", promote_k);
        report(what, time_graph(stream, iters, [&](int) {
                 check(k::launch_moe_fp8_gemm_tc(a, stream), "experts (tensor cores)");
               }));
        std::printf(" rel-L2 to skinny %.1e", rel_l2_diff(y, y_tc, R * a.N));
      }
      a.y = y;
      std::printf("\n");
    }
  }
  cudaFree(weights);
  cudaFree(scales);
  cudaFree(dtable);
  cudaFree(xq);
  cudaFree(xs);
  cudaFree(y);
  cudaFree(y_tc);
  cudaFree(offsets);
  cudaFree(active);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 50;
  bool experts_only = false, balanced = false;
  std::vector<int64_t> batches = {1, 8, 64, 256, 512, 8192};
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--iters") == 0 && has_value) {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--experts-only") == 0) {
      experts_only = true;
    } else if (std::strcmp(argv[i], "--balanced") == 0) {
      balanced = true;
    } else if (std::strcmp(argv[i], "--batches") == 0 && has_value) {
      batches.clear();
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long b = std::strtol(p, &end, 10);
        if (end == p || b <= 0 || b > 8192) {
          std::fprintf(stderr, "--batches: a comma-separated list of 1..8192\n");
          return 2;
        }
        batches.push_back(b);
        p = *end == ',' ? end + 1 : end;
      }
      if (batches.empty()) batches.push_back(1);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--iters N] [--experts-only] [--balanced] [--batches B,...]\n",
                   argv[0]);
      return 2;
    }
  }
  const cudaStream_t stream = mls::bench::open_device("fp8_kernels_benchmark", iters);
  if (!stream) return 0;
  int num_sms = 0;
  check(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  if (!experts_only) bench_skinny(stream, num_sms, iters);
  bench_experts(stream, std::max(1, iters / 5), batches, balanced);
  return 0;
}
