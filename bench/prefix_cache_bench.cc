// Prefix-cache reuse on a multi-turn chat workload (multi_turn.h: 8 conversations × 6 turns
// sharing a 200-token system prompt) on the demo model (DSA) and a dense-attention fixture,
// through the engine: prefix-cache hit rate, prefill tokens saved, wall time with the cache on
// and off, and whether greedy outputs are the same both ways. Exit status 1 when the DSA model's
// hit rate differs from the dense model's or an output changes with the cache.
// Run: build/bench/prefix_cache_bench [cpu | cuda:N]
#include <cstdio>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "multi_turn.h"

namespace mls::bench {
namespace {

struct Row {
  MultiTurnResult on, off;
};

Row measure(const std::string& model, Device device, const MultiTurnSpec& spec) {
  ModelRunner runner({.model = model, .device = device});
  EngineConfig off;
  off.enable_prefix_caching = false;
  return {run_multi_turn(runner, spec, {}), run_multi_turn(runner, spec, off)};
}

void print(const char* name, const char* kind, const Row& r) {
  std::printf("%-10s %-5s %8ld %8ld %8ld %7.1f%% %12.2f %12.2f %5s\n", name, kind,
              static_cast<long>(r.on.prompt_tokens), static_cast<long>(r.on.prefix_queries),
              static_cast<long>(r.on.prefix_hits), 100.0 * r.on.hit_rate(), r.on.seconds,
              r.off.seconds, r.on.answers == r.off.answers ? "yes" : "NO");
}

int run(int argc, char** argv) {
  const Device device = parse_device(argc > 1 ? argv[1] : "cpu");
  const MultiTurnSpec spec;
  const Row dsa = measure(std::string(MLASERVE_SOURCE_DIR) + "/models/demo-glm5", device, spec);
  const Row dense = measure(std::string(MLASERVE_TEST_DATA) + "/tiny-dsv3", device, spec);
  std::printf("%d conversations x %d turns, %ld-token system prompt, %ld-token answers, %s\n",
              spec.conversations, spec.turns, static_cast<long>(spec.system_tokens),
              static_cast<long>(spec.answer_tokens), device.str().c_str());
  std::printf("%-10s %-5s %8s %8s %8s %8s %12s %12s %5s\n", "model", "attn", "prompt", "lookups",
              "hits", "hit rate", "s cache on", "s cache off", "same");
  print("demo-glm5", "DSA", dsa);
  print("tiny-dsv3", "dense", dense);
  const bool equal_rate = dsa.on.prefix_hits == dense.on.prefix_hits &&
                          dsa.on.prefix_queries == dense.on.prefix_queries;
  std::printf("prefill tokens saved: DSA %ld, dense %ld; DSA hit rate %s the dense one\n",
              static_cast<long>(dsa.on.prefix_hits), static_cast<long>(dense.on.prefix_hits),
              equal_rate ? "equals" : "DIFFERS FROM");
  const bool same = dsa.on.answers == dsa.off.answers && dense.on.answers == dense.off.answers;
  return equal_rate && same ? 0 : 1;
}

}  // namespace
}  // namespace mls::bench

int main(int argc, char** argv) {
  try {
    return mls::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefix_cache_bench: %s\n", e.what());
    return 2;
  }
}
