#include "io/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/json.h"

namespace mls::io {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Typed access to one JSON object's fields; every failure names the source and the field
// (with `prefix` for nested objects, e.g. "rope_parameters.factor").
class Fields {
 public:
  Fields(const json& obj, std::string_view source, std::string prefix = "")
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  template <class... Args>
  [[noreturn]] void fail(std::string_view key, fmt::format_string<Args...> f,
                         Args&&... args) const {
    raise<ConfigError>("{}: field '{}{}' {}", source_, prefix_, key,
                       fmt::format(f, std::forward<Args>(args)...));
  }

  // The field, or nullptr when it is absent or null.
  const json* find(std::string_view key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) fail(key, "is missing");
    return *v;
  }

  int64_t to_int(std::string_view key, const json& v) const {
    if (!v.is_number_integer())
      fail(key, "must be an integer, found {} {}", v.type_name(), v.dump());
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(key, "is too large: {}", v.dump());
    return v.get<int64_t>();
  }
  int64_t integer(std::string_view key) const { return to_int(key, required(key)); }
  std::optional<int64_t> opt_integer(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    return to_int(key, *v);
  }
  int64_t positive(std::string_view key) const {
    const int64_t v = integer(key);
    if (v <= 0) fail(key, "must be positive, found {}", v);
    return v;
  }
  int64_t non_negative(std::string_view key) const {
    const int64_t v = integer(key);
    if (v < 0) fail(key, "must not be negative, found {}", v);
    return v;
  }

  double to_double(std::string_view key, const json& v) const {
    if (!v.is_number()) fail(key, "must be a number, found {} {}", v.type_name(), v.dump());
    return v.get<double>();
  }
  double number(std::string_view key) const { return to_double(key, required(key)); }
  std::optional<double> opt_number(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    return to_double(key, *v);
  }
  double positive_number(std::string_view key) const {
    const double v = number(key);
    if (!(v > 0)) fail(key, "must be positive, found {}", v);
    return v;
  }

  bool boolean(std::string_view key) const {
    const json& v = required(key);
    if (!v.is_boolean()) fail(key, "must be true or false, found {} {}", v.type_name(), v.dump());
    return v.get<bool>();
  }
  std::optional<bool> opt_boolean(std::string_view key) const {
    if (find(key) == nullptr) return std::nullopt;
    return boolean(key);
  }

  std::optional<std::string> opt_string(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(key, "must be a string, found {} {}", v->type_name(), v->dump());
    return v->get<std::string>();
  }
  std::string string(std::string_view key) const {
    required(key);
    return *opt_string(key);
  }

