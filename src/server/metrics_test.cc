#include "server/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

namespace mls::server {
namespace {

// Every line is a comment (# HELP / # TYPE) or `name{labels} value`.
void expect_prometheus_text(const std::string& text) {
  const std::regex sample(
      R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\} [-+0-9.eE]+(Inf)?$)re");
  const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    EXPECT_TRUE(std::regex_match(line, sample) || std::regex_match(line, comment)) << line;
  }
  EXPECT_GT(n, 20);
  EXPECT_EQ(text.back(), '\n');
}

TEST(Metrics, RendersVllmNamesInTextFormat) {
  Metrics m("org/model \"x\"");
  m.observe_request(0.05, 1.2, FinishReason::kStop);
  m.observe_request(-1, 0.1, FinishReason::kAbort);
  m.observe_inter_token(0.02);
  EngineStats s;
  s.num_running = 3;
  s.num_waiting = 1;
  s.kv_usage = 0.25;
  s.prompt_tokens = 10;
  s.generation_tokens = 20;
  s.prefix_cache_queries = 8;
  s.prefix_cache_hits = 4;
  const std::string text = m.render(s);
  expect_prometheus_text(text);
  const std::string label = "model_name=\"org/model \\\"x\\\"\"";
  for (const std::string& want : std::vector<std::string>{
           "vllm:num_requests_running{" + label + "} 3\n",
           "vllm:num_requests_waiting{" + label + "} 1\n",
           "vllm:kv_cache_usage_perc{" + label + "} 0.25\n",
           "vllm:prompt_tokens_total{" + label + "} 10\n",
           "vllm:generation_tokens_total{" + label + "} 20\n",
           "vllm:prefix_cache_queries_total{" + label + "} 8\n",
           "vllm:prefix_cache_hits_total{" + label + "} 4\n",
           "vllm:num_preemptions_total{" + label + "} 0\n",
           "vllm:request_success_total{" + label + ",finished_reason=\"stop\"} 1\n",
           "vllm:request_success_total{" + label + ",finished_reason=\"abort\"} 1\n",
           "vllm:time_to_first_token_seconds_count{" + label + "} 1\n",
           "vllm:time_to_first_token_seconds_bucket{" + label + ",le=\"0.06\"} 1\n",
           "vllm:time_to_first_token_seconds_bucket{" + label + ",le=\"0.04\"} 0\n",
           "vllm:e2e_request_latency_seconds_bucket{" + label + ",le=\"+Inf\"} 2\n",
           "vllm:inter_token_latency_seconds_count{" + label + "} 1\n",
           "# TYPE vllm:time_to_first_token_seconds histogram\n",
           "# TYPE vllm:prompt_tokens counter\n"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({1.0, 2.0});
  h.observe(0.5);
  h.observe(1.0);  // le is inclusive
  h.observe(1.5);
  h.observe(9.0);
  std::string out;
  h.render(out, "h", "a=\"b\"");
  EXPECT_EQ(out,
            "h_bucket{a=\"b\",le=\"1\"} 2\n"
            "h_bucket{a=\"b\",le=\"2\"} 3\n"
            "h_bucket{a=\"b\",le=\"+Inf\"} 4\n"
            "h_sum{a=\"b\"} 12\n"
            "h_count{a=\"b\"} 4\n");
}

}  // namespace
}  // namespace mls::server
