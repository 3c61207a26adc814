// Start-up memory planning (DESIGN.md "Memory and KV cache"): one profiling forward at the
// worst-case step — max_num_batched_tokens spread over min(max_num_seqs, tokens) fresh
// sequences, through the same code path, padding and token layouts as serving — records each
// rank's allocator high-water mark; the analytic twin (model/memory_footprint.h) predicts the
// same figures from the config; the KV cache gets what remains of the budget.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"

namespace mls {

struct PlanLimits {
  int64_t max_num_batched_tokens = 8192;
  int64_t max_num_seqs = 256;
  int64_t max_model_len = 0;  // 0: the model's max_position_embeddings
  int64_t block_size = 64;
};

struct PlanBudget {
  int64_t device_bytes = 0;                      // per rank; on the CPU --device-memory-bytes
  double utilization = 0.9;                      // --gpu-memory-utilization
  std::optional<int64_t> kv_cache_memory_bytes;  // overrides the computed KV budget
};

// real: the forward computes (the default on GPUs); meta: the same path with every kernel
// skipped and no memory behind allocations — exact sizes in milliseconds.
enum class ProfileMode { kReal, kMeta };
ProfileMode parse_profile_mode(const std::string& s);

struct RankPlan {
  int64_t weights_bytes = 0;              // measured (allocator, tag weights)
  int64_t predicted_weights_bytes = 0;    // analytic
  int64_t profiled_activation_bytes = 0;  // high-water mark of the profiling forward
  int64_t predicted_activation_bytes = 0;
  // Collective scratch (tag comm), GEMM workspace, device memory no allocator tracks (CUDA
  // context, NCCL), and the context-dependent step buffers at their worst case.
  int64_t workspace_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int64_t kv_budget_bytes = 0;
  int64_t num_blocks = 0;
};

struct MemoryPlan {
  std::vector<RankPlan> ranks;
  int64_t block_size = 0;
  int64_t max_model_len = 0;
  int64_t num_blocks = 0;  // minimum over ranks
  int64_t kv_tokens = 0;
  double max_concurrency = 0;  // kv_tokens / max_model_len
  int64_t safety_margin_bytes = 0;
  int64_t profile_tokens = 0, profile_seqs = 0;

  nlohmann::json to_json() const;
  // vLLM-style lines: available KV memory, KV cache size in tokens, maximum concurrency.
  std::string report() const;
};

// The profiling step: `tokens` split as evenly as possible over `seqs` fresh sequences, each
// asking for its last token's logits, with block tables numbered from 0.
ForwardBatch profiling_batch(int64_t tokens, int64_t seqs, int64_t block_size);

// Runs the profiling pass on every rank of `runner` and sizes the KV cache. Throws
// InvalidArgument when one max_model_len request cannot fit, naming the largest that would.
// Leaves the runner without a KV cache; allocate plan.num_blocks afterwards.
MemoryPlan plan_memory(ModelRunner& runner, const PlanLimits& limits, const PlanBudget& budget,
                       ProfileMode mode);

// Allocates plan.num_blocks KV blocks on every rank and caps each rank's allocator at what the
// plan accounted for (weights + KV + profiled peak activation + workspace): a serving step that
// would allocate past the plan fails with OutOfMemory naming the tag — a planner bug caught at
// the allocation, not a device OOM later.
void apply_plan(ModelRunner& runner, const MemoryPlan& plan);

// Available host memory (MemAvailable), the CPU device's default budget.
int64_t available_host_memory();
// What --gpu-memory-utilization applies to: a GPU's total memory (as vLLM), or on the CPU the
// available host memory.
int64_t device_memory_bytes(Device device);

}  // namespace mls
