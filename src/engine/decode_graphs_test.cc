// CUDA graphs for decode: the bucket list and padding (CPU), the decision and the bucket list
// resolved once into the memory plan (CPU, a meta runner of the GPU kind), and on a GPU the
// replayed step bitwise equal to the eager one (skipped without a GPU).
#include "engine/decode_graphs.h"

#include <gtest/gtest.h>

#include <cstring>

#include "engine/memory_planner.h"
#include "engine/model_runner.h"
#include "model/kv_cache.h"
#include "test_data.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {
namespace {

TEST(DecodeGraphs, BucketsAreVllmCaptureSizesUpToMaxNumSeqs) {
  EXPECT_EQ(decode_graph_buckets(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(decode_graph_buckets(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(decode_graph_buckets(8), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(decode_graph_buckets(20), (std::vector<int64_t>{1, 2, 4, 8, 16, 20}));
  const std::vector<int64_t> b = decode_graph_buckets(256);
  ASSERT_EQ(b.size(), 35u);
  EXPECT_EQ(b[5], 24);
  EXPECT_EQ(b.back(), 256);
}

ForwardBatch decodes(int64_t n) {
  ForwardBatch b;
  for (int64_t s = 0; s < n; ++s) {
    b.token_ids.push_back(static_cast<int32_t>(10 + s));
    b.seqs.push_back({.num_cached = 5 + s, .num_new = 1, .block_table = {static_cast<int32_t>(s)}});
  }
  return b;
}

TEST(DecodeGraphs, PlainDecodesPadToTheSmallestCapturedBucket) {
  const std::vector<int64_t> captured{1, 2, 4, 8};
  EXPECT_EQ(graph_bucket_for(captured, decodes(1)), 1);
  EXPECT_EQ(graph_bucket_for(captured, decodes(3)), 4);
  EXPECT_EQ(graph_bucket_for(captured, decodes(8)), 8);
  EXPECT_EQ(graph_bucket_for(captured, decodes(9)), 0);  // past the largest: eager
  EXPECT_EQ(graph_bucket_for({}, decodes(1)), 0);
  ForwardBatch prefill = decodes(2);
  prefill.seqs[1].num_new = 2;
  prefill.token_ids.push_back(3);
  EXPECT_EQ(graph_bucket_for(captured, prefill), 0);
  ForwardBatch middle = decodes(2);
  middle.seqs[1].logits = SequenceChunk::Logits::kNone;
  EXPECT_EQ(graph_bucket_for(captured, middle), 0);

  const ForwardBatch padded = pad_decode_batch(decodes(3), 4);
  ASSERT_EQ(padded.seqs.size(), 4u);
  EXPECT_EQ(padded.token_ids, (std::vector<int32_t>{10, 11, 12, 12}));
  EXPECT_EQ(padded.seqs[3].num_cached, padded.seqs[2].num_cached);
  EXPECT_EQ(padded.seqs[3].block_table, padded.seqs[2].block_table);
  EXPECT_EQ(padded.num_logit_rows(), 4);
}

// A speculative verify step (every token of a chunk a logits row) takes the bucket of its
// tokens; padding repeats its last token as one-token decodes at that token's position.
TEST(DecodeGraphs, VerifyStepsPadByTokens) {
  const std::vector<int64_t> captured{1, 2, 4, 8};
  ForwardBatch verify = decodes(2);
  verify.seqs[1].num_new = 3;
  verify.seqs[1].logits = SequenceChunk::Logits::kAll;
  verify.token_ids.insert(verify.token_ids.end(), {20, 21});
  EXPECT_EQ(graph_bucket_for(captured, verify), 4);
  const ForwardBatch padded = pad_decode_batch(verify, 8);
  EXPECT_EQ(padded.num_tokens(), 8);
  EXPECT_EQ(padded.num_logit_rows(), 8);
  ASSERT_EQ(padded.seqs.size(), 6u);
  EXPECT_EQ(padded.token_ids.back(), 21);
  EXPECT_EQ(padded.seqs[2].num_cached, verify.seqs[1].num_cached + 2);
  EXPECT_EQ(padded.seqs[2].num_new, 1);
  EXPECT_EQ(padded.seqs[5].block_table, verify.seqs[1].block_table);
}

TEST(DecodeGraphs, OnlyAGpuAtOneRankWithoutEnforceEagerCaptures) {
  EXPECT_EQ(decode_graphs_off_reason(false, Device::cuda(0), 1), "");
  EXPECT_EQ(decode_graphs_off_reason(true, Device::cuda(0), 1), "--enforce-eager");
  EXPECT_NE(decode_graphs_off_reason(false, Device::cpu(), 1), "");
  EXPECT_NE(decode_graphs_off_reason(false, Device::cuda(0), 2).find("tensor parallelism"),
            std::string::npos);
}

// A model whose decode reads expert counts on the host (bf16 routed experts) cannot be captured:
// its runner says so at construction and plans no graphs.
TEST(DecodeGraphs, Bf16ExpertsKeepDecodeEager) {
  ModelRunner runner({.model = kTestData.string() + "/tiny-glm5",
                      .device = Device::cuda(0),
                      .meta = true,
                      .enforce_eager = false});
  EXPECT_FALSE(runner.decode_graphs());
  EXPECT_NE(runner.decode_graphs_off_reason().find("not block-FP8"), std::string::npos);
  ModelRunner fp8({.model = kTestData.string() + "/tiny-glm5-fp8",
                   .device = Device::cuda(0),
                   .meta = true,
                   .enforce_eager = false});
  EXPECT_TRUE(fp8.decode_graphs());
}

// --enforce-eager and the bucket list are resolved once: the runner decides at construction, the
// plan records the buckets (each profiled as a decode step) and counts the graphs' memory, and
// the KV budget is what is left. A meta runner of the GPU kind needs no GPU.
TEST(DecodeGraphs, ThePlanRecordsTheBucketsAndCountsTheGraphs) {
  const ServingLimits limits{
      .max_num_batched_tokens = 256, .max_num_seqs = 20, .max_model_len = 512, .block_size = 16};
  const PlanBudget budget{
      .device_bytes = int64_t{16} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}};
  MemoryPlan plans[2];
  for (const bool eager : {false, true}) {
    ModelRunner runner({.model = kTestData.string() + "/tiny-glm5-fp8",
                        .device = Device::cuda(0),
                        .meta = true,
                        .enforce_eager = eager});
    EXPECT_EQ(runner.decode_graphs(), !eager);
    plans[eager] = plan_memory(runner, limits, budget, ProfileMode::kMeta);
    // A meta runner captures nothing.
    apply_plan(runner, plans[eager]);
    EXPECT_TRUE(runner.captured_buckets().empty());
  }
  const MemoryPlan &graphs = plans[0], &eager = plans[1];
  EXPECT_EQ(graphs.graph_buckets, decode_graph_buckets(20));
  EXPECT_TRUE(eager.graph_buckets.empty());
  EXPECT_EQ(graphs.ranks[0].graph_bytes, kDecodeGraphAllowanceBytes);
  EXPECT_EQ(eager.ranks[0].graph_bytes, 0);
  // Bucket 20 is the worst-case decode itself; 1..16 are powers of two: the same workspace.
  EXPECT_EQ(graphs.ranks[0].step_workspace_bytes, eager.ranks[0].step_workspace_bytes);
  EXPECT_EQ(eager.ranks[0].kv_budget_bytes - graphs.ranks[0].kv_budget_bytes,
            kDecodeGraphAllowanceBytes);
  const int64_t vocab = io::ModelConfig::load(kTestData.string() + "/tiny-glm5-fp8").vocab_size;
  EXPECT_EQ(graphs.ranks[0].host_buffer_bytes,
            StepStaging::bytes_for(256, 20, 32) + 4 * 256 * 2 + 4 * 20 * vocab);
  EXPECT_EQ(graphs.to_json()["graph_buckets"].size(), decode_graph_buckets(20).size());
}

// With a memory plan on a GPU, an eager decode step runs padded to its graph bucket, so its
// kernels see a replay's row counts: 3 sequences take what 4 take, 5 what 8 take; the CPU runs
// them as they are. A meta runner of the GPU kind needs no GPU.
TEST(DecodeGraphs, EagerDecodeStepsPadToTheirBucket) {
  const ServingLimits limits{
      .max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 64, .block_size = 16};
  const PlanBudget budget{
      .device_bytes = int64_t{16} << 30, .utilization = 0.9, .kv_cache_memory_bytes = {}};
  for (const Device device : {Device::cuda(0), Device::cpu()}) {
    SCOPED_TRACE(device.str());
    ModelRunner runner({.model = kTestData.string() + "/tiny-glm5-fp8",
                        .device = device,
                        .meta = true,
                        .enforce_eager = true});
    apply_plan(runner, plan_memory(runner, limits, budget, ProfileMode::kMeta));
    const auto high_water = [&](const ForwardBatch& b) {
      runner.reset_peaks();
      const SampledRows got =
          runner.forward_sample(b, std::vector<ops::RowSampling>(b.seqs.size()));
      EXPECT_EQ(got.ids.size(), b.seqs.size());
      return runner.allocator(0).stats().step_high_water;
    };
    const bool pads = !device.is_cpu();
    EXPECT_EQ(high_water(decodes(3)) == high_water(decodes(4)), pads);
    EXPECT_EQ(high_water(decodes(5)) == high_water(decodes(8)), pads);
    EXPECT_NE(high_water(decodes(1)), high_water(decodes(2)));
  }
}

// Greedy decode through replayed graphs equals eager decode bitwise (logits and ids), on every
// block-FP8 fixture (the models whose decode never waits on the host), at batch sizes that are
// buckets and ones padded up to a bucket.
// About 20 s on an H200.
TEST(DecodeGraphs, GpuReplayEqualsEagerBitwise) {
#ifdef MLASERVE_CUDA_RUNTIME
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
#else
  GTEST_SKIP() << "no CUDA device here";
#endif
  std::vector<std::string> models;
  for (const char* f : {"tiny-dsv3-fp8", "tiny-dsv32-fp8", "tiny-glm5-fp8"})
    models.push_back(kTestData.string() + "/" + f);
  const ServingLimits limits{
      .max_num_batched_tokens = 512, .max_num_seqs = 16, .max_model_len = 256, .block_size = 16};
  for (const std::string& model : models) {
    SCOPED_TRACE(model);
    std::unique_ptr<ModelRunner> runners[2];
    for (const bool eager : {false, true}) {
      runners[eager] = std::make_unique<ModelRunner>(
          RunnerOptions{.model = model, .device = Device::cuda(0), .enforce_eager = eager});
      const io::ModelConfig& c = runners[eager]->config();
      const PlanBudget budget{
          .device_bytes = int64_t{16} << 30,
          .kv_cache_memory_bytes = 16 * limits.max_model_len *
                                   KvCache::bytes_per_token(c, activation_dtype(Device::cuda(0)))};
      apply_plan(*runners[eager], plan_memory(*runners[eager], limits, budget, ProfileMode::kReal));
    }
    ModelRunner &graphs = *runners[0], &eager = *runners[1];
    ASSERT_EQ(graphs.captured_buckets(), decode_graph_buckets(16));
    ASSERT_TRUE(eager.captured_buckets().empty());
    const int64_t vocab = graphs.config().vocab_size;
    for (const int64_t n : {1, 3, 8, 13, 16}) {
      SCOPED_TRACE(n);
      // n prompts of different lengths, each in blocks of its own.
      ForwardBatch prefill;
      const int64_t per_seq = limits.max_model_len / limits.block_size;
      for (int64_t s = 0; s < n; ++s) {
        const int64_t len = 5 + 3 * s;
        std::vector<int32_t> table(static_cast<size_t>(per_seq));
        for (int64_t b = 0; b < per_seq; ++b) table[b] = static_cast<int32_t>(s * per_seq + b);
        prefill.seqs.push_back({.num_new = len, .block_table = table, .prompt_len = len});
        for (int64_t i = 0; i < len; ++i)
          prefill.token_ids.push_back(static_cast<int32_t>((s * 131 + i * 17) % vocab));
      }
      const std::vector<ops::RowSampling> greedy(static_cast<size_t>(n));
      SampledRows next = graphs.forward_sample(prefill, greedy);
      ASSERT_EQ(eager.forward_sample(prefill, greedy).ids, next.ids);
      ForwardBatch step = prefill;
      for (int k = 0; k < 4; ++k) {
        SCOPED_TRACE(k);
        for (int64_t s = 0; s < n; ++s) {
          step.seqs[s].num_cached += step.seqs[s].num_new;
          step.seqs[s].num_new = 1;
        }
        step.token_ids = next.ids;
        const int64_t replays = graphs.graph_replays();
        const Tensor a = graphs.forward(step);
        const Tensor b = eager.forward(step);
        EXPECT_EQ(graphs.graph_replays(), replays + 1);
        ASSERT_EQ(a.shape(), b.shape());
        EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
        next = graphs.forward_sample(step, greedy);
        const SampledRows want = eager.forward_sample(step, greedy);
        EXPECT_EQ(graphs.graph_replays(), replays + 2);
        EXPECT_EQ(next.ids, want.ids);
        EXPECT_EQ(std::memcmp(next.logprobs.data(), want.logprobs.data(), 4 * n), 0);
      }
    }
  }
}

}  // namespace
}  // namespace mls
