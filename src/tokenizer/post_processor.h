// The post-processor adds special tokens around an encoded sequence when the caller asks for
// add_special_tokens (DeepSeek: BOS in front). Only single sequences are encoded here, so a
// template reduces to fixed prefix and suffix ids.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace mls::tok {

struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;

  // Reads tokenizer.json's "post_processor" (TemplateProcessing, ByteLevel, Sequence or null).
  static PostProcessor from_json(const nlohmann::json& config);
};

}  // namespace mls::tok