  // A JSON array of strings with exactly `n` entries.
  std::vector<std::string> string_list(std::string_view key, int64_t n) const {
    const json& v = required(key);
    if (!v.is_array()) fail(key, "must be a list, found {} {}", v.type_name(), v.dump());
    if (static_cast<int64_t>(v.size()) != n)
      fail(key, "has {} entries but num_hidden_layers is {}", v.size(), n);
    std::vector<std::string> out;
    for (const json& e : v) {
      if (!e.is_string()) fail(key, "must hold strings, found {} {}", e.type_name(), e.dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  // An id or a list of ids (eos_token_id); absent or null gives none.
  std::vector<int64_t> id_list(std::string_view key) const {
    const json* v = find(key);
    if (v == nullptr) return {};
    if (!v->is_array()) return {to_int(key, *v)};
    std::vector<int64_t> out;
    for (const json& e : *v) out.push_back(to_int(key, e));
    return out;
  }

  // A nested object, or nullptr when absent or null.
  const json* object(std::string_view key) const {
    const json* v = find(key);
    if (v != nullptr && !v->is_object())
      fail(key, "must be an object, found {} {}", v->type_name(), v->dump());
    return v;
  }
  std::string_view source() const { return source_; }
  Fields nested(const json& obj, std::string_view key) const {
    return Fields(obj, source_, prefix_ + std::string(key) + ".");
  }

 private:
  const json& obj_;
  std::string_view source_;
  std::string prefix_;
};

constexpr std::pair<std::string_view, ModelFamily> kFamilies[] = {
    {"deepseek_v3", ModelFamily::kDeepseekV3},
    {"deepseek_v32", ModelFamily::kDeepseekV32},
    {"glm_moe_dsa", ModelFamily::kGlmMoeDsa},
};

// Both spellings: transformers 5 `rope_parameters` (theta inside) and the classic top-level
// `rope_theta` + `rope_scaling`. Unused YaRN fields keep their defaults for the default type so
// that the two spellings of one setting compare equal.
RopeParams parse_rope(const Fields& top, int64_t max_position_embeddings) {
  RopeParams r;
  r.original_max_position_embeddings = max_position_embeddings;
  const json* params = top.object("rope_parameters");
  const char* key = "rope_parameters";
  std::optional<double> theta = top.opt_number("rope_theta");
  if (params == nullptr) {
    params = top.object("rope_scaling");
    key = "rope_scaling";
  }
  if (params == nullptr) {
    r.theta = theta.value_or(r.theta);
  } else {
    const Fields f = top.nested(*params, key);
    if (const std::optional<double> inner = f.opt_number("rope_theta")) theta = inner;
    r.theta = theta.value_or(r.theta);
    const std::optional<std::string> rope_type = f.opt_string("rope_type");
    r.type = rope_type ? *rope_type : f.opt_string("type").value_or("default");
    if (r.type == "yarn") {
      const std::optional<int64_t> orig = f.opt_integer("original_max_position_embeddings");
      if (orig) {
        if (*orig <= 0)
          f.fail("original_max_position_embeddings", "must be positive, found {}", *orig);
        r.original_max_position_embeddings = *orig;
      }
      // transformers: without a factor, YaRN scales by max_position / original.
      const std::optional<double> factor = f.opt_number("factor");
      if (factor) {
        r.factor = *factor;
      } else if (orig) {
        r.factor = static_cast<double>(max_position_embeddings) / static_cast<double>(*orig);
      } else {
        f.fail("factor", "is missing (required for YaRN)");
      }
      if (!(r.factor > 0)) f.fail("factor", "must be positive, found {}", r.factor);
      r.beta_fast = f.opt_number("beta_fast").value_or(r.beta_fast);
      r.beta_slow = f.opt_number("beta_slow").value_or(r.beta_slow);
      r.mscale = f.opt_number("mscale");
      r.mscale_all_dim = f.opt_number("mscale_all_dim");
    } else if (r.type != "default") {
      f.fail(rope_type ? "rope_type" : "type", "is '{}'; supported: default, yarn", r.type);
    }
  }
  if (!(r.theta > 0)) top.fail("rope_theta", "must be positive, found {}", r.theta);
  return r;
}

std::vector<bool> parse_mlp_layers(const Fields& f, int64_t n_layers) {
  std::vector<bool> moe(static_cast<size_t>(n_layers));
  if (f.find("mlp_layer_types") != nullptr) {
    const std::vector<std::string> types = f.string_list("mlp_layer_types", n_layers);
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "dense" && types[i] != "sparse")
        f.fail("mlp_layer_types", "entry {} is '{}'; expected 'dense' or 'sparse'", i, types[i]);
      moe[i] = types[i] == "sparse";
    }
    return moe;
  }
  const int64_t first_dense = f.non_negative("first_k_dense_replace");
  for (int64_t i = 0; i < n_layers; ++i) moe[static_cast<size_t>(i)] = i >= first_dense;
  return moe;
}

// glm_moe_dsa: `indexer_types`, else `index_topk_pattern`, else the freq/offset schedule
// (whose defaults make every layer full), as GlmMoeDsaConfig derives it.
std::vector<IndexerKind> parse_glm_indexers(const Fields& f, int64_t n_layers) {
  std::vector<IndexerKind> kinds(static_cast<size_t>(n_layers));
  if (f.find("indexer_types") != nullptr) {
    const std::vector<std::string> types = f.string_list("indexer_types", n_layers);
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "full" && types[i] != "shared")
        f.fail("indexer_types", "entry {} is '{}'; expected 'full' or 'shared'", i, types[i]);
      kinds[i] = types[i] == "full" ? IndexerKind::kFull : IndexerKind::kShared;
    }
  } else if (const std::optional<std::string> pattern = f.opt_string("index_topk_pattern")) {
    if (static_cast<int64_t>(pattern->size()) != n_layers)
      f.fail("index_topk_pattern", "has {} letters but num_hidden_layers is {}", pattern->size(),
             n_layers);
    for (size_t i = 0; i < pattern->size(); ++i) {
      const char c = (*pattern)[i];
      if (c != 'F' && c != 'S')
        f.fail("index_topk_pattern", "letter {} is '{}'; expected 'F' or 'S'", i, c);
      kinds[i] = c == 'F' ? IndexerKind::kFull : IndexerKind::kShared;
    }
  } else {
    const int64_t freq = f.opt_integer("index_topk_freq").value_or(1);
    const int64_t offset = f.opt_integer("index_skip_topk_offset").value_or(2);
    if (freq <= 0) f.fail("index_topk_freq", "must be positive, found {}", freq);
    if (offset < 0 || offset > n_layers)
      f.fail("index_skip_topk_offset", "must be in [0, num_hidden_layers], found {}", offset);
    for (int64_t i = 0; i < n_layers; ++i)
      kinds[static_cast<size_t>(i)] = std::max<int64_t>(i - offset + 1, 0) % freq == 0
                                          ? IndexerKind::kFull
                                          : IndexerKind::kShared;
  }
  // A shared layer reuses the top-k of an earlier full one, so there must be one.
  if (!kinds.empty() && kinds[0] != IndexerKind::kFull)
    raise<ConfigError>(
        "{}: layer 0 must have a full indexer (indexer_types / index_topk_pattern "
        "/ index_skip_topk_offset): shared layers reuse an earlier full layer's "
        "top-k",
        f.source());
  return kinds;
}

