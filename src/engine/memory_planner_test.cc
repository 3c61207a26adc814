#include "engine/memory_planner.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "ops/scratch_sizes.h"
#include "test_data.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {
namespace {

PlanBudget roomy() {
  return {.device_bytes = int64_t{8} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}};
}

// One sequence may not exceed max_model_len, so with fewer sequences than it takes to fill
// max_num_batched_tokens the fresh step is smaller (a bench at batch 1 and 4k context planned an
// 8,192-token sequence and outgrew its block tables).
TEST(MemoryPlanner, TheFreshStepKeepsEachSequenceWithinMaxModelLen) {
  const ServingLimits l{
      .max_num_batched_tokens = 10, .max_num_seqs = 2, .max_model_len = 3, .block_size = 2};
  EXPECT_EQ(prefill_blocks(l), 2 + 2);
  const std::vector<ProfileStep> steps = worst_case_steps(l, prefill_blocks(l));
  const ForwardBatch& prefill = steps[0].batch;
  ASSERT_EQ(prefill.seqs.size(), 2u);
  for (const SequenceChunk& sc : prefill.seqs) EXPECT_EQ(sc.num_new, 3);
  EXPECT_EQ(prefill.num_tokens(), 6);
}

TEST(MemoryPlanner, WorstCaseStepsCoverTheLimits) {
  const ServingLimits l{
      .max_num_batched_tokens = 10, .max_num_seqs = 4, .max_model_len = 9, .block_size = 2};
  EXPECT_EQ(prefill_blocks(l), 2 + 2 + 1 + 1);
  const std::vector<ProfileStep> steps = worst_case_steps(l, prefill_blocks(l));
  ASSERT_EQ(steps.size(), 3u);
  const ForwardBatch& prefill = steps[0].batch;
  ASSERT_EQ(prefill.seqs.size(), 4u);
  EXPECT_EQ(prefill.seqs[0].num_new, 3);
  EXPECT_EQ(prefill.seqs[3].num_new, 2);
  EXPECT_EQ(prefill.num_tokens(), 10);
  EXPECT_EQ(prefill.seqs[1].block_table, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(prefill.num_logit_rows(), 4);
  const ForwardBatch& decode = steps[1].batch;
  ASSERT_EQ(decode.seqs.size(), 4u);
  for (const SequenceChunk& sc : decode.seqs) {
    EXPECT_EQ(sc.num_cached, 8);  // max_model_len − 1
    EXPECT_EQ(sc.num_new, 1);
    EXPECT_EQ(sc.block_table, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  }
  const ForwardBatch& chunk = steps[2].batch;
  EXPECT_EQ(chunk.num_tokens(), 10);
  EXPECT_EQ(chunk.seqs[0].num_cached + chunk.seqs[0].num_new, 9);
  EXPECT_EQ(chunk.seqs[0].num_new, 7);
  EXPECT_EQ(chunk.seqs[0].block_table, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(chunk.num_logit_rows(), 4);
}

// Meta mode is the prediction: for every fixture, tp ∈ {1, 2, 8}, sequence parallelism on and
// off, each worst-case step's high-water mark in meta mode equals the real run's to the byte,
// on every rank, and so do the weights.
TEST(MemoryPlanner, MetaEqualsRealToTheByte) {
  int cases = 0;
  for (const char* f :
       {"tiny-dsv3", "tiny-dsv3-fp8", "tiny-dsv32", "tiny-dsv32-fp8", "tiny-glm5", "tiny-glm5-fp8"})
    for (int tp : {1, 2, 8})
      for (bool sp : {false, true}) {
        ModelRunner runner({.model = kTestData.string() + "/" + f,
                            .tensor_parallel_size = tp,
                            .sequence_parallel = sp});
        const ServingLimits limits{.max_num_batched_tokens = 77,
                                   .max_num_seqs = 6,
                                   .max_model_len = 300,
                                   .block_size = 16};
        const MemoryPlan real = plan_memory(runner, limits, roomy(), ProfileMode::kReal);
        const MemoryPlan meta = plan_memory(runner, limits, roomy(), ProfileMode::kMeta);
        for (int r = 0; r < tp; ++r) {
          const RankPlan &a = real.ranks[r], &b = meta.ranks[r];
          const std::string at = fmt::format("{} tp{} sp{} rank {}", f, tp, sp, r);
          EXPECT_EQ(a.weights_bytes, b.weights_bytes) << at;
          EXPECT_EQ(a.prefill_workspace_bytes, b.prefill_workspace_bytes) << at;
          EXPECT_EQ(a.decode_workspace_bytes, b.decode_workspace_bytes) << at;
          EXPECT_EQ(a.long_chunk_workspace_bytes, b.long_chunk_workspace_bytes) << at;
          EXPECT_EQ(a.step_workspace_bytes, b.step_workspace_bytes) << at;
          EXPECT_EQ(a.step_comm_bytes, b.step_comm_bytes) << at;
          EXPECT_EQ(a.step_peak_bytes, b.step_peak_bytes) << at;
          EXPECT_GT(b.decode_workspace_bytes, 0) << at;
          // Everything a step allocates above what the rank holds fits the workspace (its
          // activations and scratch) and its collectives' buffers.
          EXPECT_GE(b.step_workspace_bytes + b.step_comm_bytes, b.step_peak_bytes) << at;
        }
        EXPECT_EQ(real.num_blocks, meta.num_blocks);
        ++cases;
      }
  EXPECT_EQ(cases, 36);
}

TEST(MemoryPlanner, KvSizingAndTheMaxModelLenRule) {
  ModelRunner runner({.model = kTestData.string() + "/tiny-glm5"});
  const ServingLimits limits{
      .max_num_batched_tokens = 256, .max_num_seqs = 8, .max_model_len = 512, .block_size = 16};
  const int64_t per_token = KvCache::bytes_per_token(runner.config(), DType::kF32);
  const auto budget = [&](int64_t blocks) {
    return PlanBudget{.device_bytes = int64_t{1} << 30,
                      .utilization = 0.5,
                      .kv_cache_memory_bytes = per_token * 16 * blocks + 7};
  };
  MemoryPlan plan = plan_memory(runner, limits, budget(100), ProfileMode::kMeta);
  EXPECT_EQ(plan.num_blocks, 100);
  EXPECT_EQ(plan.kv_tokens, 1600);
  EXPECT_EQ(plan.limits, limits);
  EXPECT_FALSE(plan.max_model_len_capped);
  EXPECT_DOUBLE_EQ(plan.max_concurrency, 1600.0 / 512.0);
  // Set by the user and too long: start-up fails naming the largest that fits.
  try {
    plan_memory(runner, limits, budget(20), ProfileMode::kMeta);
    FAIL() << "a 512-token request cannot fit in 320 tokens";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("largest max_model_len that fits is 320"),
              std::string::npos)
        << e.what();
  }
  // Not set: the model's max_position_embeddings, capped to what the pool holds.
  ServingLimits unset = limits;
  unset.max_model_len = 0;
  plan = plan_memory(runner, unset, budget(20), ProfileMode::kMeta);
  EXPECT_TRUE(plan.max_model_len_capped);
  EXPECT_EQ(plan.limits.max_model_len, 320);
  EXPECT_LT(320, runner.config().max_position_embeddings);
  unset.max_model_len = runner.config().max_position_embeddings + 1;
  EXPECT_THROW(plan_memory(runner, unset, budget(20), ProfileMode::kMeta), InvalidArgument);
}

// The engine serves with the limits of the plan applied to its runner, and no others.
TEST(MemoryPlanner, TheEngineRefusesLimitsThePlanWasNotMadeFor) {
  ModelRunner runner({.model = kTestData.string() + "/tiny-glm5"});
  const ServingLimits limits{
      .max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 256, .block_size = 16};
  const MemoryPlan plan = plan_memory(
      runner, limits,
      {.device_bytes = int64_t{1} << 30, .utilization = 0.5, .kv_cache_memory_bytes = 1 << 24},
      ProfileMode::kMeta);
  apply_plan(runner, plan);
  ServingLimits other = plan.limits;
  other.max_num_seqs = 8;
  EXPECT_THROW(Engine(runner, {.limits = other}), InvalidArgument);
  Engine engine(runner, {.limits = plan.limits});
  EXPECT_EQ(engine.config().limits, plan.limits);
}

// A runner is planned again for larger limits (bench runs each batch size on one loaded model):
// the new profile is not capped by the old plan, and gives what a fresh runner's does.
TEST(MemoryPlanner, ReplanningIsNotCappedByThePreviousPlan) {
  const std::string model = kTestData.string() + "/tiny-glm5";
  ModelRunner runner({.model = model});
  // A cache of exactly the small limits' blocks, as a bench sizes it: no room to spare.
  const int64_t per_token = KvCache::bytes_per_token(runner.config(), DType::kF32);
  const PlanBudget budget{.device_bytes = int64_t{1} << 30,
                          .utilization = 0.5,
                          .kv_cache_memory_bytes = 64 * per_token};
  const ServingLimits small{
      .max_num_batched_tokens = 16, .max_num_seqs = 1, .max_model_len = 64, .block_size = 16};
  const ServingLimits large{
      .max_num_batched_tokens = 256, .max_num_seqs = 8, .max_model_len = 64, .block_size = 16};
  apply_plan(runner, plan_memory(runner, small, budget, ProfileMode::kMeta));
  const MemoryPlan again = plan_memory(runner, large, budget, ProfileMode::kMeta);
  ModelRunner fresh({.model = model});
  const MemoryPlan want = plan_memory(fresh, large, budget, ProfileMode::kMeta);
  ASSERT_EQ(again.ranks.size(), want.ranks.size());
  EXPECT_EQ(again.ranks[0].step_workspace_bytes, want.ranks[0].step_workspace_bytes);
  EXPECT_EQ(again.num_blocks, want.num_blocks);
  apply_plan(runner, again);
  Engine engine(runner, {.limits = again.limits});
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
    const ServingLimits limits{.max_num_batched_tokens = tokens,
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
    // Twice the tokens, at most twice the peak (plus the fixed part): no [heads, T, T] score
    // tensor exists, attention is tiled.
    EXPECT_LT(plan.ranks[r].prefill_workspace_bytes, 2 * half.ranks[r].prefill_workspace_bytes)
        << "attention must stay tiled";
  }
  std::printf("%s", plan.report().c_str());
  EXPECT_GT(plan.num_blocks, 0);
}

// `plan-memory --device cuda --profile-mode meta` on a machine without a GPU: the GPU's layout
// (bf16 weights with f32 norms, the bf16 latent cache, the GPU ops' scratch, the GEMM workspace
// and the stated CUDA-context allowance), checked against a hand count.
TEST(MemoryPlanner, PlansAGpuWithoutOne) {
  ModelRunner runner({.model = glm5_shaped_dir(),
                      .load_format = LoadFormat::kDummy,
                      .device = Device::cuda(0),
                      .meta = true});
  const ServingLimits limits{.max_num_batched_tokens = 8192,
                             .max_num_seqs = 256,
                             .max_model_len = 32768,
                             .block_size = 64};
  const MemoryPlan plan = plan_memory(
      runner, limits,
      {.device_bytes = int64_t{141} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}},
      ProfileMode::kMeta);
  const RankPlan& p = plan.ranks[0];
  EXPECT_EQ(p.kv_bytes_per_token, 2 * (512 + 64 + 128) * 2);  // bf16 latent + indexer key
  const int64_t H = 6144, V = 16384, nh = 64, qr = 2048, rkv = 512, dn = 192, dv = 256;
  const int64_t bf16 =
      2 * V * H +                                // embed, lm_head
      2 * ((qr + rkv + 64 + 128 + 32) * H +      // fused q_a, kv_a, indexer wk, weights_proj
           nh * (dn + 64) * qr +                 // q_b
           nh * (dn + dv) * rkv + H * nh * dv +  // kv_b, o_proj
           32 * 128 * qr +                       // indexer wq_b
           nh * rkv * dn) +                      // W_UKᵀ
      3 * 12288 * H +                            // layer 0: dense MLP
      16 * H +
      (16 + 1) * 3 * 2048 * H;  // layer 1: router, experts, shared expert
  const int64_t f32 = H + 2 * (2 * H + qr + rkv + 2 * 128) + 16;  // norms, biases
  EXPECT_EQ(p.weights_bytes, 2 * bf16 + 4 * f32);
  EXPECT_EQ(p.gemm_workspace_bytes, int64_t{32} << 20);
  EXPECT_EQ(p.untracked_bytes, kCudaContextAllowanceBytes);
  // The decode step at 32k context: DSA attention reads the 2,048 chosen keys unsplit, and the
  // indexer's fp32 scores of 256 rows over the 32k keys are GPU scratch the step holds (the
  // CPU's plan has none).
  EXPECT_EQ(ops::scratch::attention_splits(256, 64, 1, 512, 2048, true, false).floats, 0);
  EXPECT_GT(p.decode_workspace_bytes, ops::scratch::indexer_scratch_floats(256, 32768, 2048) * 4);
  std::printf("%s", plan.report().c_str());
}

// On the GPU (skipped without one): the plan a machine without a GPU makes (a meta runner on the
// cuda device kind) equals the real profile to the byte — the GPU ops' scratch included — for
// every fixture at tp 1 and 2 (ranks sharing the GPU) and the GLM-5-shaped FP8 model.
TEST(MemoryPlanner, GpuMetaEqualsRealToTheByte) {
#ifdef MLASERVE_CUDA_RUNTIME
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
#else
  GTEST_SKIP() << "no CUDA device here";
#endif
  struct Case {
    std::string model;
    int tp;
    LoadFormat format;
  };
  std::vector<Case> cases;
  for (const char* f :
       {"tiny-dsv3", "tiny-dsv3-fp8", "tiny-dsv32", "tiny-dsv32-fp8", "tiny-glm5", "tiny-glm5-fp8"})
    for (int tp : {1, 2}) cases.push_back({kTestData.string() + "/" + f, tp, LoadFormat::kAuto});
  cases.push_back(
      {std::string(MLASERVE_SOURCE_DIR) + "/bench/models/glm5-shaped", 1, LoadFormat::kDummy});
  for (const Case& c : cases)
    for (bool sp : {false, true}) {
      if (sp && c.tp == 1) continue;
      const auto options = [&](bool meta) {
        return RunnerOptions{.model = c.model,
                             .load_format = c.format,
                             .tensor_parallel_size = c.tp,
                             .sequence_parallel = sp,
                             .device = Device::cuda(0),
                             .ranks_per_device = c.tp,
                             .meta = meta};
      };
      const ServingLimits limits{.max_num_batched_tokens = 2048,
                                 .max_num_seqs = 64,
                                 .max_model_len = 4096,
                                 .block_size = 64};
      const PlanBudget budget{.device_bytes = (int64_t{140} << 30) / c.tp,
                              .utilization = 0.5,
                              .kv_cache_memory_bytes = int64_t{1} << 30};
      MemoryPlan real, meta;
      {
        ModelRunner runner(options(false));
        real = plan_memory(runner, limits, budget, ProfileMode::kReal);
      }
      {
        ModelRunner runner(options(true));
        meta = plan_memory(runner, limits, budget, ProfileMode::kMeta);
      }
      for (int r = 0; r < c.tp; ++r) {
        const RankPlan &a = real.ranks[r], &b = meta.ranks[r];
        const std::string at = fmt::format("{} tp{} sp{} rank {}", c.model, c.tp, sp, r);
        EXPECT_EQ(a.weights_bytes, b.weights_bytes) << at;
        EXPECT_EQ(a.prefill_workspace_bytes, b.prefill_workspace_bytes) << at;
        EXPECT_EQ(a.decode_workspace_bytes, b.decode_workspace_bytes) << at;
        EXPECT_EQ(a.long_chunk_workspace_bytes, b.long_chunk_workspace_bytes) << at;
        EXPECT_EQ(a.gemm_workspace_bytes, b.gemm_workspace_bytes) << at;
        EXPECT_EQ(a.step_workspace_bytes, b.step_workspace_bytes) << at;
        // A meta runner traces the scratch of the communicator the GPU runner takes
        // (parallel/collective_scratch.h).
        EXPECT_EQ(a.step_comm_bytes, b.step_comm_bytes) << at;
        std::printf(
            "%s: step workspace %lld bytes (real = meta), step collectives %lld real = %lld "
            "meta, untracked %lld measured\n",
            at.c_str(), static_cast<long long>(a.step_workspace_bytes),
            static_cast<long long>(a.step_comm_bytes), static_cast<long long>(b.step_comm_bytes),
            static_cast<long long>(a.untracked_bytes));
      }
    }
}

// A meta runner of the GPU kind plans the collectives' scratch of the communicator a GPU runner
// would take: the device communicator's fp32 all_reduce sums when ranks share a GPU, NCCL's
// widened bf16 reductions on a GPU per rank (reduce_scatter: the input and the result). The
// largest is the residual stream's, tokens × hidden fp32 values (by hand: hidden 256).
TEST(MemoryPlanner, MetaOfAGpuTracesItsCommunicatorsScratch) {
  const ServingLimits limits{
      .max_num_batched_tokens = 512, .max_num_seqs = 8, .max_model_len = 256, .block_size = 16};
  const PlanBudget budget{
      .device_bytes = int64_t{16} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}};
  const auto comm = [&](int rpd, bool sp) {
    ModelRunner runner({.model = kTestData.string() + "/tiny-glm5",
                        .tensor_parallel_size = 2,
                        .sequence_parallel = sp,
                        .device = Device::cuda(0),
                        .ranks_per_device = rpd,
                        .meta = true});
    return plan_memory(runner, limits, budget, ProfileMode::kMeta).ranks[1].step_comm_bytes;
  };
  const int64_t residual = int64_t{512} * 256 * 4;
  EXPECT_EQ(comm(2, false), residual);         // device communicator: all_reduce sums
  EXPECT_EQ(comm(1, false), residual);         // NCCL: a bf16 all_reduce widened to fp32
  EXPECT_EQ(comm(2, true), 0);                 // device reduce_scatter sums in place
  EXPECT_EQ(comm(1, true), residual / 2 * 3);  // NCCL: input widened, then the result
}

