#include "engine/memory_planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/logging.h"
#include "engine/decode_graphs.h"
#include "model/kv_cache.h"
#include "ops/linear.h"
#ifdef MLASERVE_CUDA_RUNTIME
#include "core/cuda_allocator.h"
#endif

namespace mls {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Allocator slack and heap fragmentation the tracked allocator cannot see: 1% of the device, at
// least 64 MiB.
int64_t safety_margin(int64_t device_bytes) {
  return std::max<int64_t>(int64_t{64} << 20, device_bytes / 100);
}

}  // namespace

ProfileMode parse_profile_mode(const std::string& s) {
  if (s == "real") return ProfileMode::kReal;
  if (s == "meta") return ProfileMode::kMeta;
  raise<InvalidArgument>("unknown --profile-mode '{}': expected real or meta", s);
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Block ids for a context of `len` tokens, cycling through the profile's `cache_blocks`.
std::vector<int32_t> cycled_table(int64_t len, int64_t block_size, int64_t cache_blocks,
                                  int32_t first) {
  std::vector<int32_t> t(ceil_div(len, block_size));
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int32_t>((first + static_cast<int64_t>(i)) % cache_blocks);
  return t;
}

// The fresh max-token step's prompt lengths: max_num_batched_tokens spread over as many
// sequences as may run, each at most max_model_len (no real step holds more of one sequence).
std::vector<int64_t> prefill_lengths(const ServingLimits& l) {
  const int64_t seqs = std::min(l.max_num_seqs, l.max_num_batched_tokens);
  const int64_t tokens = std::min(l.max_num_batched_tokens, seqs * l.max_model_len);
  std::vector<int64_t> n(static_cast<size_t>(seqs));
  for (int64_t s = 0; s < seqs; ++s) n[s] = tokens / seqs + (s < tokens % seqs ? 1 : 0);
  return n;
}

}  // namespace

ForwardBatch verify_step(const ServingLimits& l, int64_t cache_blocks) {
  const int64_t q = std::min(1 + l.num_speculative_tokens, l.max_num_batched_tokens);
  const int64_t seqs = std::max<int64_t>(1, std::min(l.max_num_seqs, l.max_num_batched_tokens / q));
  const int64_t cached = std::max<int64_t>(0, l.max_model_len - q);
  ForwardBatch b;
  b.token_ids.assign(static_cast<size_t>(seqs * q), 0);
  for (int64_t s = 0; s < seqs; ++s)
    b.seqs.push_back({.num_cached = cached,
                      .num_new = q,
                      .block_table = cycled_table(cached + q, l.block_size, cache_blocks, 0),
                      .prompt_len = 1,
                      .logits = SequenceChunk::Logits::kAll});
  return b;
}

int64_t prefill_blocks(const ServingLimits& l) {
  int64_t blocks = 0;
  for (const int64_t n : prefill_lengths(l)) blocks += ceil_div(n, l.block_size);
  return blocks;
}

std::vector<ProfileStep> worst_case_steps(const ServingLimits& l, int64_t cache_blocks) {
  const int64_t tokens = l.max_num_batched_tokens, mml = l.max_model_len, bs = l.block_size;
  const int64_t seqs = std::min(l.max_num_seqs, tokens);
  std::vector<ProfileStep> steps;
  ForwardBatch prefill;
  int32_t next = 0;
  for (const int64_t n : prefill_lengths(l)) {
    prefill.token_ids.resize(prefill.token_ids.size() + static_cast<size_t>(n), 0);
    prefill.seqs.push_back(
        {.num_new = n, .block_table = cycled_table(n, bs, cache_blocks, next), .prompt_len = n});
    next += static_cast<int32_t>(ceil_div(n, bs));
  }
  steps.push_back({"prefill", std::move(prefill)});
  // A decode continues a sequence of max_model_len − 1 tokens (its last position).
  const auto decode = [&](int64_t num_cached, int64_t num_new, int64_t prompt_len) {
    return SequenceChunk{.num_cached = num_cached,
                         .num_new = num_new,
                         .block_table = cycled_table(num_cached + num_new, bs, cache_blocks, 0),
                         .prompt_len = prompt_len};
  };
  ForwardBatch decodes;
  decodes.token_ids.assign(seqs, 0);
  for (int64_t s = 0; s < seqs; ++s) decodes.seqs.push_back(decode(mml - 1, 1, 1));
  steps.push_back({"decode", std::move(decodes)});
  ForwardBatch chunk;
  const int64_t first = std::min(tokens - (seqs - 1), mml);
  chunk.token_ids.assign(first + seqs - 1, 0);
  chunk.seqs.push_back(decode(mml - first, first, mml));
  for (int64_t s = 1; s < seqs; ++s) chunk.seqs.push_back(decode(mml - 1, 1, 1));
  steps.push_back({"long chunk", std::move(chunk)});
  return steps;
}

