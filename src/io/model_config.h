// The model hyper-parameters of a checkpoint's config.json, normalised across the three
// supported families and the two generations of transformers spellings, and validated so that
// later layers can trust every size and per-layer list.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mls::io {

enum class ModelFamily { kDeepseekV3, kDeepseekV32, kGlmMoeDsa };
// The config.json model_type: "deepseek_v3", "deepseek_v32", "glm_moe_dsa".
std::string_view model_type_name(ModelFamily f);

// What a layer's attention does for DSA: no indexer, its own indexer ("full"), or the top-k of
// the most recent full layer ("shared", glm_moe_dsa only).
enum class IndexerKind { kNone, kFull, kShared };

struct RopeParams {
  std::string type = "default";  // "default" or "yarn"
  double theta = 10000.0;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // defaults to max_position_embeddings
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;

  bool operator==(const RopeParams&) const = default;
};

struct QuantConfig {
  bool fp8 = false;       // block-FP8 weights with *_scale_inv tensors
  int64_t block_n = 128;  // weight_block_size[0]: rows (output features) per scale
  int64_t block_k = 128;  // weight_block_size[1]: columns (input features) per scale
  std::string scale_fmt;  // "" or e.g. "ue8m0" (power-of-two scales)
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kDeepseekV3;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;      // dense MLP layers
  int64_t moe_intermediate_size = 0;  // each routed and shared expert
  int64_t num_hidden_layers = 0;      // MTP layers stored past this index are not part of the model
  // Multi-token-prediction layers, stored at index num_hidden_layers + j (docs/reference.md).
  int64_t num_nextn_predict_layers = 0;
  int64_t num_attention_heads = 0;

  int64_t q_lora_rank = 0;  // 0: a plain q_proj instead of q_a_proj / q_b_proj
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;

  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // config.json's, then generation_config.json's extras

  RopeParams rope;
  bool mla_rope_interleaved = true;

  bool has_indexer = false;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  bool indexer_rope_interleaved = false;  // false: half-split (NeoX) RoPE in the indexer

  std::vector<bool> layer_is_moe;          // per layer: routed experts (true) or dense MLP
  std::vector<IndexerKind> layer_indexer;  // per layer

  QuantConfig quant;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // Layer L's MLP and indexer, for the main layers and the MTP layers (L in [num_hidden_layers,
  // + num_nextn_predict_layers)) alike: an MTP layer's MLP is of the last main layer's kind, and
  // on DSA models it owns its indexer (its top-k cannot come from another forward).
  bool is_moe(int64_t layer) const;
  IndexerKind indexer(int64_t layer) const;

  // Reads dir/config.json and, when present, dir/generation_config.json (extra eos ids).
  // Throws mls::ConfigError naming the file and the field.
  static ModelConfig load(const std::filesystem::path& dir);
  // `source_name` (usually the file path) prefixes every error message.
  static ModelConfig from_json(const nlohmann::json& j, std::string_view source_name);
  // The normalised values, for reports and logs.
  nlohmann::json to_json() const;
};

}  // namespace mls::io