// Every rank's step-arena offsets of one step, in allocation order.
std::vector<std::vector<int64_t>> step_offsets(ModelRunner& runner, const ForwardBatch& batch,
                                               const ForwardObserver& observer = nullptr) {
  for (int r = 0; r < runner.tp_size(); ++r) runner.allocator(r).record_step_offsets(true);
  runner.forward_sample(batch, std::vector<ops::RowSampling>(batch.num_logit_rows()), observer);
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < runner.tp_size(); ++r) {
    out.push_back(runner.allocator(r).recorded_step_offsets());
    runner.allocator(r).record_step_offsets(false);
  }
  return out;
}

// A plan for small limits, applied to the runner.
MemoryPlan apply_small_plan(ModelRunner& runner, ProfileMode mode) {
  const ServingLimits limits{
      .max_num_batched_tokens = 96, .max_num_seqs = 8, .max_model_len = 256, .block_size = 16};
  const MemoryPlan plan = plan_memory(runner, limits,
                                      {.device_bytes = int64_t{8} << 30,
                                       .utilization = 0.5,
                                       .kv_cache_memory_bytes = int64_t{1} << 26},
                                      mode);
  apply_plan(runner, plan);
  return plan;
}

// What CUDA graph replay needs: inside the planned step workspace, two identical steps place
// every allocation at the same address, and meta mode places it where the real step does.
void expect_fixed_addresses(const RunnerOptions& options) {
  ModelRunner runner(options);
  const MemoryPlan plan = apply_small_plan(runner, ProfileMode::kReal);
  for (int r = 0; r < runner.tp_size(); ++r)
    EXPECT_EQ(runner.allocator(r).stats().step_workspace, plan.ranks[r].step_workspace_bytes);
  const std::vector<ProfileStep> steps = worst_case_steps(plan.limits, plan.num_blocks);
  for (const ProfileStep& step : steps) {
    const auto first = step_offsets(runner, step.batch);
    const auto second = step_offsets(runner, step.batch);
    runner.set_meta(true);  // with a cache of sizes only, as a meta profile has
    runner.allocate_kv_cache(plan.num_blocks, plan.limits);
    const auto traced = step_offsets(runner, step.batch);
    runner.set_meta(false);
    runner.allocate_kv_cache(plan.num_blocks, plan.limits);
    for (int r = 0; r < runner.tp_size(); ++r) {
      EXPECT_GT(first[r].size(), 10u) << step.name;
      // The block tables at their fixed shape come first: the same address whatever the batch.
      EXPECT_EQ(first[r][0], 0) << step.name;
      EXPECT_EQ(first[r], second[r]) << step.name << " rank " << r;
      EXPECT_EQ(first[r], traced[r]) << step.name << " rank " << r;
    }
  }
}