std::vector<ProfileStep> profile_steps(const ServingLimits& l, int64_t cache_blocks,
                                       const std::vector<int64_t>& decode_sizes) {
  std::vector<ProfileStep> steps = worst_case_steps(l, cache_blocks);
  for (int64_t n = 1; n < l.max_num_batched_tokens; n *= 2) {
    ServingLimits fewer = l;
    fewer.max_num_batched_tokens = n;
    steps.push_back({"prefill sweep", std::move(worst_case_steps(fewer, cache_blocks)[0].batch)});
  }
  for (int64_t n = 1; n < std::min(l.max_num_seqs, l.max_num_batched_tokens); n *= 2) {
    ServingLimits fewer = l;
    fewer.max_num_seqs = n;
    steps.push_back({"decode sweep", std::move(worst_case_steps(fewer, cache_blocks)[1].batch)});
  }
  const int64_t decodes = std::min(l.max_num_seqs, l.max_num_batched_tokens);
  for (const int64_t n : decode_sizes) {
    if (n >= decodes || (n & (n - 1)) == 0) continue;  // profiled above
    ServingLimits fewer = l;
    fewer.max_num_seqs = n;
    steps.push_back({"graph bucket", std::move(worst_case_steps(fewer, cache_blocks)[1].batch)});
  }
  return steps;
}

