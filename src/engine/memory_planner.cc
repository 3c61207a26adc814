#include "engine/memory_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/memory_footprint.h"
#include "ops/linear.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Allocator slack and heap fragmentation the ledgers cannot see: 1% of the device, at least
// 64 MiB.
int64_t safety_margin(int64_t device_bytes) {
  return std::max<int64_t>(int64_t{64} << 20, device_bytes / 100);
}

}  // namespace

ProfileMode parse_profile_mode(const std::string& s) {
  if (s == "real") return ProfileMode::kReal;
  if (s == "meta") return ProfileMode::kMeta;
  raise<InvalidArgument>("unknown --profile-mode '{}': expected real or meta", s);
}

ForwardBatch profiling_batch(int64_t tokens, int64_t seqs, int64_t block_size) {
  ForwardBatch b;
  b.token_ids.assign(tokens, 0);
  int32_t next_block = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = tokens / seqs + (s < tokens % seqs ? 1 : 0);
    SequenceChunk sc{.num_new = n, .block_table = {}, .prompt_len = n};
    for (int64_t i = 0; i < (n + block_size - 1) / block_size; ++i)
      sc.block_table.push_back(next_block++);
    b.seqs.push_back(std::move(sc));
  }
  return b;
}

MemoryPlan plan_memory(ModelRunner& runner, const PlanLimits& limits, const PlanBudget& budget,
                       ProfileMode mode) {
  const io::ModelConfig& c = runner.config();
  if (limits.max_num_batched_tokens < 1 || limits.max_num_seqs < 1 || limits.block_size < 1)
    raise<InvalidArgument>("max_num_batched_tokens, max_num_seqs and block_size must be >= 1");
  if (budget.utilization <= 0 || budget.utilization > 1)
    raise<InvalidArgument>("--gpu-memory-utilization must be in (0, 1], got {}",
                           budget.utilization);
  MemoryPlan plan;
  plan.block_size = limits.block_size;
  plan.max_model_len = limits.max_model_len > 0 ? limits.max_model_len : c.max_position_embeddings;
  plan.profile_tokens = limits.max_num_batched_tokens;
  plan.profile_seqs = std::min(limits.max_num_seqs, limits.max_num_batched_tokens);
  const ForwardBatch batch =
      profiling_batch(plan.profile_tokens, plan.profile_seqs, limits.block_size);
  const int64_t profile_blocks = static_cast<int64_t>(batch.seqs.back().block_table.back()) + 1;

  // The profiling forward: the same path as serving, with a cache just big enough for it.
  const int tp = runner.tp_size();
  const bool meta = mode == ProfileMode::kMeta;
  const bool traced_runner = runner.allocator(0).meta();  // a runner built with meta weights
  if (traced_runner && !meta) raise<InvalidArgument>("a meta runner can only profile in meta mode");
  runner.set_meta(meta);
  runner.allocate_kv_cache(profile_blocks, limits.block_size);
  runner.reset_peaks();
  runner.forward(batch);
  const std::vector<MemStats> stats = runner.memory_stats();
  const std::vector<int64_t> untracked = runner.untracked_device_bytes();
  runner.release_kv_cache();
  runner.set_meta(traced_runner);

  plan.safety_margin_bytes = safety_margin(budget.device_bytes);
  plan.num_blocks = INT64_MAX;
  for (int r = 0; r < tp; ++r) {
    const ParallelContext pc{tp, r, nullptr, runner.sequence_parallel()};
    const ForwardFootprint fp = predict_forward_footprint(c, pc, batch, runner.device());
    RankPlan rp;
    rp.weights_bytes = stats[r].cur(MemTag::kWeights);
    rp.predicted_weights_bytes = predict_weight_bytes(c, pc, runner.device());
    rp.profiled_activation_bytes = stats[r].pk(MemTag::kActivation);
    rp.predicted_activation_bytes = fp.activation_peak;
    rp.workspace_bytes =
        std::max(stats[r].pk(MemTag::kComm), fp.comm_peak) +
        std::max(stats[r].pk(MemTag::kWorkspace), ops::linear_workspace_bytes(runner.device())) +
        untracked[r] +
        predict_context_bytes(c, pc, limits.max_num_batched_tokens, limits.max_num_seqs,
                              plan.max_model_len, limits.block_size, runner.device());
    rp.kv_bytes_per_token = KvCache::bytes_per_token(c, activation_dtype(runner.device()));
    rp.kv_budget_bytes =
        budget.kv_cache_memory_bytes
            ? *budget.kv_cache_memory_bytes
            : static_cast<int64_t>(static_cast<double>(budget.device_bytes) * budget.utilization) -
                  std::max(rp.weights_bytes, rp.predicted_weights_bytes) -
                  rp.profiled_activation_bytes - rp.workspace_bytes - plan.safety_margin_bytes;
    rp.num_blocks =
        std::max<int64_t>(0, rp.kv_budget_bytes / (rp.kv_bytes_per_token * limits.block_size));
    plan.num_blocks = std::min(plan.num_blocks, rp.num_blocks);
    plan.ranks.push_back(rp);
  }
  plan.kv_tokens = plan.num_blocks * limits.block_size;
  plan.max_concurrency =
      static_cast<double>(plan.kv_tokens) / static_cast<double>(plan.max_model_len);
  if (plan.kv_tokens < plan.max_model_len) {
    const RankPlan& r0 = plan.ranks[0];
    raise<InvalidArgument>(
        "the KV cache holds {} tokens ({} blocks of {}), fewer than one max_model_len request of "
        "{} tokens; the largest max_model_len that fits is {}. (Per rank: budget {:.2f} GiB = "
        "{:.0f}% of {:.2f} GiB − weights {:.2f} GiB − peak activation {:.2f} GiB − workspace "
        "{:.2f} GiB − margin {:.2f} GiB.) Raise --gpu-memory-utilization or the device memory, "
        "add tensor-parallel ranks, or lower --max-model-len / --max-num-batched-tokens.",
        plan.kv_tokens, plan.num_blocks, limits.block_size, plan.max_model_len, plan.kv_tokens,
        r0.kv_budget_bytes / kGiB, budget.utilization * 100, budget.device_bytes / kGiB,
        r0.weights_bytes / kGiB, r0.profiled_activation_bytes / kGiB, r0.workspace_bytes / kGiB,
        plan.safety_margin_bytes / kGiB);
  }
  return plan;
}