QuantConfig parse_quant(const Fields& top) {
  QuantConfig q;
  const json* obj = top.object("quantization_config");
  if (obj == nullptr) return q;
  const Fields f = top.nested(*obj, "quantization_config");
  const std::string method = f.string("quant_method");
  if (method != "fp8") f.fail("quant_method", "is '{}'; supported: fp8", method);
  q.fp8 = true;
  if (const std::optional<std::string> fmt = f.opt_string("fmt"); fmt && *fmt != "e4m3")
    f.fail("fmt", "is '{}'; supported: e4m3", *fmt);
  // Static schemes need per-tensor activation scales that these checkpoints do not carry.
  if (const std::optional<std::string> act = f.opt_string("activation_scheme");
      act && *act != "dynamic")
    f.fail("activation_scheme", "is '{}'; supported: dynamic", *act);
  if (const json* block = f.find("weight_block_size")) {
    if (!block->is_array() || block->size() != 2)
      f.fail("weight_block_size", "must be a list of two integers, found {}", block->dump());
    q.block_n = f.to_int("weight_block_size", (*block)[0]);
    q.block_k = f.to_int("weight_block_size", (*block)[1]);
    if (q.block_n <= 0 || q.block_k <= 0)
      f.fail("weight_block_size", "must be positive, found {}", block->dump());
  }
  q.scale_fmt = f.opt_string("scale_fmt").value_or("");
  return q;
}

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) raise<ConfigError>("cannot read {}", path.string());
  const std::string text(std::istreambuf_iterator<char>(in), {});
  return parse_json<ConfigError, json>(text, path.string());
}

}  // namespace

std::string_view model_type_name(ModelFamily family) {
  for (const auto& [name, f] : kFamilies)
    if (f == family) return name;
  return "?";
}