MemoryPlan plan_memory(ModelRunner& runner, const ServingLimits& requested,
                       const PlanBudget& budget, ProfileMode mode) {
  const io::ModelConfig& c = runner.config();
  const ServingLimits limits = resolve_serving_limits(requested, c);
  if (budget.utilization <= 0 || budget.utilization > 1)
    raise<InvalidArgument>("--gpu-memory-utilization must be in (0, 1], got {}",
                           budget.utilization);
  const bool speculative = limits.num_speculative_tokens > 0;
  if (speculative && runner.num_mtp_layers() == 0)
    raise<InvalidArgument>(
        "speculative decoding ({} tokens) needs the runner loaded with the checkpoint's MTP layers",
        limits.num_speculative_tokens);
  MemoryPlan plan;
  plan.limits = limits;
  if (runner.decode_graphs()) plan.graph_buckets = decode_graph_buckets(limits.max_num_seqs);

  // The profile: every worst-case step through the serving path, over a cache just big enough
  // for the fresh step (longer contexts cycle through its blocks).
  const int tp = runner.tp_size();
  const bool meta = mode == ProfileMode::kMeta;
  const bool traced_runner = runner.allocator(0).meta();  // a runner built with meta weights
  if (traced_runner && !meta) raise<InvalidArgument>("a meta runner can only profile in meta mode");
  runner.set_meta(meta);
  // The profile is measured uncapped: a runner planned before (a bench's smaller batch) keeps
  // its old plan's cap until apply_plan sets the new one.
  runner.set_memory_limits(std::vector<int64_t>(tp, -1));
  // No step workspace while profiling: the arena places every step's allocations unbounded and
  // measures what the workspace must hold.
  runner.reserve_step_workspaces(std::vector<int64_t>(tp, 0));
  const int64_t cache_blocks = prefill_blocks(limits);
  runner.allocate_kv_cache(cache_blocks, limits);
  std::vector<std::vector<int64_t>> workspace(tp);
  std::vector<int64_t> comm(tp, 0), peak(tp, 0);
  const auto profile = [&](const std::function<void()>& run) {
    runner.reset_peaks();
    run();
    // The step's arena high-water mark, the communicator buffers it took and freed, and the
    // high-water mark of all it allocated over what stays allocated after it (weights, the
    // cache, the carry, the GEMM workspace, the communicators' lasting buffers).
    const std::vector<MemStats> after = runner.memory_stats();
    for (int r = 0; r < tp; ++r) {
      workspace[r].push_back(after[r].step_high_water);
      comm[r] = std::max(comm[r], after[r].pk(MemTag::kComm) - after[r].cur(MemTag::kComm));
      peak[r] = std::max(peak[r], after[r].peak_total - after[r].current_total);
    }
  };
  std::vector<ProfileStep> steps = profile_steps(limits, cache_blocks, plan.graph_buckets);
  // The device-sampling path: the forward, then the draw on rank 0's device, every row under an
  // uploaded mask (a structured-output step).
  const int64_t mask_words = (runner.config().vocab_size + 31) / 32;
  std::vector<uint32_t> allowed;
  const auto draw_rows = [&](const ForwardBatch& b) {
    allowed.assign(static_cast<size_t>(b.num_logit_rows() * mask_words), ~0u);
    return std::vector<ops::RowSampling>(static_cast<size_t>(b.num_logit_rows()));
  };
  const ModelRunner::MaskSource masks = [&]() -> std::span<const uint32_t> { return allowed; };
  for (const ProfileStep& step : steps) {
    const std::vector<ops::RowSampling> rows = draw_rows(step.batch);
    profile([&] { runner.forward_sample(step.batch, rows, nullptr, masks); });
  }
  if (speculative) {
    // A speculative step's target forward keeps its hidden states and reads its logits on the
    // host, or draws every verify row on the device; the MTP layer's catch-up and draft steps
    // take the same batches, both ways.
    steps.push_back({"verify", verify_step(limits, cache_blocks)});
    for (const ProfileStep& step : steps) {
      profile([&] { runner.forward_keep_hidden(step.batch); });
      const std::vector<ops::RowSampling> rows = draw_rows(step.batch);
      profile([&] { runner.forward_sample(step.batch, rows, nullptr, masks, true); });
      std::vector<int64_t> carry_rows(static_cast<size_t>(step.batch.num_tokens()));
      for (size_t t = 0; t < carry_rows.size(); ++t) carry_rows[t] = static_cast<int64_t>(t);
      profile([&] { runner.forward_mtp(step.batch, carry_rows); });
      profile([&] { runner.forward_mtp_sample(step.batch, carry_rows, rows, masks); });
    }
  }
  const std::vector<MemStats> stats = runner.memory_stats();
  const bool gpu = !runner.device().is_cpu();
  const std::vector<int64_t> untracked = runner.untracked_device_bytes();
  runner.release_kv_cache();
  runner.set_meta(traced_runner);

  plan.safety_margin_bytes = safety_margin(budget.device_bytes);
  plan.num_blocks = INT64_MAX;
  for (int r = 0; r < tp; ++r) {
    RankPlan rp;
    rp.weights_bytes = stats[r].cur(MemTag::kWeights);
    rp.prefill_workspace_bytes = workspace[r][0];
    rp.decode_workspace_bytes = workspace[r][1];
    rp.long_chunk_workspace_bytes = workspace[r][2];
    rp.step_workspace_bytes = *std::max_element(workspace[r].begin(), workspace[r].end());
    rp.step_comm_bytes = comm[r];
    rp.step_peak_bytes = peak[r];
    rp.gemm_workspace_bytes = ops::linear_workspace_bytes(runner.device());
    rp.untracked_bytes = gpu && traced_runner ? kCudaContextAllowanceBytes : untracked[r];
    rp.graph_bytes = plan.graph_buckets.empty() ? 0 : kDecodeGraphAllowanceBytes;
    rp.host_buffer_bytes =
        ModelRunner::host_buffer_bytes(limits, c.vocab_size, r == 0, runner.num_mtp_layers() > 0);
    rp.kv_bytes_per_token =
        KvCache::bytes_per_token(c, activation_dtype(runner.device()), runner.num_mtp_layers() > 0);
    rp.mtp_carry_bytes =
        ModelRunner::mtp_carry_bytes(limits, c, runner.device(), runner.num_mtp_layers() > 0);
    rp.kv_budget_bytes =
        budget.kv_cache_memory_bytes
            ? *budget.kv_cache_memory_bytes
            : static_cast<int64_t>(static_cast<double>(budget.device_bytes) * budget.utilization) -
                  rp.weights_bytes - rp.step_workspace_bytes - rp.step_comm_bytes -
                  rp.gemm_workspace_bytes - rp.untracked_bytes - rp.graph_bytes -
                  rp.mtp_carry_bytes - plan.safety_margin_bytes;
    rp.num_blocks =
        std::max<int64_t>(0, rp.kv_budget_bytes / (rp.kv_bytes_per_token * limits.block_size));
    plan.num_blocks = std::min(plan.num_blocks, rp.num_blocks);
    plan.ranks.push_back(rp);
  }
  plan.kv_tokens = plan.num_blocks * limits.block_size;

  // The one max_model_len rule.
  if (plan.kv_tokens < plan.limits.max_model_len) {
    const RankPlan& r0 = plan.ranks[0];
    const std::string budget_line = fmt::format(
        "(Per rank: budget {:.2f} GiB = {:.0f}% of {:.2f} GiB − weights {:.2f} GiB − step "
        "workspace {:.2f} GiB − step collectives {:.2f} GiB − GEMM workspace {:.2f} GiB − "
        "untracked {:.2f} GiB − CUDA graphs {:.2f} GiB − margin {:.2f} GiB.)",
        r0.kv_budget_bytes / kGiB, budget.utilization * 100, budget.device_bytes / kGiB,
        r0.weights_bytes / kGiB, r0.step_workspace_bytes / kGiB, r0.step_comm_bytes / kGiB,
        r0.gemm_workspace_bytes / kGiB, r0.untracked_bytes / kGiB, r0.graph_bytes / kGiB,
        plan.safety_margin_bytes / kGiB);
    if (requested.max_model_len > 0 || plan.kv_tokens == 0)
      raise<InvalidArgument>(
          "the KV cache holds {} tokens ({} blocks of {}), fewer than one max_model_len request "
          "of {} tokens; the largest max_model_len that fits is {}. {} Raise "
          "--gpu-memory-utilization or the device memory, add tensor-parallel ranks, or lower "
          "--max-model-len / --max-num-batched-tokens.",
          plan.kv_tokens, plan.num_blocks, limits.block_size, plan.limits.max_model_len,
          plan.kv_tokens, budget_line);
    MLS_LOG_WARN(
        "max_model_len capped from the model's {} to {} tokens, what the KV cache holds {}; set "
        "--max-model-len to choose",
        plan.limits.max_model_len, plan.kv_tokens, budget_line);
    plan.limits.max_model_len = plan.kv_tokens;
    plan.max_model_len_capped = true;
  }
  plan.max_concurrency =
      static_cast<double>(plan.kv_tokens) / static_cast<double>(plan.limits.max_model_len);
  return plan;
}

