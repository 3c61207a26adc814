// Start-up memory planning (DESIGN.md "The problem it is built around", docs/memory-planning.md).
// The prediction is the forward itself: the worst-case steps run through the serving code path
// (same padding, token layouts, ops and op scratch) in meta mode — every allocation counted, no
// kernel run, no device needed — or for real; both give the same bytes by construction. The KV
// cache gets what remains of the budget.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/serving_limits.h"

namespace mls {

struct PlanBudget {
  int64_t device_bytes = 0;                      // per rank; on the CPU --device-memory-bytes
  double utilization = 0.9;                      // --gpu-memory-utilization
  std::optional<int64_t> kv_cache_memory_bytes;  // overrides the computed KV budget
};

// real: the forward computes (the default on GPUs); meta: the same path with every kernel
// skipped and no memory behind allocations — exact sizes in milliseconds, for any device kind.
enum class ProfileMode { kReal, kMeta };
ProfileMode parse_profile_mode(const std::string& s);

// Device memory no tracked allocator sees on a GPU planned without one (CUDA context, cuBLASLt
// and NCCL handles): stated, since it cannot be measured there. A real profile measures it.
inline constexpr int64_t kCudaContextAllowanceBytes = int64_t{1} << 30;

struct RankPlan {
  int64_t weights_bytes = 0;  // tag weights
  // The step-arena high-water mark of each worst-case step: the bytes its activations and op
  // scratch need in the step workspace (core/step_arena.h).
  int64_t prefill_workspace_bytes = 0;
  int64_t decode_workspace_bytes = 0;
  int64_t long_chunk_workspace_bytes = 0;
  // The step workspace: the largest high-water mark over every profiled step (the worst-case
  // steps and the sweep of smaller ones, profile_steps): the one region, reserved once by
  // apply_plan, that every serving step's activations and op scratch live in.
  int64_t step_workspace_bytes = 0;
  // Communicator buffers a step takes and frees again (outside the workspace), the largest.
  int64_t step_comm_bytes = 0;
  // The largest high-water mark of all a step allocates over what the rank holds between steps
  // (<= step_workspace_bytes + step_comm_bytes).
  int64_t step_peak_bytes = 0;
  int64_t gemm_workspace_bytes = 0;  // the GEMM library's per-rank workspace
  // Device memory outside the tracked allocator: measured after a real GPU profile, the stated
  // kCudaContextAllowanceBytes for a GPU planned in meta mode, 0 on the CPU.
  int64_t untracked_bytes = 0;
  // CUDA graphs for decode (engine/decode_graphs.h): the stated bound of their device memory
  // when the runner captures them (kDecodeGraphAllowanceBytes; capture measures and stays
  // within it), else 0.
  int64_t graph_bytes = 0;
  int64_t kv_bytes_per_token = 0;  // the MTP layers' included when the runner loaded them
  // Speculative decoding: the step's final hidden states kept for the MTP layer
  // (ModelRunner::mtp_carry_bytes), else 0.
  int64_t mtp_carry_bytes = 0;
  int64_t kv_budget_bytes = 0;
  int64_t num_blocks = 0;
  // Host memory, not the device's: the rank's reused step inputs and outputs
  // (ModelRunner::host_buffer_bytes), page-locked on a GPU.
  int64_t host_buffer_bytes = 0;
};

struct MemoryPlan {
  // The limits this plan was made for (max_model_len resolved); the engine takes these.
  ServingLimits limits;
  bool max_model_len_capped = false;  // unset max_model_len lowered to what the pool holds
  std::vector<RankPlan> ranks;
  int64_t num_blocks = 0;  // minimum over ranks
  int64_t kv_tokens = 0;
  double max_concurrency = 0;  // kv_tokens / max_model_len
  int64_t safety_margin_bytes = 0;
  // The decode batch sizes apply_plan captures CUDA graphs for (decode_graph_buckets of
  // max_num_seqs; empty when the runner runs eagerly), each profiled as a decode step.
  std::vector<int64_t> graph_buckets;

  nlohmann::json to_json() const;
  // vLLM-style lines: available KV memory, KV cache size in tokens, maximum concurrency.
  std::string report() const;
};

// The worst-case steps of `limits` (max_model_len resolved), with block tables over a cache of
// at most `cache_blocks` blocks (long contexts cycle through them: sizes, not values, matter):
//   prefill     max_num_batched_tokens spread over min(max_num_seqs, tokens) fresh sequences;
//   decode      min(max_num_seqs, tokens) decodes at max_model_len − 1 context;
//   long chunk  the same sequences, the first one prefilling the rest of the token budget at
//               the end of a max_model_len context: every context-sized buffer at its largest.
// Every sequence asks for its last token's logits.
struct ProfileStep {
  const char* name;
  ForwardBatch batch;
};
std::vector<ProfileStep> worst_case_steps(const ServingLimits& limits, int64_t cache_blocks);
// What the planner profiles: the worst-case steps, then, for every power of two n below the
// limits, a fresh prefill of n tokens (spread as the worst one) and n decodes at max_model_len − 1
// context, and as many decodes for every other size in `decode_sizes` (the CUDA graph buckets).
// The step workspace is the largest high-water mark over all of them (docs/memory-planning.md
// "The step workspace" says why smaller steps are profiled too).
std::vector<ProfileStep> profile_steps(const ServingLimits& limits, int64_t cache_blocks,
                                       const std::vector<int64_t>& decode_sizes = {});
// Speculative decoding (limits.num_speculative_tokens = k > 0): the verify step, min(max_num_seqs,
// max_num_batched_tokens / (k + 1)) sequences (at least one) of k + 1 query tokens each at the end
// of a max_model_len context, every token a logits row. plan_memory profiles it through the
// target, and it and every step of profile_steps through the path a speculative step takes (the
// forward keeping its hidden states) and through the MTP layer (catch-up and draft steps are no
// larger than these).
ForwardBatch verify_step(const ServingLimits& limits, int64_t cache_blocks);
// Blocks the prefill step needs (the profile's cache size).
int64_t prefill_blocks(const ServingLimits& limits);

// Profiles the worst-case steps on every rank of `runner` and sizes the KV cache, applying the
// max_model_len rule (docs/memory-planning.md): an unset max_model_len is capped, with a
// warning, to what the pool holds; a set one that does not fit throws InvalidArgument naming
// the largest that would. Leaves the runner without a KV cache; apply_plan allocates it.
MemoryPlan plan_memory(ModelRunner& runner, const ServingLimits& limits, const PlanBudget& budget,
                       ProfileMode mode);

// Allocates plan.num_blocks KV blocks and reserves the step workspace on every rank, records
// the plan's limits on the runner (an engine with other limits is refused), captures the decode
// graphs of plan.graph_buckets and caps each rank's
// allocator at what the plan accounted for: a serving step that would allocate past the plan
// (or past its step workspace) fails with OutOfMemory naming the tag — a planner bug caught at
// the allocation, failing that step only.
void apply_plan(ModelRunner& runner, const MemoryPlan& plan);

// Available host memory (MemAvailable), the CPU device's default budget.
int64_t available_host_memory();
// What --gpu-memory-utilization applies to: a GPU's total memory (as vLLM), or on the CPU the
// available host memory.
int64_t device_memory_bytes(Device device);

}  // namespace mls