ModelConfig ModelConfig::from_json(const json& j, std::string_view source_name) {
  if (!j.is_object()) raise<ConfigError>("{}: not a JSON object", source_name);
  const Fields f(j, source_name);
  ModelConfig c;

  const std::string model_type = f.string("model_type");
  const auto family = std::find_if(std::begin(kFamilies), std::end(kFamilies),
                                   [&](const auto& e) { return e.first == model_type; });
  if (family == std::end(kFamilies))
    f.fail("model_type", "is '{}'; supported: deepseek_v3, deepseek_v32, glm_moe_dsa", model_type);
  c.family = family->second;

  c.vocab_size = f.positive("vocab_size");
  c.hidden_size = f.positive("hidden_size");
  c.intermediate_size = f.positive("intermediate_size");
  c.moe_intermediate_size = f.positive("moe_intermediate_size");
  c.num_hidden_layers = f.positive("num_hidden_layers");
  // Per-layer tables are sized by it: a corrupt value must fail here, not in the allocator.
  constexpr int64_t kMaxLayers = 4096;
  if (c.num_hidden_layers > kMaxLayers)
    f.fail("num_hidden_layers", "is {}; at most {} are supported", c.num_hidden_layers, kMaxLayers);
  c.num_attention_heads = f.positive("num_attention_heads");
  c.num_nextn_predict_layers = f.opt_integer("num_nextn_predict_layers").value_or(0);
  if (c.num_nextn_predict_layers < 0 || c.num_nextn_predict_layers > kMaxLayers)
    f.fail("num_nextn_predict_layers", "must be in [0, {}], found {}", kMaxLayers,
           c.num_nextn_predict_layers);

  c.q_lora_rank = f.opt_integer("q_lora_rank").value_or(0);
  if (c.q_lora_rank < 0) f.fail("q_lora_rank", "must not be negative, found {}", c.q_lora_rank);
  c.kv_lora_rank = f.positive("kv_lora_rank");
  c.qk_nope_head_dim = f.positive("qk_nope_head_dim");
  c.qk_rope_head_dim = f.positive("qk_rope_head_dim");
  if (c.qk_rope_head_dim % 2 != 0)
    f.fail("qk_rope_head_dim", "must be even (RoPE rotates pairs), found {}", c.qk_rope_head_dim);
  c.v_head_dim = f.positive("v_head_dim");

  c.n_routed_experts = f.positive("n_routed_experts");
  c.n_shared_experts = f.non_negative("n_shared_experts");
  c.num_experts_per_tok = f.positive("num_experts_per_tok");
  c.n_group = f.positive("n_group");
  c.topk_group = f.positive("topk_group");
  c.norm_topk_prob = f.boolean("norm_topk_prob");
  c.routed_scaling_factor = f.positive_number("routed_scaling_factor");
  if (c.num_experts_per_tok > c.n_routed_experts)
    f.fail("num_experts_per_tok", "({}) exceeds n_routed_experts ({})", c.num_experts_per_tok,
           c.n_routed_experts);
  if (c.n_routed_experts % c.n_group != 0)
    f.fail("n_group", "({}) does not divide n_routed_experts ({})", c.n_group, c.n_routed_experts);
  if (c.topk_group > c.n_group)
    f.fail("topk_group", "({}) exceeds n_group ({})", c.topk_group, c.n_group);
  if (c.num_experts_per_tok > c.topk_group * (c.n_routed_experts / c.n_group))
    f.fail("num_experts_per_tok", "({}) exceeds the {} experts of the topk_group ({}) kept groups",
           c.num_experts_per_tok, c.topk_group * (c.n_routed_experts / c.n_group), c.topk_group);

  c.rms_norm_eps = f.positive_number("rms_norm_eps");
  c.max_position_embeddings = f.positive("max_position_embeddings");
  c.tie_word_embeddings = f.opt_boolean("tie_word_embeddings").value_or(false);
  if (c.tie_word_embeddings)
    f.fail("tie_word_embeddings", "is true, but {} models keep a separate lm_head", model_type);
  c.bos_token_id = f.opt_integer("bos_token_id");
  c.eos_token_ids = f.id_list("eos_token_id");

  c.rope = parse_rope(f, c.max_position_embeddings);
  c.mla_rope_interleaved =
      c.family == ModelFamily::kDeepseekV3 ? f.opt_boolean("rope_interleave").value_or(true) : true;

  c.layer_is_moe = parse_mlp_layers(f, c.num_hidden_layers);
  c.has_indexer = c.family != ModelFamily::kDeepseekV3;
  if (c.has_indexer) {
    c.index_n_heads = f.positive("index_n_heads");
    c.index_head_dim = f.positive("index_head_dim");
    c.index_topk = f.positive("index_topk");
    if (c.index_head_dim < c.qk_rope_head_dim)
      f.fail("index_head_dim", "({}) is smaller than qk_rope_head_dim ({}), its RoPE part",
             c.index_head_dim, c.qk_rope_head_dim);
    c.indexer_rope_interleaved = c.family == ModelFamily::kGlmMoeDsa;
  }
  const auto n_layers = static_cast<size_t>(c.num_hidden_layers);
  switch (c.family) {
    case ModelFamily::kDeepseekV3:
      c.layer_indexer.assign(n_layers, IndexerKind::kNone);
      break;
    case ModelFamily::kDeepseekV32:
      c.layer_indexer.assign(n_layers, IndexerKind::kFull);
      break;
    case ModelFamily::kGlmMoeDsa:
      c.layer_indexer = parse_glm_indexers(f, c.num_hidden_layers);
      break;
  }

  c.quant = parse_quant(f);
  return c;
}