void apply_plan(ModelRunner& runner, const MemoryPlan& plan) {
  runner.allocate_kv_cache(plan.num_blocks, plan.limits);
  runner.set_planned_limits(plan.limits);
  std::vector<int64_t> workspaces;
  for (const RankPlan& p : plan.ranks) workspaces.push_back(p.step_workspace_bytes);
  runner.reserve_step_workspaces(workspaces);
  const std::vector<MemStats> stats = runner.memory_stats();
  std::vector<int64_t> limits;
  for (int r = 0; r < runner.tp_size(); ++r) {
    const RankPlan& p = plan.ranks[r];
    // A real GPU rank holds the GEMM workspace since start-up (a meta one never): counted once.
    // A step's arena allocations stay within its workspace; its collectives take the rest.
    limits.push_back(stats[r].current_total - stats[r].cur(MemTag::kWorkspace) +
                     p.gemm_workspace_bytes + p.step_workspace_bytes + p.step_comm_bytes);
  }
  runner.set_memory_limits(limits);
  runner.capture_decode_graphs(plan.graph_buckets);
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json rs = nlohmann::json::array();
  for (const RankPlan& r : ranks)
    rs.push_back({{"weights_bytes", r.weights_bytes},
                  {"prefill_workspace_bytes", r.prefill_workspace_bytes},
                  {"decode_workspace_bytes", r.decode_workspace_bytes},
                  {"long_chunk_workspace_bytes", r.long_chunk_workspace_bytes},
                  {"step_workspace_bytes", r.step_workspace_bytes},
                  {"step_comm_bytes", r.step_comm_bytes},
                  {"step_peak_bytes", r.step_peak_bytes},
                  {"gemm_workspace_bytes", r.gemm_workspace_bytes},
                  {"untracked_bytes", r.untracked_bytes},
                  {"graph_bytes", r.graph_bytes},
                  {"host_buffer_bytes", r.host_buffer_bytes},
                  {"kv_bytes_per_token", r.kv_bytes_per_token},
                  {"mtp_carry_bytes", r.mtp_carry_bytes},
                  {"kv_budget_bytes", r.kv_budget_bytes},
                  {"num_blocks", r.num_blocks}});
  return {{"num_blocks", num_blocks},
          {"kv_tokens", kv_tokens},
          {"max_concurrency", max_concurrency},
          {"block_size", limits.block_size},
          {"max_model_len", limits.max_model_len},
          {"max_model_len_capped", max_model_len_capped},
          {"max_num_batched_tokens", limits.max_num_batched_tokens},
          {"max_num_seqs", limits.max_num_seqs},
          {"num_speculative_tokens", limits.num_speculative_tokens},
          {"safety_margin_bytes", safety_margin_bytes},
          {"graph_buckets", graph_buckets},
          {"ranks", rs}};
}