TEST(MemoryPlanner, IdenticalStepsGetIdenticalAddresses) {
  for (const char* f : {"tiny-glm5", "tiny-dsv3-fp8"})
    expect_fixed_addresses({.model = kTestData.string() + "/" + f,
                            .tensor_parallel_size = 2,
                            .sequence_parallel = true});
}

// An observer (the bench's per-layer timing, the conformance taps) changes nothing a step
// allocates: the plan is traced without one, and a step that allocated more for its observer
// outgrew it (the 8,192-token bench prefill did, by the DSA indexer's dense keys). At tp 1: a
// sharded layout gathers what it shows an observer, a temporary freed at once.
TEST(MemoryPlanner, AnObserverChangesNothingAStepAllocates) {
  for (const char* f : {"tiny-glm5", "tiny-dsv3-fp8"}) {
    ModelRunner runner({.model = kTestData.string() + "/" + f});
    const MemoryPlan plan = apply_small_plan(runner, ProfileMode::kMeta);
    for (const ProfileStep& step : worst_case_steps(plan.limits, plan.num_blocks)) {
      const auto plain = step_offsets(runner, step.batch);
      const auto observed =
          step_offsets(runner, step.batch, [](std::string_view, const Tensor&) {});
      EXPECT_EQ(plain[0], observed[0]) << f << " " << step.name;
    }
  }
}