ModelConfig ModelConfig::load(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  if (!fs::is_directory(dir)) raise<ConfigError>("model directory {} does not exist", dir.string());
  if (!fs::is_regular_file(config_path))
    raise<ConfigError>("{}: no config.json in this directory", dir.string());
  ModelConfig c = from_json(read_json(config_path), config_path.string());

  const fs::path gen_path = dir / "generation_config.json";
  if (fs::is_regular_file(gen_path)) {
    const json gen = read_json(gen_path);
    if (!gen.is_object()) raise<ConfigError>("{}: not a JSON object", gen_path.string());
    const std::string gen_source = gen_path.string();
    for (int64_t id : Fields(gen, gen_source).id_list("eos_token_id"))
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
        c.eos_token_ids.push_back(id);
  }
  return c;
}

bool ModelConfig::is_moe(int64_t layer) const {
  MLS_CHECK(layer >= 0 && layer < num_hidden_layers + num_nextn_predict_layers,
            "layer {} of {} + {} MTP", layer, num_hidden_layers, num_nextn_predict_layers);
  return layer < num_hidden_layers ? layer_is_moe[static_cast<size_t>(layer)] : layer_is_moe.back();
}

IndexerKind ModelConfig::indexer(int64_t layer) const {
  MLS_CHECK(layer >= 0 && layer < num_hidden_layers + num_nextn_predict_layers,
            "layer {} of {} + {} MTP", layer, num_hidden_layers, num_nextn_predict_layers);
  if (layer < num_hidden_layers) return layer_indexer[static_cast<size_t>(layer)];
  return has_indexer ? IndexerKind::kFull : IndexerKind::kNone;
}

json ModelConfig::to_json() const {
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  std::vector<std::string> mlp, indexer;
  for (bool moe : layer_is_moe) mlp.push_back(moe ? "sparse" : "dense");
  for (IndexerKind k : layer_indexer)
    indexer.push_back(k == IndexerKind::kNone   ? "none"
                      : k == IndexerKind::kFull ? "full"
                                                : "shared");
  return {
      {"model_type", model_type_name(family)},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"moe_intermediate_size", moe_intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_nextn_predict_layers", num_nextn_predict_layers},
      {"num_attention_heads", num_attention_heads},
      {"q_lora_rank", q_lora_rank},
      {"kv_lora_rank", kv_lora_rank},
      {"qk_nope_head_dim", qk_nope_head_dim},
      {"qk_rope_head_dim", qk_rope_head_dim},
      {"v_head_dim", v_head_dim},
      {"n_routed_experts", n_routed_experts},
      {"n_shared_experts", n_shared_experts},
      {"num_experts_per_tok", num_experts_per_tok},
      {"n_group", n_group},
      {"topk_group", topk_group},
      {"norm_topk_prob", norm_topk_prob},
      {"routed_scaling_factor", routed_scaling_factor},
      {"rms_norm_eps", rms_norm_eps},
      {"max_position_embeddings", max_position_embeddings},
      {"bos_token_id", bos_token_id ? json(*bos_token_id) : json(nullptr)},
      {"eos_token_ids", eos_token_ids},
      {"rope",
       {{"type", rope.type},
        {"theta", rope.theta},
        {"factor", rope.factor},
        {"original_max_position_embeddings", rope.original_max_position_embeddings},
        {"beta_fast", rope.beta_fast},
        {"beta_slow", rope.beta_slow},
        {"mscale", opt(rope.mscale)},
        {"mscale_all_dim", opt(rope.mscale_all_dim)}}},
      {"mla_rope_interleaved", mla_rope_interleaved},
      {"has_indexer", has_indexer},
      {"index_n_heads", index_n_heads},
      {"index_head_dim", index_head_dim},
      {"index_topk", index_topk},
      {"indexer_rope_interleaved", indexer_rope_interleaved},
      {"mlp_layer_types", mlp},
      {"indexer_types", indexer},
      {"quantization",
       {{"fp8", quant.fp8},
        {"block_n", quant.block_n},
        {"block_k", quant.block_k},
        {"scale_fmt", quant.scale_fmt}}},
  };
}

}  // namespace mls::io
