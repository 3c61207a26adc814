// The roofline's bytes and FLOPs on a two-layer GLM-5-style config, against sums worked out by
// hand term by term (the comments name each tensor and its shape).
#include "cli/roofline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mls::cli {
namespace {

// H 256, vocab 1000, 4 heads (dn 32, dr 16, dv 32 → dq 48), q_lora 128, kv_lora 64; layer 0 a
// dense MLP (intermediate 512) with its own indexer (2 heads × 32, top-4), layer 1 MoE (4
// experts of 128, top-2, one shared expert) reusing layer 0's selection.
io::ModelConfig small_config(bool fp8) {
  nlohmann::json j = {
      {"model_type", "glm_moe_dsa"},
      {"vocab_size", 1000},
      {"hidden_size", 256},
      {"intermediate_size", 512},
      {"moe_intermediate_size", 128},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 4},
      {"q_lora_rank", 128},
      {"kv_lora_rank", 64},
      {"qk_nope_head_dim", 32},
      {"qk_rope_head_dim", 16},
      {"v_head_dim", 32},
      {"n_routed_experts", 4},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 2},
      {"n_group", 1},
      {"topk_group", 1},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.0},
      {"rms_norm_eps", 1e-5},
      {"max_position_embeddings", 4096},
      {"mlp_layer_types", {"dense", "sparse"}},
      {"index_n_heads", 2},
      {"index_head_dim", 32},
      {"index_topk", 4},
      {"indexer_types", {"full", "shared"}},
  };
  if (fp8) j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  return io::ModelConfig::from_json(j, "small");
}

// One sequence continuing from `cached` tokens with `fresh` new ones, logits of the last.
ForwardBatch one_sequence(int64_t cached, int64_t fresh) {
  ForwardBatch b;
  b.token_ids.assign(static_cast<size_t>(fresh), 7);
  b.seqs.push_back({.num_cached = cached, .num_new = fresh, .block_table = {0}});
  return b;
}

TEST(Roofline, ExpectedDistinctExperts) {
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 1), 2.0);  // one token: exactly its k
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 2), 3.0);  // 4 · (1 − 1/4)
  EXPECT_DOUBLE_EQ(expected_distinct_experts(4, 2, 0), 0.0);
  EXPECT_NEAR(expected_distinct_experts(256, 8, 4096), 256.0, 1e-9);
}