TEST(MemoryPlanner, GpuIdenticalStepsGetIdenticalAddresses) {
#ifdef MLASERVE_CUDA_RUNTIME
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
#else
  GTEST_SKIP() << "no CUDA device here";
#endif
  for (const char* f : {"tiny-glm5", "tiny-dsv3-fp8"})
    expect_fixed_addresses({.model = kTestData.string() + "/" + f,
                            .tensor_parallel_size = 2,
                            .sequence_parallel = true,
                            .device = Device::cuda(0),
                            .ranks_per_device = 2});
}

// Random steps within the limits — prefill chunks at any offset, decodes at any context, mixed,
// small ones as often as large ones — all run inside the planned step workspace (a step past
// it would throw OutOfMemory). Placement is the same in meta mode (tested above), so shapes
// are run in meta mode: a GPU layout is checked without a GPU.
void expect_random_steps_fit(const RunnerOptions& options, const ServingLimits& limits,
                             int num_steps) {
  ModelRunner runner(options);
  const std::string at = options.model.filename().string() + " on " + options.device.str();
  const MemoryPlan plan =
      plan_memory(runner, limits,
                  {.device_bytes = int64_t{141} << 30,
                   .utilization = 0.9,
                   // a meta runner holds sizes only
                   .kv_cache_memory_bytes = int64_t{1} << (options.meta ? 32 : 26)},
                  ProfileMode::kMeta);
  apply_plan(runner, plan);
  runner.set_meta(true);
  runner.allocate_kv_cache(plan.num_blocks, plan.limits);
  std::mt19937 g(5);
  const int64_t blocks = plan.num_blocks, bs = limits.block_size;
  const int tp = runner.tp_size();
  int64_t largest = 0;
  for (int i = 0; i < num_steps; ++i) {
    ForwardBatch b;
    int64_t budget = 1 + g() % (i % 2 ? limits.max_num_batched_tokens : 64);
    const int64_t seqs = 1 + g() % std::min<int64_t>(limits.max_num_seqs, budget);
    for (int64_t s = 0; s < seqs; ++s) {
      const int64_t left = seqs - s - 1;
      const int64_t n = s + 1 == seqs ? budget : 1 + g() % (budget - left);
      const int64_t cached = g() % (limits.max_model_len - n + 1);
      budget -= n;
      std::vector<int32_t> table((cached + n + bs - 1) / bs);
      for (auto& t : table) t = static_cast<int32_t>(g() % blocks);
      b.seqs.push_back({.num_cached = cached,
                        .num_new = n,
                        .block_table = std::move(table),
                        .prompt_len = cached + n});
      b.token_ids.insert(b.token_ids.end(), n, 3);
    }
    runner.reset_peaks();
    runner.forward_sample(b, std::vector<ops::RowSampling>(b.num_logit_rows()));
    for (int r = 0; r < tp; ++r) {
      const int64_t hw = runner.allocator(r).stats().step_high_water;
      EXPECT_LE(hw, plan.ranks[r].step_workspace_bytes) << at << " step " << i;
      largest = std::max(largest, hw);
    }
  }
  EXPECT_GT(largest, plan.ranks[0].step_workspace_bytes / 2) << at;
}

