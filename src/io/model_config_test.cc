#include "io/model_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <initializer_list>
#include <limits>

#include "core/error.h"
#include "io/test_dir.h"
#include "test_data.h"

namespace mls::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TestDir;

constexpr IndexerKind F = IndexerKind::kFull;
constexpr IndexerKind S = IndexerKind::kShared;

json fixture_json(const std::string& name) {
  std::ifstream in(kTestData / name / "config.json");
  return json::parse(in);
}

ModelConfig parse(const json& j) {
  return ModelConfig::from_json(j, "test.json");
}

// Parsing `j` throws a ConfigError whose message contains every one of `parts`.
void expect_error(const json& j, std::initializer_list<std::string> parts) {
  try {
    parse(j);
    ADD_FAILURE() << "no error for " << j.dump();
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("test.json: ", 0), 0u) << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
}

TEST(ModelConfig, TinyGlm5) {
  const ModelConfig c = ModelConfig::load(kTestData / "tiny-glm5");
  EXPECT_EQ(c.family, ModelFamily::kGlmMoeDsa);
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 256);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.q_lora_rank, 96);
  EXPECT_EQ(c.kv_lora_rank, 64);
  EXPECT_EQ(c.qk_nope_head_dim, 32);
  EXPECT_EQ(c.qk_rope_head_dim, 16);
  EXPECT_EQ(c.qk_head_dim(), 48);
  EXPECT_EQ(c.v_head_dim, 32);
  EXPECT_EQ(c.n_routed_experts, 16);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 1.0);
  EXPECT_TRUE(c.mla_rope_interleaved);
  EXPECT_TRUE(c.has_indexer);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 32);
  EXPECT_EQ(c.index_topk, 8);
  EXPECT_TRUE(c.indexer_rope_interleaved);
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.layer_indexer, (std::vector<IndexerKind>{F, S, F, S}));
  EXPECT_FALSE(c.quant.fp8);
  EXPECT_EQ(c.to_json()["indexer_types"], json({"full", "shared", "full", "shared"}));
}

TEST(ModelConfig, TinyDsv32) {
  const ModelConfig c = ModelConfig::load(kTestData / "tiny-dsv32");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV32);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.n_group, 4);
  EXPECT_EQ(c.topk_group, 2);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_EQ(c.rope.mscale, 1.0);
  EXPECT_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_TRUE(c.mla_rope_interleaved);
  EXPECT_TRUE(c.has_indexer);
  EXPECT_FALSE(c.indexer_rope_interleaved);
  EXPECT_EQ(c.layer_indexer, (std::vector<IndexerKind>{F, F, F, F}));
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true}));
  EXPECT_FALSE(c.quant.fp8);
}

TEST(ModelConfig, TinyDsv3) {
  const ModelConfig c = ModelConfig::load(kTestData / "tiny-dsv3");
  EXPECT_EQ(c.family, ModelFamily::kDeepseekV3);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_FALSE(c.has_indexer);
  EXPECT_EQ(c.layer_indexer, (std::vector<IndexerKind>(4, IndexerKind::kNone)));
  EXPECT_EQ(c.layer_is_moe, (std::vector<bool>{false, true, true, true}));  // first_k_dense 1
  EXPECT_TRUE(c.mla_rope_interleaved);
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope.factor, 4.0);
}

TEST(ModelConfig, Fp8Fixtures) {
  for (const char* name : {"tiny-glm5-fp8", "tiny-dsv32-fp8", "tiny-dsv3-fp8"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = ModelConfig::load(kTestData / name);
    EXPECT_TRUE(c.quant.fp8);
    EXPECT_EQ(c.quant.block_n, 128);
    EXPECT_EQ(c.quant.block_k, 128);
    EXPECT_EQ(c.quant.scale_fmt, "");
    // Same model as the bf16 fixture apart from the quantisation.
    const std::string base(name, std::string_view(name).size() - 4);
    json a = c.to_json(), b = ModelConfig::load(kTestData / base).to_json();
    a.erase("quantization");
    b.erase("quantization");
    EXPECT_EQ(a, b);
  }
}

TEST(ModelConfig, QuantisationFields) {
  json j = fixture_json("tiny-dsv3-fp8");
  j["quantization_config"]["weight_block_size"] = {64, 32};
  j["quantization_config"]["scale_fmt"] = "ue8m0";
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.quant.block_n, 64);
  EXPECT_EQ(c.quant.block_k, 32);
  EXPECT_EQ(c.quant.scale_fmt, "ue8m0");
  j["quantization_config"]["weight_block_size"] = {128};
  expect_error(j, {"'quantization_config.weight_block_size'"});
  j = fixture_json("tiny-dsv3-fp8");
  j["quantization_config"]["quant_method"] = "awq";
  expect_error(j, {"'quantization_config.quant_method'", "awq", "fp8"});
  j = fixture_json("tiny-dsv3-fp8");
  j["quantization_config"]["activation_scheme"] = "static";
  expect_error(j, {"'quantization_config.activation_scheme'", "static"});
  j = fixture_json("tiny-dsv3-fp8");
  j["quantization_config"]["fmt"] = "e5m2";
  expect_error(j, {"'quantization_config.fmt'"});
}