TEST(Roofline, DecodeStepBf16) {
  const StepCost s = step_cost(small_config(false), one_sequence(9, 1), 1, false);
  // Weights (bf16, 2 bytes per value):
  //   embedding 1 row [256], final norm [256], lm_head [1000, 256]
  const double outer = 256 * 2 + 256 * 2 + 1000 * 256 * 2;
  //   layer 0: norms 256 + 256 + kv_a_norm 64 + q_a_norm 128; kv_a [80, 256]; q_a [128, 256];
  //   q_b [192, 128]; indexer wk [32, 256], weights_proj [2, 256], k_norm weight + bias [32],
  //   wq_b [64, 128]; kv_b [256, 64]; o_proj [256, 128]; gate, up [512, 256], down [256, 512]
  const double layer0 = (704 + 80 * 256 + 128 * 256 + 192 * 128 + 32 * 256 + 2 * 256 + 2 * 32 +
                         64 * 128 + 256 * 64 + 256 * 128 + 3 * 512 * 256) *
                        2.0;
  //   layer 1: the same attention without indexer; router [4, 256] + f32 bias [4]; one token
  //   touches its 2 experts, 3 × [128, 256] each; the shared expert 3 × [128, 256]
  const double layer1 = (704 + 80 * 256 + 128 * 256 + 192 * 128 + 256 * 64 + 256 * 128 + 4 * 256 +
                         2 * 3 * 128 * 256 + 3 * 128 * 256) *
                            2.0 +
                        4 * 4;
  EXPECT_DOUBLE_EQ(s.weight_bytes, outer + layer0 + layer1);
  EXPECT_DOUBLE_EQ(s.weight_bytes, 2435984);
  // KV: context 10; both layers are DSA, so the latent [80] of at most top-4 keys is read per
  // layer; layer 0 also reads all 10 indexer keys [32]. Written: one latent per layer, one key.
  EXPECT_DOUBLE_EQ(s.kv_read_bytes, (4 * 80 + 4 * 80 + 10 * 32) * 2.0);
  EXPECT_DOUBLE_EQ(s.kv_write_bytes, (80 + 80 + 32) * 2.0);
  // GEMMs: 2 × parameters for the one token. Layer 0: fused [80 + 128 + 32 + 2, 256], q_b,
  // wq_b, kv_b, o_proj, MLP. Layer 1: fused [80 + 128, 256], q_b, kv_b, o_proj, router,
  // 2 routed experts, the shared one. Plus lm_head.
  const double gemm0 =
      2.0 * (242 * 256 + 192 * 128 + 64 * 128 + 256 * 64 + 256 * 128 + 3 * 512 * 256);
  const double gemm1 = 2.0 * (208 * 256 + 192 * 128 + 256 * 64 + 256 * 128 + 4 * 256 +
                              2 * 3 * 128 * 256 + 3 * 128 * 256);
  EXPECT_DOUBLE_EQ(s.gemm_flops, gemm0 + gemm1 + 2.0 * 1000 * 256);
  EXPECT_DOUBLE_EQ(s.gemm_flops, 2432000);
  // Attention: 4 heads × 4 selected keys × (80 + 64) × 2, per layer.
  EXPECT_DOUBLE_EQ(s.attention_flops, 2 * (2.0 * 4 * 4 * (80 + 64)));
  // Indexer (layer 0 only): 2 heads × 32 dims × 10 keys × 2.
  EXPECT_DOUBLE_EQ(s.indexer_flops, 2.0 * 2 * 32 * 10);
}

TEST(Roofline, PrefillStepBf16) {
  const StepCost s = step_cost(small_config(false), one_sequence(0, 6), 1, false);
  // Six embedding rows; 6 tokens choose 4 · (1 − (1/2)^6) = 3.9375 distinct experts.
  const double decode_weights = 2435984;
  const double expert = 3 * 128 * 256 * 2.0;
  EXPECT_DOUBLE_EQ(s.weight_bytes, decode_weights + 5 * 256 * 2 + (3.9375 - 2) * expert);
  // The whole 6-token context is read and written on both layers (top-4 × 6 tokens ≥ 6).
  EXPECT_DOUBLE_EQ(s.kv_read_bytes, (6 * 80 + 6 * 80 + 6 * 32) * 2.0);
  EXPECT_DOUBLE_EQ(s.kv_write_bytes, (6 * 80 + 6 * 80 + 6 * 32) * 2.0);
  // Layer GEMMs for 6 tokens, lm_head for the one logit row.
  EXPECT_DOUBLE_EQ(s.gemm_flops, 6 * (2432000 - 2.0 * 1000 * 256) + 2.0 * 1000 * 256);
  // Causal keys 1..6, capped at 4 on both (DSA) layers: 1 + 2 + 3 + 4 + 4 + 4 = 18.
  EXPECT_DOUBLE_EQ(s.attention_flops, 2 * (2.0 * 4 * 18 * (80 + 64)));
  // The indexer scores every causal key: 1 + ... + 6 = 21.
  EXPECT_DOUBLE_EQ(s.indexer_flops, 2.0 * 2 * 32 * 21);
}

