// `--speculative-config` in vLLM's JSON form ({"method": "mtp", "num_speculative_tokens": k}):
// what we implement of it, validated once. Only MTP drafting with the checkpoint's own MTP
// layers exists; every other key or method is an error naming it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "io/model_config.h"

namespace mls {

// The most draft tokens per step (the MTP layer applied recursively; peers' recipes use 1-4).
inline constexpr int64_t kMaxSpeculativeTokens = 4;

struct SpeculativeConfig {
  std::string method = "mtp";  // normalised: vLLM's aliases deepseek_mtp, glm4_moe_mtp → mtp
  int64_t num_speculative_tokens = 1;

  // Throws InvalidArgument naming the key (callers prefix the flag): unknown or unimplemented
  // keys, methods other than MTP, num_speculative_tokens outside [1, kMaxSpeculativeTokens];
  // both keys are required.
  static SpeculativeConfig parse(const nlohmann::ordered_json& j);
  // Throws ConfigError when the checkpoint has no MTP layer to draft with.
  void check_model(const io::ModelConfig& c) const;
};

}  // namespace mls