std::string MemoryPlan::report() const {
  std::string out = fmt::format("limits: {}\n", limits.str());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankPlan& p = ranks[r];
    out += fmt::format(
        "rank {}: weights {:.3f} GiB, step workspace {:.3f} GiB ({} bytes; prefill {:.3f}, "
        "decode {:.3f}, long chunk {:.3f}), step collectives {:.3f} GiB, GEMM workspace {:.3f} "
        "GiB, untracked {:.3f} GiB, CUDA graphs {:.3f} GiB, KV {} bytes/token (MLA latent "
        "replicated on every rank); host buffers {:.1f} MiB\n",
        r, p.weights_bytes / kGiB, p.step_workspace_bytes / kGiB, p.step_workspace_bytes,
        p.prefill_workspace_bytes / kGiB, p.decode_workspace_bytes / kGiB,
        p.long_chunk_workspace_bytes / kGiB, p.step_comm_bytes / kGiB,
        p.gemm_workspace_bytes / kGiB, p.untracked_bytes / kGiB, p.graph_bytes / kGiB,
        p.kv_bytes_per_token, static_cast<double>(p.host_buffer_bytes) / (1 << 20));
  }
  const RankPlan& r0 = ranks[0];
  out += fmt::format("Available KV cache memory: {:.2f} GiB\n", r0.kv_budget_bytes / kGiB);
  out += fmt::format("KV cache size: {} tokens ({} blocks of {})\n", kv_tokens, num_blocks,
                     limits.block_size);
  out += fmt::format("Maximum concurrency for {} tokens per request: {:.2f}x\n",
                     limits.max_model_len, max_concurrency);
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