TEST(Roofline, Fp8WeightsCountOneBytePlusBlockScales) {
  const StepCost s = step_cost(small_config(true), one_sequence(9, 1), 1, false);
  // A quantised [r, c] projection: r·c bytes + ceil(r/128)·ceil(c/128) f32 scales. Norms,
  // embedding, lm_head, router, weights_proj and k_norm stay bf16.
  auto q = [](int r, int c) { return r * c + ((r + 127) / 128) * ((c + 127) / 128) * 4.0; };
  const double outer = 256 * 2 + 256 * 2 + 1000 * 256 * 2;
  const double attn = 704 * 2 + q(80, 256) + q(128, 256) + q(192, 128) + q(256, 64) + q(256, 128);
  const double layer0 = attn + q(32, 256) + 2 * 256 * 2 + 2 * 32 * 2 + q(64, 128) + 3 * q(512, 256);
  const double layer1 = attn + 4 * 256 * 2 + 4 * 4 + 2 * 3 * q(128, 256) + 3 * q(128, 256);
  EXPECT_DOUBLE_EQ(s.weight_bytes, outer + layer0 + layer1);
  EXPECT_DOUBLE_EQ(s.weight_bytes, 1477780);
  EXPECT_DOUBLE_EQ(default_peak_flops(small_config(true)), kH200Fp8FlopsPerSecond);
  EXPECT_DOUBLE_EQ(default_peak_flops(small_config(false)), kH200Bf16FlopsPerSecond);
}

TEST(Roofline, TensorParallelShardsAndSequenceParallelFusedRows) {
  // tp 2 with sequence parallelism, 6 new tokens: 2 heads, intermediate 256, experts and the
  // shared expert 64, vocab 500 per rank; the fused projection runs on 3 of the 6 rows.
  const StepCost s = step_cost(small_config(false), one_sequence(0, 6), 2, true);
  const double gemm0 =
      2.0 * 242 * 256 * 3 + 6 * 2.0 * (96 * 128 + 64 * 128 + 128 * 64 + 256 * 64 + 3 * 256 * 256);
  const double gemm1 =
      2.0 * 208 * 256 * 3 +
      6 * 2.0 * (96 * 128 + 128 * 64 + 256 * 64 + 4 * 256 + 2 * 3 * 64 * 256 + 3 * 64 * 256);
  EXPECT_DOUBLE_EQ(s.gemm_flops, gemm0 + gemm1 + 2.0 * 500 * 256);
  EXPECT_DOUBLE_EQ(s.gemm_flops, 6071296);
  // Heads split; the indexer and the latent cache are replicated.
  EXPECT_DOUBLE_EQ(s.attention_flops, 2 * (2.0 * 2 * 18 * (80 + 64)));
  EXPECT_DOUBLE_EQ(s.indexer_flops, 2.0 * 2 * 32 * 21);
  EXPECT_DOUBLE_EQ(s.kv_read_bytes, (6 * 80 + 6 * 80 + 6 * 32) * 2.0);
}

TEST(Roofline, StepsWithoutLogitsSkipLmHead) {
  ForwardBatch b = one_sequence(0, 6);
  b.seqs[0].logits = SequenceChunk::Logits::kNone;
  const StepCost with = step_cost(small_config(false), one_sequence(0, 6), 1, false);
  const StepCost without = step_cost(small_config(false), b, 1, false);
  EXPECT_DOUBLE_EQ(with.weight_bytes - without.weight_bytes, 1000 * 256 * 2.0);
  EXPECT_DOUBLE_EQ(with.gemm_flops - without.gemm_flops, 2.0 * 1000 * 256);
}

TEST(Roofline, FloorIsTheLargerOfBytesAndFlops) {
  StepCost s;
  s.weight_bytes = 4.8e9;  // 1 ms at 4.8 TB/s
  s.gemm_flops = 989e9;    // 1 ms at 989 TFLOP/s
  s.attention_flops = 989e9;
  const Peaks h200;
  EXPECT_DOUBLE_EQ(floor_seconds(s, h200), 2e-3);
  EXPECT_TRUE(compute_bound(s, h200));
  EXPECT_DOUBLE_EQ(floor_seconds(s, {.bytes_per_s = 1.2e12, .flops_per_s = 989e12}), 4e-3);
  EXPECT_FALSE(compute_bound(s, {.bytes_per_s = 1.2e12, .flops_per_s = 989e12}));
}

}  // namespace
}  // namespace mls::cli
