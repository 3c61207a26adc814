// The seed's scenario (DESIGN.md "The problem it is built around") on one H200: the GLM-5-shaped
// FP8 model (bench/models/glm5-shaped, dummy weights) at tp = 8 with sequence parallelism, all
// eight ranks on one GPU, --max-num-batched-tokens 8192 --gpu-memory-utilization 0.85, block
// size 1 and 64. Start-up plans memory without error, every rank's profiled step workspace
// equals its meta prediction to the byte, and then 8192-token prefills and max_num_seqs decodes
// run the KV pool to exhaustion (preemption) with no step failing and no step above the plan
// (every step's activations and scratch inside the reserved step workspace). Skips
// visibly without a GPU; takes minutes on the H200.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/memory_planner.h"
#include "test_gpu.h"

namespace mls {
namespace {

constexpr int kTp = 8;

RunnerOptions glm5_fp8_on_one_gpu(bool meta) {
  return {.model = std::string(MLASERVE_SOURCE_DIR) + "/bench/models/glm5-shaped",
          .load_format = LoadFormat::kDummy,
          .tensor_parallel_size = kTp,
          .sequence_parallel = true,
          .device = Device::cuda(0),
          .ranks_per_device = kTp,
          .meta = meta};
}

class SeedScenario : public ::testing::TestWithParam<int64_t> {};

TEST_P(SeedScenario, PlansExactlyAndServesToKvExhaustionWithinThePlan) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device here";
  const ServingLimits limits{.max_num_batched_tokens = 8192, .block_size = GetParam()};
  ModelRunner runner(glm5_fp8_on_one_gpu(false));
  const PlanBudget budget{.device_bytes = device_memory_bytes(runner.device()) / kTp,
                          .utilization = 0.85,
                          .kv_cache_memory_bytes = {}};
  const MemoryPlan plan = plan_memory(runner, limits, budget, ProfileMode::kReal);
  ModelRunner traced(glm5_fp8_on_one_gpu(true));
  const MemoryPlan predicted = plan_memory(traced, limits, budget, ProfileMode::kMeta);
  std::printf("%s", plan.report().c_str());
  for (int r = 0; r < kTp; ++r) {
    const RankPlan &real = plan.ranks[r], &meta = predicted.ranks[r];
    EXPECT_EQ(real.weights_bytes, meta.weights_bytes) << "rank " << r;
    EXPECT_EQ(real.prefill_workspace_bytes, meta.prefill_workspace_bytes) << "rank " << r;
    EXPECT_EQ(real.decode_workspace_bytes, meta.decode_workspace_bytes) << "rank " << r;
    EXPECT_EQ(real.long_chunk_workspace_bytes, meta.long_chunk_workspace_bytes) << "rank " << r;
    EXPECT_EQ(real.step_workspace_bytes, meta.step_workspace_bytes) << "rank " << r;
  }

  apply_plan(runner, plan);
  Engine engine(runner, {.limits = plan.limits});
  std::mt19937 g(11);
  int failed = 0, added = 0;
  const auto add = [&](int64_t prompt_len, int64_t max_tokens) {
    Request req;
    req.id = std::to_string(added++);
    for (int64_t j = 0; j < prompt_len; ++j) req.prompt_ids.push_back(2 + g() % 150000);
    req.params.temperature = 0;
    req.params.max_tokens = max_tokens;
    req.params.ignore_eos = true;
    req.on_token = [&failed](const TokenEvent& ev) {
      failed += ev.error != nullptr;
      return Verdict::kContinue;
    };
    engine.add_request(std::move(req));
  };
  // Every 8192-token step admits one long prompt that then keeps decoding beside the others, so
  // the requests in flight grow until their blocks outnumber the pool and the scheduler preempts.
  // Filling the pool is what takes time (one full prefill step per prompt); once preemption has
  // been seen, kStepsPastExhaustion more steps run (preempted sequences recomputed beside
  // decodes) and the rest is aborted.
  constexpr int64_t kPrompt = 8192 - 64, kStepsPastExhaustion = 24;
  const int64_t requests = plan.kv_tokens / kPrompt + 32;
  for (int64_t i = 0; i < requests; ++i) add(kPrompt, 1024);
  for (int64_t i = 0; i < 32; ++i) add(32, 64);
  std::vector<int64_t> between(kTp);
  for (int r = 0; r < kTp; ++r) {
    runner.allocator(r).reset_peaks();
    between[r] = runner.allocator(r).stats().current_total;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int steps = 0, past = 0;
  while (engine.step()) {
    ++steps;
    if (engine.stats().num_preemptions > 0 && ++past == kStepsPastExhaustion) break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(failed, 0) << "a step failed (out of memory past the plan?)";
  EXPECT_GT(engine.stats().num_preemptions, 0) << "the pool should have been exhausted";
  const int64_t finished = engine.stats().finished_requests;
  for (int i = 0; i < added; ++i) engine.abort_request(std::to_string(i));
  while (engine.step()) {
  }
  for (int r = 0; r < kTp; ++r) {
    const MemStats st = runner.allocator(r).stats();
    const int64_t step_peak = st.peak_total - between[r];
    const RankPlan& p = plan.ranks[r];
    EXPECT_LE(st.step_high_water, p.step_workspace_bytes) << "rank " << r;
    EXPECT_LE(step_peak, p.step_workspace_bytes + p.step_comm_bytes) << "rank " << r;
    std::printf(
        "rank %d: largest serving step %lld bytes (step workspace high-water %lld), plan: step "
        "workspace %lld + collectives %lld\n",
        r, static_cast<long long>(step_peak), static_cast<long long>(st.step_high_water),
        static_cast<long long>(p.step_workspace_bytes), static_cast<long long>(p.step_comm_bytes));
  }
  std::printf("block size %lld: %d requests, %lld finished, %d steps, %lld preemptions in %.1f s\n",
              static_cast<long long>(GetParam()), added, static_cast<long long>(finished), steps,
              static_cast<long long>(engine.stats().num_preemptions), s);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, SeedScenario, ::testing::Values(1, 64));

}  // namespace
}  // namespace mls