TEST(MemoryPlanner, RandomStepsStayInsideThePlannedWorkspace) {
  const ServingLimits limits{
      .max_num_batched_tokens = 90, .max_num_seqs = 7, .max_model_len = 300, .block_size = 16};
  for (const char* f : {"tiny-dsv32", "tiny-glm5-fp8"})
    expect_random_steps_fit({.model = kTestData.string() + "/" + f,
                             .tensor_parallel_size = 2,
                             .sequence_parallel = true},
                            limits, 300);
  // The GPU's layout and scratch (FP8 paths switching with the token count, attention splits,
  // indexer row groups, MoE alignment) at the GLM-5 shape and the seed's limits.
  expect_random_steps_fit({.model = std::string(MLASERVE_SOURCE_DIR) + "/bench/models/glm5-shaped",
                           .load_format = LoadFormat::kDummy,
                           .tensor_parallel_size = 8,
                           .sequence_parallel = true,
                           .device = Device::cuda(0),
                           .ranks_per_device = 8,
                           .meta = true},
                          {.max_num_batched_tokens = 8192,
                           .max_num_seqs = 256,
                           .max_model_len = 16384,
                           .block_size = 64},
                          200);
}

// After planning, the worst steps serving can produce never pass the profiled peak, and a pool
// filled to exhaustion preempts instead of failing.
TEST(MemoryPlanner, StressNeverPassesTheProfiledPeak) {
  ModelRunner runner({.model = kTestData.string() + "/tiny-glm5"});
  const ServingLimits limits{
      .max_num_batched_tokens = 128, .max_num_seqs = 8, .max_model_len = 256, .block_size = 16};
  const MemoryPlan plan = plan_memory(
      runner, limits,
      {.device_bytes = int64_t{1} << 30,
       .utilization = 0.9,
       .kv_cache_memory_bytes = KvCache::bytes_per_token(runner.config(), DType::kF32) * 16 * 24},
      ProfileMode::kReal);
  apply_plan(runner, plan);  // from here an allocation past the plan throws
  Engine engine(runner, {.limits = plan.limits});
  engine_test::expect_stress_inside_plan(runner, plan, engine, 256);
}

}  // namespace
}  // namespace mls
