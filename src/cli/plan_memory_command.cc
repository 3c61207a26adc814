#include "cli/plan_memory_command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/serve_flags.h"
#include "core/error.h"
#include "engine/memory_planner.h"

namespace mls::cli {
namespace {

struct PlanFlags {
  std::string model;
  std::string load_format = "auto";
  std::string profile_mode = "meta";
  std::string device = "cpu";
  int tp = 1;
  int ranks_per_device = 1;
  bool sequence_parallel = false;
  // As serve's: CUDA graphs and the attention cut change what a step holds.
  bool enforce_eager = RunnerOptions{}.enforce_eager;
  bool batch_invariant = RunnerOptions{}.batch_invariant;
  ServingLimits limits;
  int64_t device_memory_bytes = 0;
  double utilization = 0.9;
  int64_t kv_cache_memory_bytes = 0;
  bool json = false;
};

void run(const PlanFlags& f) {
  const ProfileMode mode = parse_profile_mode(f.profile_mode);
  ModelRunner runner({.model = f.model,
                      .load_format = parse_load_format(f.load_format),
                      .tensor_parallel_size = f.tp,
                      .sequence_parallel = f.sequence_parallel,
                      .device = parse_device(f.device),
                      .ranks_per_device = f.ranks_per_device,
                      .meta = mode == ProfileMode::kMeta,
                      .enforce_eager = f.enforce_eager,
                      .batch_invariant = batch_invariant(f.batch_invariant)});
  if (!runner.leader()) return runner.follow();
  // A GPU planned in meta mode needs no GPU here, only its size.
  if (f.device_memory_bytes == 0 && !runner.device().is_cpu() && mode == ProfileMode::kMeta)
    raise<InvalidArgument>(
        "--device {} --profile-mode meta: give --device-memory-bytes (e.g. 141GiB)", f.device);
  PlanBudget budget{
      .device_bytes = (f.device_memory_bytes > 0 ? f.device_memory_bytes
                                                 : device_memory_bytes(runner.device())) /
                      f.ranks_per_device,
      .utilization = f.utilization,
      .kv_cache_memory_bytes = {}};
  if (f.kv_cache_memory_bytes > 0) budget.kv_cache_memory_bytes = f.kv_cache_memory_bytes;
  const MemoryPlan plan = plan_memory(runner, f.limits, budget, mode);
  if (f.json)
    std::printf("%s\n", plan.to_json().dump().c_str());
  else
    std::printf("%s", plan.report().c_str());
}

}  // namespace

void add_plan_memory_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan-memory", "Profile the worst-case step and size the KV cache (per rank)");
  cmd->add_option("--model", f->model, "Model directory (config.json; weights unless dummy)")
      ->required();
  cmd->add_option("--load-format", f->load_format, "auto | dummy");
  cmd->add_option("--profile-mode", f->profile_mode,
                  "meta (trace allocations, no compute; default) | real (run the forward)");
  cmd->add_option("--device", f->device,
                  "cpu (default), cuda[:N] or auto; with --profile-mode meta a GPU is planned "
                  "without one");
  cmd->add_option("--tensor-parallel-size", f->tp, "Ranks")->check(CLI::PositiveNumber);
  cmd->add_flag("--sequence-parallel", f->sequence_parallel, "Token-shard the residual stream");
  cmd->add_option("--ranks-per-device", f->ranks_per_device,
                  "1, or --tensor-parallel-size: every rank on one GPU with its share of it")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-num-batched-tokens", f->limits.max_num_batched_tokens,
                  "Token budget of one step")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", f->limits.max_num_seqs, "Sequences per step")
      ->capture_default_str();
  cmd->add_option("--max-model-len", f->limits.max_model_len,
                  "Longest request (default: max_position_embeddings, capped to the KV pool)");
  cmd->add_option("--block-size", f->limits.block_size, "Tokens per KV block")
      ->capture_default_str();
  cmd->add_option("--device-memory-bytes", f->device_memory_bytes,
                  "Memory of one device, e.g. 141GiB (suffixes K, M, G, KiB, MiB, GiB; default: "
                  "the GPU's total, or the available host memory); a rank gets 1/ranks-per-device")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--gpu-memory-utilization", f->utilization, "Fraction of it to use (0.9)");
  cmd->add_option("--kv-cache-memory-bytes", f->kv_cache_memory_bytes,
                  "KV cache bytes per rank, overriding the computed budget (suffixes accepted)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_flag("--enforce-eager,!--no-enforce-eager", f->enforce_eager,
                "Plan no CUDA graphs for decode (as serve --enforce-eager)");
  cmd->add_flag("--batch-invariant,!--no-batch-invariant", f->batch_invariant,
                "Plan the batch-invariant attention cut (as serve --batch-invariant)");
  cmd->add_flag("--json", f->json, "One JSON object");
  cmd->callback([f] { run(*f); });
}

}  // namespace mls::cli
