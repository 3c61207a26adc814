// config.json: JSON with its depth limit, then ModelConfig's validation. Every input gives a
// config or a ConfigError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto j = mls::parse_json<mls::ConfigError, nlohmann::json>(
        std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    mls::io::ModelConfig::from_json(j, "config.json");
  } catch (const mls::ConfigError&) {
  }
  return 0;
}
