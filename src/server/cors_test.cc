#include "server/cors.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mls::server {
namespace {

std::string find(const HeaderList& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "<absent>";
}

TEST(Cors, ListValuesTakeJsonOrCommas) {
  EXPECT_EQ(parse_cors_list("--allowed-origins", R"(["https://a.example", "http://b:3000"])"),
            (std::vector<std::string>{"https://a.example", "http://b:3000"}));
  EXPECT_EQ(parse_cors_list("--allowed-methods", "GET, POST"),
            (std::vector<std::string>{"GET", "POST"}));
  EXPECT_THROW(parse_cors_list("--allowed-origins", "[\"a\", 3]"), InvalidArgument);
  EXPECT_THROW(parse_cors_list("--allowed-origins", "[\"a\""), InvalidArgument);
}

TEST(Cors, DefaultsAllowAnyOriginWithoutCredentials) {
  const CorsPolicy p{CorsOptions{}};
  const CorsPreflight pre = p.preflight("https://app.example", "POST", "authorization,x-custom");
  EXPECT_EQ(pre.status, 200);
  EXPECT_EQ(find(pre.headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(find(pre.headers, "Access-Control-Allow-Methods"),
            "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(find(pre.headers, "Access-Control-Allow-Headers"), "authorization,x-custom");
  EXPECT_EQ(find(pre.headers, "Access-Control-Max-Age"), "600");
  EXPECT_EQ(find(p.response_headers("https://app.example", false), "Access-Control-Allow-Origin"),
            "*");
  EXPECT_TRUE(p.response_headers("", false).empty());
  // A request with cookies sees its own origin, never "*".
  EXPECT_EQ(find(p.response_headers("https://app.example", true), "Access-Control-Allow-Origin"),
            "https://app.example");
}

TEST(Cors, RestrictedListsRefuseWhatTheyDoNotName) {
  const CorsPolicy p{CorsOptions{.allowed_origins = {"https://ok.example"},
                                 .allowed_methods = {"POST"},
                                 .allowed_headers = {"Authorization"},
                                 .allow_credentials = true}};
  const CorsPreflight ok = p.preflight("https://ok.example", "POST", "authorization, content-type");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(find(ok.headers, "Access-Control-Allow-Origin"), "https://ok.example");
  EXPECT_EQ(find(ok.headers, "Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(find(ok.headers, "Access-Control-Allow-Methods"), "POST");
  EXPECT_EQ(find(ok.headers, "Vary"), "Origin");

  const CorsPreflight bad = p.preflight("https://evil.example", "DELETE", "x-other");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body, "Disallowed CORS origin, method, headers");

  EXPECT_EQ(find(p.response_headers("https://evil.example", false), "Access-Control-Allow-Origin"),
            "<absent>");
  EXPECT_EQ(find(p.response_headers("https://ok.example", false), "Access-Control-Allow-Origin"),
            "https://ok.example");
  EXPECT_TRUE(CorsPolicy::is_preflight("OPTIONS", "https://ok.example", "POST"));
  EXPECT_FALSE(CorsPolicy::is_preflight("OPTIONS", "", "POST"));
  EXPECT_FALSE(CorsPolicy::is_preflight("POST", "https://ok.example", "POST"));
}

}  // namespace
}  // namespace mls::server
