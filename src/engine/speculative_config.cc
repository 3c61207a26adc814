#include "engine/speculative_config.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "core/error.h"

namespace mls {

namespace {
// vLLM's method names for the MTP layers of the families we serve.
constexpr std::string_view kMtpMethods[] = {"mtp", "deepseek_mtp", "glm4_moe_mtp"};
// vLLM's other drafting methods: known, not built here.
constexpr std::string_view kOtherMethods[] = {"ngram",          "eagle",       "eagle3", "medusa",
                                              "mlp_speculator", "draft_model", "suffix"};

bool contains(const auto& list, std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}
}  // namespace

SpeculativeConfig SpeculativeConfig::parse(const nlohmann::ordered_json& j) {
  if (!j.is_object()) raise<InvalidArgument>("expected a JSON object");
  SpeculativeConfig s;
  bool has_method = false, has_k = false;
  for (const auto& [key, val] : j.items()) {
    if (key == "method") {
      if (!val.is_string()) raise<InvalidArgument>("'method' must be a string");
      const std::string m = val.get<std::string>();
      if (contains(kOtherMethods, m))
        raise<InvalidArgument>(
            "method '{}' is not built here; only MTP (mtp, deepseek_mtp, "
            "glm4_moe_mtp) drafts with the checkpoint's own MTP layers",
            m);
      if (!contains(kMtpMethods, m))
        raise<InvalidArgument>("unknown method '{}' (MTP: mtp, deepseek_mtp, glm4_moe_mtp)", m);
      has_method = true;
    } else if (key == "num_speculative_tokens") {
      if (!val.is_number_integer() || val.get<int64_t>() < 1 ||
          val.get<int64_t>() > kMaxSpeculativeTokens)
        raise<InvalidArgument>(
            "'num_speculative_tokens' must be an integer in [1, {}], "
            "found {}",
            kMaxSpeculativeTokens, val.dump());
      s.num_speculative_tokens = val.get<int64_t>();
      has_k = true;
    } else {
      raise<InvalidArgument>(
          "key '{}' is not supported (supported: method, "
          "num_speculative_tokens)",
          key);
    }
  }
  if (!has_method) raise<InvalidArgument>("'method' is required (mtp)");
  if (!has_k) raise<InvalidArgument>("'num_speculative_tokens' is required");
  return s;
}

void SpeculativeConfig::check_model(const io::ModelConfig& c) const {
  if (c.num_nextn_predict_layers == 0)
    raise<ConfigError>(
        "--speculative-config method '{}': the checkpoint has no MTP layer "
        "(num_nextn_predict_layers is 0 in config.json)",
        method);
}

}  // namespace mls
