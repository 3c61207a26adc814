#include "engine/memory_planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "engine/engine.h"

namespace mls {
namespace {

const std::string kData = MLASERVE_TEST_DATA;

PlanBudget roomy() {
  return {.device_bytes = int64_t{8} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}};
}

TEST(MemoryPlanner, ProfilingBatchSpreadsTokensOverSequences) {
  const ForwardBatch b = profiling_batch(10, 4, 2);
  ASSERT_EQ(b.seqs.size(), 4u);
  EXPECT_EQ(b.seqs[0].num_new, 3);
  EXPECT_EQ(b.seqs[3].num_new, 2);
  EXPECT_EQ(b.num_tokens(), 10);
  EXPECT_EQ(b.seqs[1].block_table, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(b.num_logit_rows(), 4);
}

// real and meta profiles trace the same allocations.
TEST(MemoryPlanner, RealAndMetaProfilesAgreeExactly) {
  for (const char* f : {"tiny-glm5", "tiny-dsv32", "tiny-dsv3-fp8"})
    for (int tp : {1, 2})
      for (bool sp : {false, true}) {
        ModelRunner runner(
            {.model = kData + "/" + f, .tensor_parallel_size = tp, .sequence_parallel = sp});
        const PlanLimits limits{.max_num_batched_tokens = 512,
                                .max_num_seqs = 16,
                                .max_model_len = 1024,
                                .block_size = 16};
        const MemoryPlan real = plan_memory(runner, limits, roomy(), ProfileMode::kReal);
        const MemoryPlan meta = plan_memory(runner, limits, roomy(), ProfileMode::kMeta);
        for (int r = 0; r < tp; ++r) {
          EXPECT_EQ(real.ranks[r].profiled_activation_bytes,
                    meta.ranks[r].profiled_activation_bytes)
              << f << " tp" << tp << " sp" << sp << " rank " << r;
          EXPECT_EQ(real.ranks[r].workspace_bytes, meta.ranks[r].workspace_bytes);
        }
        EXPECT_EQ(real.num_blocks, meta.num_blocks);
      }
}

// The analytic twin predicts the profiled peak (DESIGN.md: within a few percent; here 5%).
TEST(MemoryPlanner, PredictedActivationMatchesProfiled) {
  for (const char* f : {"tiny-glm5", "tiny-dsv32", "tiny-dsv3"})
    for (int tp : {1, 2, 8})
      for (bool sp : {false, true}) {
        ModelRunner runner(
            {.model = kData + "/" + f, .tensor_parallel_size = tp, .sequence_parallel = sp});
        for (int64_t tokens : {512, 8192}) {
          const PlanLimits limits{.max_num_batched_tokens = tokens,
                                  .max_num_seqs = 256,
                                  .max_model_len = 4096,
                                  .block_size = 64};
          const MemoryPlan plan = plan_memory(runner, limits, roomy(), ProfileMode::kMeta);
          for (int r = 0; r < tp; ++r) {
            const RankPlan& p = plan.ranks[r];
            const double err = std::abs(static_cast<double>(p.predicted_activation_bytes) -
                                        static_cast<double>(p.profiled_activation_bytes)) /
                               static_cast<double>(p.profiled_activation_bytes);
            EXPECT_LE(err, 0.05) << f << " tp" << tp << " sp" << sp << " T" << tokens << " rank "
                                 << r << ": predicted " << p.predicted_activation_bytes
                                 << " profiled " << p.profiled_activation_bytes;
            EXPECT_EQ(p.predicted_weights_bytes, p.weights_bytes);
          }
        }
      }
}

TEST(MemoryPlanner, KvSizingAndTheTooSmallMessage) {
  ModelRunner runner({.model = kData + "/tiny-glm5"});
  const PlanLimits limits{
      .max_num_batched_tokens = 256, .max_num_seqs = 8, .max_model_len = 512, .block_size = 16};
  const int64_t per_token = KvCache::bytes_per_token(runner.config(), DType::kF32);
  MemoryPlan plan = plan_memory(runner, limits,
                                {.device_bytes = int64_t{1} << 30,
                                 .utilization = 0.5,
                                 .kv_cache_memory_bytes = per_token * 16 * 100 + 7},
                                ProfileMode::kMeta);
  EXPECT_EQ(plan.num_blocks, 100);
  EXPECT_EQ(plan.kv_tokens, 1600);
  EXPECT_DOUBLE_EQ(plan.max_concurrency, 1600.0 / 512.0);
  try {
    plan_memory(runner, limits,
                {.device_bytes = int64_t{1} << 30,
                 .utilization = 0.5,
                 .kv_cache_memory_bytes = per_token * 16 * 20},
                ProfileMode::kMeta);
    FAIL() << "a 512-token request cannot fit in 320 tokens";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("largest max_model_len that fits is 320"),
              std::string::npos)
        << e.what();
  }
}

// GLM-5's attention and indexer widths, 2 layers (the first dense), 16 experts, 16k vocab.
std::filesystem::path glm5_shaped_dir() {
  const auto dir = std::filesystem::temp_directory_path() / "mlaserve-glm5-shaped";
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"model_type", "glm_moe_dsa"},
                      {"vocab_size", 16384},
                      {"hidden_size", 6144},
                      {"intermediate_size", 12288},
                      {"moe_intermediate_size", 2048},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 64},
                      {"num_key_value_heads", 64},
                      {"q_lora_rank", 2048},
                      {"kv_lora_rank", 512},
                      {"qk_rope_head_dim", 64},
                      {"qk_nope_head_dim", 192},
                      {"v_head_dim", 256},
                      {"n_routed_experts", 16},
                      {"n_shared_experts", 1},
                      {"num_experts_per_tok", 8},
                      {"n_group", 1},
                      {"topk_group", 1},
                      {"norm_topk_prob", true},
                      {"routed_scaling_factor", 2.5},
                      {"rms_norm_eps", 1e-5},
                      {"max_position_embeddings", 202752},
                      {"first_k_dense_replace", 1},
                      {"index_n_heads", 32},
                      {"index_head_dim", 128},
                      {"index_topk", 2048},
                      {"tie_word_embeddings", false},
                      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}}};
  std::ofstream(dir / "config.json") << c.dump(2);
  return dir;
}