void apply_plan(ModelRunner& runner, const MemoryPlan& plan) {
  runner.allocate_kv_cache(plan.num_blocks, plan.block_size);
  const std::vector<MemStats> stats = runner.memory_stats();
  std::vector<int64_t> limits;
  for (int r = 0; r < runner.tp_size(); ++r) {
    const RankPlan& p = plan.ranks[r];
    limits.push_back(stats[r].current_total + p.profiled_activation_bytes + p.workspace_bytes);
  }
  runner.set_memory_limits(limits);
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json rs = nlohmann::json::array();
  for (const RankPlan& r : ranks)
    rs.push_back({{"weights_bytes", r.weights_bytes},
                  {"predicted_weights_bytes", r.predicted_weights_bytes},
                  {"profiled_activation_bytes", r.profiled_activation_bytes},
                  {"predicted_activation_bytes", r.predicted_activation_bytes},
                  {"workspace_bytes", r.workspace_bytes},
                  {"kv_bytes_per_token", r.kv_bytes_per_token},
                  {"kv_budget_bytes", r.kv_budget_bytes},
                  {"num_blocks", r.num_blocks}});
  return {{"num_blocks", num_blocks},
          {"kv_tokens", kv_tokens},
          {"max_concurrency", max_concurrency},
          {"block_size", block_size},
          {"max_model_len", max_model_len},
          {"safety_margin_bytes", safety_margin_bytes},
          {"profile_tokens", profile_tokens},
          {"profile_seqs", profile_seqs},
          {"ranks", rs}};
}

std::string MemoryPlan::report() const {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankPlan& p = ranks[r];
    out += fmt::format(
        "rank {}: weights {:.3f} GiB, peak activation {:.3f} GiB profiled / {:.3f} GiB "
        "predicted, workspace {:.3f} GiB, KV {} bytes/token (MLA latent replicated on every "
        "rank)\n",
        r, p.weights_bytes / kGiB, p.profiled_activation_bytes / kGiB,
        p.predicted_activation_bytes / kGiB, p.workspace_bytes / kGiB, p.kv_bytes_per_token);
  }
  const RankPlan& r0 = ranks[0];
  out += fmt::format("Available KV cache memory: {:.2f} GiB\n", r0.kv_budget_bytes / kGiB);
  out += fmt::format("KV cache size: {} tokens ({} blocks of {})\n", kv_tokens, num_blocks,
                     block_size);
  out += fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x\n", max_model_len,
                     max_concurrency);
  return out;
}

int64_t device_memory_bytes(Device device) {
  if (device.is_cpu()) return available_host_memory();
#ifdef MLASERVE_CUDA_RUNTIME
  int64_t free_b = 0, total_b = 0;
  cuda_memory_info(device.index, &free_b, &total_b);
  return total_b;
#else
  raise<Unsupported>("{}: this build has no CUDA runtime", device.str());
#endif
}

int64_t available_host_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  raise<IoError>("cannot read MemAvailable from /proc/meminfo; pass --device-memory-bytes");
}

}  // namespace mls
