#include "engine/speculative_config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mls {
namespace {

using ojson = nlohmann::ordered_json;

TEST(SpeculativeConfig, VllmAliasesOfMtp) {
  for (const char* m : {"mtp", "deepseek_mtp", "glm4_moe_mtp"}) {
    const SpeculativeConfig s =
        SpeculativeConfig::parse(ojson{{"method", m}, {"num_speculative_tokens", 3}});
    EXPECT_EQ(s.method, "mtp") << m;
    EXPECT_EQ(s.num_speculative_tokens, 3) << m;
  }
  EXPECT_EQ(SpeculativeConfig::parse(ojson{{"method", "mtp"}, {"num_speculative_tokens", 4}})
                .num_speculative_tokens,
            kMaxSpeculativeTokens);
  EXPECT_THROW(SpeculativeConfig::parse(ojson{{"method", "mtp"}, {"num_speculative_tokens", 1.5}}),
               InvalidArgument);
  EXPECT_THROW(SpeculativeConfig::parse(ojson::array()), InvalidArgument);
}

TEST(SpeculativeConfig, TheCheckpointMustHaveAnMtpLayer) {
  const SpeculativeConfig s =
      SpeculativeConfig::parse(ojson{{"method", "mtp"}, {"num_speculative_tokens", 2}});
  io::ModelConfig c;
  c.num_nextn_predict_layers = 0;
  try {
    s.check_model(c);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_nextn_predict_layers is 0"), std::string::npos)
        << e.what();
  }
  c.num_nextn_predict_layers = 1;
  EXPECT_NO_THROW(s.check_model(c));
}

}  // namespace
}  // namespace mls