TEST(ModelConfig, BothRopeSpellingsAgree) {
  const json v5 = fixture_json("tiny-dsv32");
  json classic = v5;
  classic.erase("rope_parameters");
  classic["rope_theta"] = 10000.0;
  classic["rope_scaling"] = {
      {"type", "yarn"},       {"factor", 4.0},  {"original_max_position_embeddings", 1024},
      {"beta_fast", 32},      {"beta_slow", 1}, {"mscale", 1.0},
      {"mscale_all_dim", 1.0}};
  EXPECT_EQ(parse(classic).rope, parse(v5).rope);
  classic["rope_scaling"].erase("type");
  classic["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_EQ(parse(classic).rope, parse(v5).rope);
  // Without a factor, YaRN scales by max_position_embeddings / original (4096 / 1024).
  classic["rope_scaling"].erase("factor");
  EXPECT_DOUBLE_EQ(parse(classic).rope.factor, 4.0);

  const json glm = fixture_json("tiny-glm5");
  json plain = glm;
  plain.erase("rope_parameters");
  plain["rope_theta"] = 10000;
  EXPECT_EQ(parse(plain).rope, parse(glm).rope);
  plain["rope_scaling"] = nullptr;
  EXPECT_EQ(parse(plain).rope, parse(glm).rope);
  plain.erase("rope_theta");  // transformers' default theta
  EXPECT_EQ(parse(plain).rope, parse(glm).rope);
  plain["rope_theta"] = 1e6;
  EXPECT_DOUBLE_EQ(parse(plain).rope.theta, 1e6);

  json bad = glm;
  bad["rope_parameters"]["rope_type"] = "linear";
  expect_error(bad, {"'rope_parameters.rope_type'", "linear", "default, yarn"});
  bad = glm;
  bad["rope_parameters"]["rope_type"] = "yarn";
  expect_error(bad, {"'rope_parameters.factor'", "missing"});
  bad = glm;
  bad["rope_parameters"]["rope_theta"] = "big";
  expect_error(bad, {"'rope_parameters.rope_theta'", "must be a number"});
}

TEST(ModelConfig, RopeInterleaveFlag) {
  json j = fixture_json("tiny-dsv3");
  j.erase("rope_interleave");
  EXPECT_TRUE(parse(j).mla_rope_interleaved);  // default
  j["rope_interleave"] = false;
  EXPECT_FALSE(parse(j).mla_rope_interleaved);
}

TEST(ModelConfig, MlpLayerTypesDefaultToFirstKDense) {
  json j = fixture_json("tiny-glm5");
  const std::vector<bool> explicit_types = parse(j).layer_is_moe;
  j.erase("mlp_layer_types");
  EXPECT_EQ(parse(j).layer_is_moe, explicit_types);
  j["first_k_dense_replace"] = 3;
  EXPECT_EQ(parse(j).layer_is_moe, (std::vector<bool>{false, false, false, true}));
  j["first_k_dense_replace"] = 0;
  EXPECT_EQ(parse(j).layer_is_moe, (std::vector<bool>{true, true, true, true}));
  j.erase("first_k_dense_replace");
  expect_error(j, {"'first_k_dense_replace'", "missing"});

  j = fixture_json("tiny-glm5");
  j["mlp_layer_types"] = {"dense", "sparse"};
  expect_error(j, {"'mlp_layer_types'", "2 entries", "num_hidden_layers is 4"});
  j["mlp_layer_types"] = {"dense", "moe", "sparse", "sparse"};
  expect_error(j, {"'mlp_layer_types'", "entry 1 is 'moe'"});
}

// A glm_moe_dsa config of `layers` layers without indexer_types.
json glm_without_indexer_types(int layers) {
  json j = fixture_json("tiny-glm5");
  j.erase("indexer_types");
  j.erase("mlp_layer_types");
  j.erase("layer_types");
  j["num_hidden_layers"] = layers;
  return j;
}

TEST(ModelConfig, GlmIndexerTypeDefaults) {
  json j = glm_without_indexer_types(4);
  j["index_topk_pattern"] = "FSSF";
  EXPECT_EQ(parse(j).layer_indexer, (std::vector<IndexerKind>{F, S, S, F}));
  j["index_topk_pattern"] = "FSF";
  expect_error(j, {"'index_topk_pattern'", "3 letters"});
  j["index_topk_pattern"] = "FSXF";
  expect_error(j, {"'index_topk_pattern'", "letter 2"});
  j["index_topk_pattern"] = "SFFF";
  expect_error(j, {"layer 0 must have a full indexer"});

  // No pattern: full iff max(i - offset + 1, 0) % freq == 0, defaults freq 1 and offset 2,
  // under which every layer is full.
  j = glm_without_indexer_types(6);
  EXPECT_EQ(parse(j).layer_indexer, (std::vector<IndexerKind>(6, F)));
  j["index_topk_freq"] = 2;  // offset 2: max(i - 1, 0) = 0 0 1 2 3 4
  EXPECT_EQ(parse(j).layer_indexer, (std::vector<IndexerKind>{F, F, S, F, S, F}));
  j = glm_without_indexer_types(8);
  j["index_topk_freq"] = 4;  // GLM-5.2: max(i - 2, 0) = 0 0 0 1 2 3 4 5
  j["index_skip_topk_offset"] = 3;
  EXPECT_EQ(parse(j).layer_indexer, (std::vector<IndexerKind>{F, F, F, S, S, S, F, S}));
  j["index_skip_topk_offset"] = 0;  // layer 0: max(1, 0) % 4 = 1 -> shared
  expect_error(j, {"layer 0 must have a full indexer"});
  j["index_topk_freq"] = 0;
  expect_error(j, {"'index_topk_freq'", "positive"});
  j["index_topk_freq"] = 2;
  j["index_skip_topk_offset"] = std::numeric_limits<int64_t>::min();  // once overflowed i - offset
  expect_error(j, {"'index_skip_topk_offset'", "must be in [0, num_hidden_layers]"});

  j = fixture_json("tiny-glm5");
  j["indexer_types"] = {"full", "shared", "full"};
  expect_error(j, {"'indexer_types'", "3 entries"});
  j["indexer_types"] = {"full", "shared", "full", "half"};
  expect_error(j, {"'indexer_types'", "entry 3 is 'half'"});
  j["indexer_types"] = {"shared", "full", "full", "full"};
  expect_error(j, {"layer 0 must have a full indexer"});
}

TEST(ModelConfig, QLoraRankNullMeansPlainQProj) {
  json j = fixture_json("tiny-dsv3");
  j["q_lora_rank"] = nullptr;
  EXPECT_EQ(parse(j).q_lora_rank, 0);
  j.erase("q_lora_rank");
  EXPECT_EQ(parse(j).q_lora_rank, 0);
}

TEST(ModelConfig, MtpLayers) {
  // Absent: no MTP layers. tiny-dsv3's config says 1 (transformers' default), its weights hold
  // none.
  EXPECT_EQ(ModelConfig::load(kTestData / "tiny-dsv32").num_nextn_predict_layers, 0);
  EXPECT_EQ(ModelConfig::load(kTestData / "tiny-dsv3").num_nextn_predict_layers, 1);
  for (const char* name : {"tiny-dsv3", "tiny-dsv32", "tiny-glm5"}) {
    json j = fixture_json(name);
    j["num_nextn_predict_layers"] = 2;
    const ModelConfig c = parse(j);
    EXPECT_EQ(c.num_nextn_predict_layers, 2) << name;
    EXPECT_EQ(c.to_json()["num_nextn_predict_layers"], 2) << name;
    // The per-layer tables stay the main model's; layers N and N + 1 are the MTP layers.
    EXPECT_EQ(static_cast<int64_t>(c.layer_is_moe.size()), c.num_hidden_layers) << name;
    for (int64_t L = c.num_hidden_layers; L < c.num_hidden_layers + 2; ++L) {
      EXPECT_TRUE(c.is_moe(L)) << name;
      EXPECT_EQ(c.indexer(L), c.has_indexer ? F : IndexerKind::kNone) << name;
    }
    EXPECT_EQ(c.is_moe(0), c.layer_is_moe[0]) << name;
    EXPECT_EQ(c.indexer(1), c.layer_indexer[1]) << name;
    EXPECT_THROW(c.is_moe(c.num_hidden_layers + 2), Error) << name;
    EXPECT_THROW(c.indexer(-1), Error) << name;
  }
  // A GLM-5 whose last main layer shares its top-k: the MTP layer still owns an indexer.
  json glm = fixture_json("tiny-glm5");
  glm["num_nextn_predict_layers"] = 1;
  glm["indexer_types"] = {"full", "shared", "full", "shared"};
  const ModelConfig g = parse(glm);
  EXPECT_EQ(g.indexer(3), S);
  EXPECT_EQ(g.indexer(4), F);
  // Dense last layer: a dense MTP block.
  json dense = fixture_json("tiny-dsv3");
  dense["num_nextn_predict_layers"] = 1;
  dense["first_k_dense_replace"] = 4;
  EXPECT_FALSE(parse(dense).is_moe(4));

  json bad = fixture_json("tiny-dsv32");
  bad["num_nextn_predict_layers"] = -1;
  expect_error(bad, {"'num_nextn_predict_layers'", "must be in [0, 4096], found -1"});
  bad["num_nextn_predict_layers"] = "1";
  expect_error(bad, {"'num_nextn_predict_layers'", "must be an integer"});
}

TEST(ModelConfig, MalformedConfigs) {
  const json base = fixture_json("tiny-dsv32");
  json j = base;
  j.erase("hidden_size");
  expect_error(j, {"'hidden_size'", "missing"});
  j = base;
  j["hidden_size"] = "256";
  expect_error(j, {"'hidden_size'", "must be an integer", "string"});
  j["hidden_size"] = 256.5;
  expect_error(j, {"'hidden_size'", "must be an integer"});
  j["hidden_size"] = 0;
  expect_error(j, {"'hidden_size'", "must be positive"});
  j = base;
  j["model_type"] = "llama";
  expect_error(j, {"'model_type'", "llama", "deepseek_v3, deepseek_v32, glm_moe_dsa"});
  j.erase("model_type");
  expect_error(j, {"'model_type'", "missing"});
  j = base;
  j["norm_topk_prob"] = 1;
  expect_error(j, {"'norm_topk_prob'", "true or false"});
  j = base;
  j["tie_word_embeddings"] = true;
  expect_error(j, {"'tie_word_embeddings'", "separate lm_head"});
  j = base;
  j["num_experts_per_tok"] = 17;
  expect_error(j, {"'num_experts_per_tok'", "exceeds n_routed_experts"});
  j = base;
  j["num_experts_per_tok"] = 9;  // 2 kept groups of 4 experts hold only 8
  expect_error(j, {"'num_experts_per_tok'", "kept groups"});
  j = base;
  j["n_group"] = 3;
  expect_error(j, {"'n_group'", "does not divide n_routed_experts"});
  j = base;
  j["topk_group"] = 5;
  expect_error(j, {"'topk_group'", "exceeds n_group"});
  j = base;
  j.erase("index_topk");
  expect_error(j, {"'index_topk'", "missing"});
  j = base;
  j["eos_token_id"] = {1, "x"};
  expect_error(j, {"'eos_token_id'"});
  j = base;
  j["rope_parameters"] = 3;
  expect_error(j, {"'rope_parameters'", "must be an object"});
  EXPECT_THROW(ModelConfig::from_json(json::array(), "test.json"), ConfigError);
}

TEST(ModelConfig, EosIdsFromConfigAndGenerationConfig) {
  TestDir dir;
  json j = fixture_json("tiny-glm5");
  j["eos_token_id"] = {1, 7};
  std::ofstream(dir / "config.json") << j.dump();
  EXPECT_EQ(ModelConfig::load(dir.path()).eos_token_ids, (std::vector<int64_t>{1, 7}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [7, 9], "bos_token_id": 0})";
  EXPECT_EQ(ModelConfig::load(dir.path()).eos_token_ids, (std::vector<int64_t>{1, 7, 9}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 3})";
  EXPECT_EQ(ModelConfig::load(dir.path()).eos_token_ids, (std::vector<int64_t>{1, 7, 3}));
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": "x"})";
  try {
    ModelConfig::load(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: field 'eos_token_id'"),
              std::string::npos)
        << e.what();
  }
}

// Corrupt configs must fail in the parser, not in the allocator or on the stack.
TEST(ModelConfig, HostileConfigs) {
  json j = fixture_json("tiny-glm5");
  j["num_hidden_layers"] = int64_t{1} << 40;
  expect_error(j, {"'num_hidden_layers'", "at most 4096"});
  TestDir dir;
  std::ofstream(dir / "config.json") << std::string(100000, '[') << std::string(100000, ']');
  try {
    ModelConfig::load(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: JSON nests deeper than 128 levels"),
              std::string::npos)
        << e.what();
  }
}

TEST(ModelConfig, LoadErrors) {
  TestDir dir;
  EXPECT_THROW(ModelConfig::load(dir.path()), ConfigError);
  std::ofstream(dir / "config.json") << "{ nope";
  try {
    ModelConfig::load(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: not valid JSON"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mls::io
