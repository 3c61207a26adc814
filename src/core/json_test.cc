#include "core/json.h"

#include <gtest/gtest.h>

#include <string>

namespace mls {
namespace {

std::string nested(int levels) {
  return std::string(levels, '[') + "1" + std::string(levels, ']');
}

TEST(Json, DepthCountsBracketsOutsideStrings) {
  EXPECT_EQ(json_depth("1"), 0);
  EXPECT_EQ(json_depth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(json_depth(R"(["[[[", "\"{{{"])"), 1);
  EXPECT_EQ(json_depth(nested(100000)), kMaxJsonDepth + 1);  // stops at the limit
}

TEST(Json, ParsesUpToTheLimitAndRejectsDeeper) {
  EXPECT_EQ(json_depth(parse_json<InvalidArgument>(nested(kMaxJsonDepth), "x").dump()),
            kMaxJsonDepth);
  try {
    parse_json<ConfigError>(nested(16000), "config.json");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config.json: JSON nests deeper than 128 levels");
  }
  EXPECT_THROW(parse_json<CheckpointError>("{\"a\": ", "header"), CheckpointError);
  EXPECT_THROW(parse_json<CheckpointError>("1e999999", "header"), CheckpointError);
  EXPECT_FALSE(try_parse_json(nested(kMaxJsonDepth + 1)));
  EXPECT_FALSE(try_parse_json("{"));
  EXPECT_EQ(try_parse_json(R"({"k": [1]})")->at("k").at(0), 1);
}

}  // namespace
}  // namespace mls
