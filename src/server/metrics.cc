#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace mls::server {
namespace {

// vLLM's bucket boundaries, so that existing histogram_quantile panels keep their resolution.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                         5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                         60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

// Prometheus floats: integers without exponent noise, the rest with full precision.
std::string num(double v) {
  return fmt::format("{}", v);
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, num(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, num(sum_));
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count_);
}

Metrics::Metrics(std::string model_name)
    : labels_(fmt::format("model_name=\"{}\"", escape_label(model_name))),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kE2eBuckets),
      success_{{"stop", 0}, {"length", 0}, {"abort", 0}} {}

void Metrics::observe_request(double ttft_s, double e2e_s, FinishReason reason) {
  std::lock_guard lock(mu_);
  if (ttft_s >= 0) ttft_.observe(ttft_s);
  e2e_.observe(e2e_s);
  ++success_[finish_reason_name(reason)];
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

std::string Metrics::render(const EngineStats& s) const {
  std::string out;
  const auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    out += fmt::format("{}{{{}}} {}\n", name, labels_, num(v));
  };
  // A counter's family name has no _total; its sample does (prometheus_client convention).
  const auto counter = [&](const std::string& family, const char* help, double v) {
    header(out, family, "counter", help);
    out += fmt::format("{}_total{{{}}} {}\n", family, labels_, num(v));
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        static_cast<double>(s.num_running));
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        static_cast<double>(s.num_waiting));
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
  counter("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
          static_cast<double>(s.num_preemptions));
  counter("vllm:prefix_cache_queries",
          "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(s.prefix_cache_queries));
  counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(s.prefix_cache_hits));
  counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
          static_cast<double>(s.prompt_tokens));
  counter("vllm:generation_tokens", "Number of generation tokens processed.",
          static_cast<double>(s.generation_tokens));

  std::lock_guard lock(mu_);
  header(out, "vllm:request_success", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, n] : success_)
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_,
                       reason, n);
  header(out, "vllm:time_to_first_token_seconds", "histogram",
         "Histogram of time to first token in seconds.");
  ttft_.render(out, "vllm:time_to_first_token_seconds", labels_);
  header(out, "vllm:inter_token_latency_seconds", "histogram",
         "Histogram of inter-token latency in seconds.");
  itl_.render(out, "vllm:inter_token_latency_seconds", labels_);
  header(out, "vllm:e2e_request_latency_seconds", "histogram",
         "Histogram of e2e request latency in seconds.");
  e2e_.render(out, "vllm:e2e_request_latency_seconds", labels_);
  return out;
}

}  // namespace mls::server
