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
  m.observe_request({.ttft_s = 0.05, .e2e_s = 1.2, .reason = FinishReason::kStop});
  m.observe_request({.ttft_s = -1, .e2e_s = 0.1, .reason = FinishReason::kAbort});
  m.observe_inter_token(0.02);
  EngineStats s;
  s.num_running = 3;
  s.num_waiting = 1;
  s.kv_usage = 0.25;
  s.prompt_tokens = 10;
  s.generation_tokens = 20;
  s.prefix_cache_queries = 8;
  s.prefix_cache_hits = 4;
  s.steps = 5;
  s.schedule_seconds = 0.5;
  s.forward_seconds = 2;
  s.output_seconds = 0.25;
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
           "mlaserve:engine_steps_total{" + label + "} 5\n",
           "mlaserve:engine_step_seconds_total{" + label + ",phase=\"schedule\"} 0.5\n",
           "mlaserve:engine_step_seconds_total{" + label + ",phase=\"forward\"} 2\n",
           "mlaserve:engine_step_seconds_total{" + label + ",phase=\"output\"} 0.25\n",
           "# TYPE vllm:time_to_first_token_seconds histogram\n",
           "# TYPE vllm:prompt_tokens counter\n"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
}

// Speculative decoding's counters appear with vLLM's names only when it is on.
TEST(Metrics, SpeculativeDecodingCountersOnlyWhenOn) {
  Metrics m("m");
  EngineStats s;
  EXPECT_EQ(m.render(s).find("spec_decode"), std::string::npos);
  s.spec = SpeculativeStats(3);
  s.spec.num_drafts = 7;
  s.spec.num_draft_tokens = 19;
  s.spec.num_accepted_tokens = 11;
  s.spec.accepted_per_position = {6, 4, 1};
  const std::string text = m.render(s);
  expect_prometheus_text(text);
  const std::string label = "model_name=\"m\"";
  for (const std::string& want : std::vector<std::string>{
           "# TYPE vllm:spec_decode_num_drafts counter\n",
           "vllm:spec_decode_num_drafts_total{" + label + "} 7\n",
           "vllm:spec_decode_num_draft_tokens_total{" + label + "} 19\n",
           "vllm:spec_decode_num_accepted_tokens_total{" + label + "} 11\n",
           "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n",
           "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + label + ",position=\"0\"} 6\n",
           "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + label + ",position=\"2\"} 1\n"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
}

// Every metric vLLM's reference Grafana dashboard
// (examples/online_serving/prometheus_grafana/grafana.json) queries, and the rest of vLLM's
// request-level set, as they appear in the exposition.
TEST(Metrics, ServesEveryNameOfVllmsGrafanaDashboard) {
  Metrics m("demo", {.max_model_len = 2048, .max_num_batched_tokens = 8192});
  m.set_cache_config({{"block_size", "64"}, {"cache_dtype", "bfloat16"}});
  m.observe_request({.ttft_s = 0.2,
                     .e2e_s = 1.0,
                     .queue_s = 0.05,
                     .prefill_s = 0.15,
                     .decode_s = 0.8,
                     .inference_s = 0.95,
                     .prompt_tokens = 30,
                     .generation_tokens = 9,
                     .max_sample_tokens = 9,
                     .n = 1,
                     .max_tokens = 16,
                     .reason = FinishReason::kLength});
  m.observe_inter_token(0.1);
  m.observe_iteration(30);
  const std::string text = m.render(EngineStats{});
  expect_prometheus_text(text);
  for (const char* name :
       {// Queried by the dashboard.
        "vllm:e2e_request_latency_seconds_bucket{", "vllm:e2e_request_latency_seconds_sum{",
        "vllm:e2e_request_latency_seconds_count{", "vllm:prompt_tokens_total{",
        "vllm:generation_tokens_total{", "vllm:time_per_output_token_seconds_bucket{",
        "vllm:time_per_output_token_seconds_sum{", "vllm:time_per_output_token_seconds_count{",
        "vllm:num_requests_running{", "vllm:num_requests_waiting{",
        "vllm:time_to_first_token_seconds_bucket{", "vllm:time_to_first_token_seconds_sum{",
        "vllm:time_to_first_token_seconds_count{", "vllm:gpu_cache_usage_perc{",
        "vllm:request_prompt_tokens_bucket{", "vllm:request_generation_tokens_bucket{",
        "vllm:request_success_total{", "vllm:request_queue_time_seconds_sum{",
        "vllm:request_prefill_time_seconds_sum{", "vllm:request_decode_time_seconds_sum{",
        "vllm:request_max_num_generation_tokens_sum{",
        // vLLM's request-level set beyond the dashboard.
        "vllm:request_inference_time_seconds_sum{",
        "vllm:request_time_per_output_token_seconds_sum{", "vllm:request_params_n_bucket{",
        "vllm:request_params_max_tokens_bucket{", "vllm:iteration_tokens_total_bucket{",
        "vllm:inter_token_latency_seconds_bucket{", "vllm:kv_cache_usage_perc{",
        "vllm:num_preemptions_total{", "vllm:prefix_cache_queries_total{",
        "vllm:prefix_cache_hits_total{", "vllm:cache_config_info{"})
    EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << name;
  const std::string label = "model_name=\"demo\"";
  for (const std::string& want : std::vector<std::string>{
           "vllm:cache_config_info{" + label + ",block_size=\"64\",cache_dtype=\"bfloat16\"} 1\n",
           "vllm:request_queue_time_seconds_sum{" + label + "} 0.05\n",
           "vllm:request_decode_time_seconds_sum{" + label + "} 0.8\n",
           "vllm:request_prompt_tokens_bucket{" + label + ",le=\"20\"} 0\n",
           "vllm:request_prompt_tokens_bucket{" + label + ",le=\"50\"} 1\n",
           "vllm:request_prompt_tokens_bucket{" + label + ",le=\"2000\"} 1\n",
           "vllm:request_params_max_tokens_sum{" + label + "} 16\n",
           "vllm:iteration_tokens_total_bucket{" + label + ",le=\"16\"} 0\n",
           "vllm:iteration_tokens_total_bucket{" + label + ",le=\"32\"} 1\n",
           "vllm:iteration_tokens_total_bucket{" + label + ",le=\"8192\"} 1\n",
           "vllm:request_time_per_output_token_seconds_sum{" + label + "} 0.1\n",
           "vllm:request_success_total{" + label + ",finished_reason=\"length\"} 1\n"})
    EXPECT_NE(text.find(want), std::string::npos) << want;
  EXPECT_EQ(buckets_1_2_5(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
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
