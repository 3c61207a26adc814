#include "server/sse.h"

#include <gtest/gtest.h>

#include "server/http_server.h"

namespace mls::server {
namespace {

TEST(Sse, FramesEachChunkAsOneDataEvent) {
  EXPECT_EQ(sse_event({{"a", "x\ny"}}), "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
}

TEST(Sse, InvalidUtf8IsReplacedNotThrown) {
  EXPECT_EQ(dump_json(std::string("a\xff")), "\"a\xEF\xBF\xBD\"");
}

TEST(Auth, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

}  // namespace
}  // namespace mls::server