TEST(MemoryPlanner, Glm5ShapedTp8SequenceParallelPlansInMetaMode) {
  // Weights are traced too: nothing of the model needs to fit in this machine's memory.
  ModelRunner runner({.model = glm5_shaped_dir(),
                      .load_format = LoadFormat::kDummy,
                      .tensor_parallel_size = 8,
                      .sequence_parallel = true,
                      .meta = true});
  auto plan_at = [&](int64_t tokens) {
    const PlanLimits limits{.max_num_batched_tokens = tokens,
                            .max_num_seqs = 256,
                            .max_model_len = 32768,
                            .block_size = 64};
    return plan_memory(
        runner, limits,
        {.device_bytes = int64_t{141} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}},
        ProfileMode::kMeta);
  };
  const MemoryPlan plan = plan_at(8192);
  // Hand count: every layer is a full indexer layer (index_skip_topk_offset 2, freq 1 → all
  // full), each caching the 512 + 64 latent and the 128-wide indexer key, in fp32 on the CPU.
  EXPECT_EQ(plan.ranks[0].kv_bytes_per_token, 2 * (512 + 64 + 128) * 4);
  const MemoryPlan half = plan_at(4096);
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& p = plan.ranks[r];
    // Twice the tokens, at most twice the peak (plus the fixed part): no [heads, T, T] score
    // tensor exists, attention is tiled.
    EXPECT_LT(p.profiled_activation_bytes, 2 * half.ranks[r].profiled_activation_bytes)
        << "attention must stay tiled";
    EXPECT_LE(std::abs(p.predicted_activation_bytes - p.profiled_activation_bytes),
              p.profiled_activation_bytes / 20);
  }
  std::printf("%s", plan.report().c_str());
  EXPECT_GT(plan.num_blocks, 0);
}

// After planning, the worst steps serving can produce never pass the profiled peak, and a pool
// filled to exhaustion preempts instead of failing.
TEST(MemoryPlanner, StressNeverPassesTheProfiledPeak) {
  ModelRunner runner({.model = kData + "/tiny-glm5"});
  const PlanLimits limits{
      .max_num_batched_tokens = 128, .max_num_seqs = 8, .max_model_len = 256, .block_size = 16};
  const MemoryPlan plan = plan_memory(
      runner, limits,
      {.device_bytes = int64_t{1} << 30,
       .utilization = 0.9,
       .kv_cache_memory_bytes = KvCache::bytes_per_token(runner.config(), DType::kF32) * 16 * 24},
      ProfileMode::kReal);
  apply_plan(runner, plan);  // from here an allocation past the plan throws
  Engine engine(runner, {.max_num_batched_tokens = limits.max_num_batched_tokens,
                         .max_num_seqs = limits.max_num_seqs,
                         .max_model_len = limits.max_model_len});
  std::mt19937 g(7);
  for (int i = 0; i < 24; ++i) {
    Request r;
    r.id = fmt::format("r{}", i);
    const int len = i % 3 == 0 ? 200 : 1 + static_cast<int>(g() % 60);
    for (int j = 0; j < len; ++j) r.prompt_ids.push_back(2 + static_cast<int32_t>(g() % 1000));
    r.params.max_tokens = 256 - len;
    r.params.ignore_eos = true;
    r.on_token = [](const TokenEvent&) { return Verdict::kContinue; };
    engine.add_request(std::move(r));
  }
  runner.allocator(0).reset_peaks();
  while (engine.step()) {
  }
  EXPECT_LE(runner.allocator(0).stats().pk(MemTag::kActivation),
            plan.ranks[0].profiled_activation_bytes);
  EXPECT_GT(engine.stats().num_preemptions, 0) << "the pool should have been exhausted";
  EXPECT_EQ(engine.stats().finished_requests, 24);
}

}  // namespace
}  // namespace mls
