// An analytic lower bound on one forward step's time on one GPU rank: the bytes the step must
// move through HBM and the FLOPs it must execute, from the model config and the batch shape
// alone. `mlaserve bench` divides it by the measured time to say how close a phase comes to
// the hardware.
//
// What is counted, per rank:
// - Weights, in the checkpoint's stored dtype: block-FP8 projections at 1 byte per value plus
//   one f32 scale per block, everything else bf16 (e_score_correction_bias f32). Replicated
//   tensors (fused q_a/kv_a/indexer projections, norms, router) count in full on every rank,
//   sharded ones (q_b, kv_b, o_proj, MLPs, experts, lm_head) by 1/tp. Every non-expert weight is
//   read once per step; the embedding only for the step's rows (at most one row per token);
//   lm_head only when the step produces logits. Routed experts: the expected number of distinct
//   experts that N tokens choose per MoE layer, E·(1 − (1 − k/E)^N) (uniform routing).
// - KV cache (bf16, replicated on every rank): reads of the context latent (kv_lora + rope
//   values per token and layer; on DSA layers at most index_topk keys per new token), the
//   indexer keys (index_head_dim values) on layers that own an indexer, and writes of the new
//   tokens' entries.
// - Activations are ignored: at these widths they are small next to weights and KV, and a
//   fused implementation keeps much of them on chip.
// - FLOPs: 2 × active parameters × rows for every GEMM (kv_b_proj as the absorbed W_UK / W_UV
//   products, the replicated fused projection on the token shard under sequence parallelism,
//   lm_head on logit rows only); absorbed MLA attention 2·heads·keys·((kv_lora + rope) + kv_lora)
//   per new token with keys = its causal context, or min(context, index_topk) on DSA layers;
//   the indexer's scoring 2·index_heads·index_head_dim·context per new token.
#pragma once

#include <cstdint>

#include "io/model_config.h"
#include "model/forward_batch.h"

namespace mls::cli {

// H200 SXM data-sheet figures: HBM3e bandwidth and dense (no sparsity) tensor-core peaks.
inline constexpr double kH200BytesPerSecond = 4.8e12;
inline constexpr double kH200Bf16FlopsPerSecond = 989e12;
inline constexpr double kH200Fp8FlopsPerSecond = 1979e12;

// The peak for the dtype of the dominant GEMMs: FP8 for block-FP8 checkpoints, else bf16.
double default_peak_flops(const io::ModelConfig& c);

// Expected distinct experts that `tokens` tokens choose, each picking `top_k` of `experts`
// uniformly: E·(1 − (1 − k/E)^N).
double expected_distinct_experts(int64_t experts, int64_t top_k, int64_t tokens);

struct StepCost {
  double weight_bytes = 0;
  double kv_read_bytes = 0;
  double kv_write_bytes = 0;
  double gemm_flops = 0;
  double attention_flops = 0;
  double indexer_flops = 0;

  double bytes() const { return weight_bytes + kv_read_bytes + kv_write_bytes; }
  double flops() const { return gemm_flops + attention_flops + indexer_flops; }
  StepCost& operator+=(const StepCost& o);
};

// One rank's cost of `batch` at tensor-parallel size `tp`.
StepCost step_cost(const io::ModelConfig& c, const ForwardBatch& batch, int tp,
                   bool sequence_parallel);

struct Peaks {
  double bytes_per_s = kH200BytesPerSecond;
  double flops_per_s = kH200Bf16FlopsPerSecond;
};

// max(bytes / bandwidth, FLOPs / peak): the step cannot run faster than either.
double floor_seconds(const StepCost& cost, const Peaks& peaks);
// Whether the FLOP term is the larger one.
bool compute_bound(const StepCost& cost, const Peaks& peaks);

}  // namespace mls::cli
