// CPU forward timings on the bundled fixtures: a 70-token prefill and one decode step at
// 70 tokens of context. Run: build/bench/forward_cpu_benchmark
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "engine/model_runner.h"

namespace mls {
namespace {

const std::string kData = MLASERVE_TEST_DATA;

// A 70-token prompt in one contiguous block with room for one more token.
ForwardBatch prompt_70(ModelRunner& runner) {
  runner.allocate_kv_cache(1, 71);
  ForwardBatch b;
  for (int i = 0; i < 70; ++i) b.token_ids.push_back(2 + (i * 37) % 1000);
  b.seqs.push_back({.num_new = 70, .block_table = {0}, .prompt_len = 70});
  return b;
}

void prefill_70(benchmark::State& state, const std::string& fixture) {
  ModelRunner runner({.model = kData + "/" + fixture});
  ForwardBatch b = prompt_70(runner);
  for (auto _ : state) benchmark::DoNotOptimize(runner.forward(b).raw());
  state.counters["tokens/s"] =
      benchmark::Counter(70.0 * state.iterations(), benchmark::Counter::kIsRate);
}

void decode_at_70(benchmark::State& state, const std::string& fixture) {
  ModelRunner runner({.model = kData + "/" + fixture});
  ForwardBatch b = prompt_70(runner);
  runner.forward(b);
  b.token_ids = {5};
  b.seqs[0].num_cached = 70;
  b.seqs[0].num_new = 1;
  for (auto _ : state) benchmark::DoNotOptimize(runner.forward(b).raw());
}

}  // namespace
}  // namespace mls

int main(int argc, char** argv) {
  for (const char* f : {"tiny-glm5", "tiny-glm5-fp8", "tiny-dsv32", "tiny-dsv32-fp8", "tiny-dsv3",
                        "tiny-dsv3-fp8"}) {
    benchmark::RegisterBenchmark((std::string("prefill70/") + f).c_str(), mls::prefill_70, f)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("decode@70/") + f).c_str(), mls::decode_at_70, f)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
