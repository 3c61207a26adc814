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

std::vector<double> buckets_1_2_5(int64_t max) {
  std::vector<double> b;
  for (double decade = 1;; decade *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade > static_cast<double>(max)) return b;
      b.push_back(m * decade);
    }
}

namespace {

// vLLM's iteration_tokens_total buckets: 1, then powers of two from 8 up to the step budget.
std::vector<double> iteration_buckets(int64_t max_num_batched_tokens) {
  std::vector<double> b = {1};
  for (int64_t v = 8; v <= max_num_batched_tokens; v *= 2) b.push_back(static_cast<double>(v));
  return b;
}

}  // namespace

Metrics::Metrics(std::string model_name, MetricsLimits limits)
    : labels_(fmt::format("model_name=\"{}\"", escape_label(model_name))),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      tpot_(kItlBuckets),
      e2e_(kE2eBuckets),
      queue_(kE2eBuckets),
      prefill_(kE2eBuckets),
      decode_(kE2eBuckets),
      inference_(kE2eBuckets),
      request_tpot_(kItlBuckets),
      prompt_tokens_(buckets_1_2_5(limits.max_model_len)),
      generation_tokens_(buckets_1_2_5(limits.max_model_len)),
      max_generation_tokens_(buckets_1_2_5(limits.max_model_len)),
      params_n_({1, 2, 5, 10, 20}),
      params_max_tokens_(buckets_1_2_5(limits.max_model_len)),
      iteration_tokens_(iteration_buckets(limits.max_num_batched_tokens)),
      success_{{"stop", 0}, {"length", 0}, {"abort", 0}} {}

void Metrics::observe_request(const RequestObservation& r) {
  std::lock_guard lock(mu_);
  if (r.ttft_s >= 0) ttft_.observe(r.ttft_s);
  e2e_.observe(r.e2e_s);
  if (r.queue_s >= 0) queue_.observe(r.queue_s);
  if (r.prefill_s >= 0) prefill_.observe(r.prefill_s);
  if (r.decode_s >= 0) decode_.observe(r.decode_s);
  if (r.inference_s >= 0) inference_.observe(r.inference_s);
  // Mean gap after the first token of the longest sample, as vLLM's per-request TPOT.
  if (r.decode_s >= 0 && r.max_sample_tokens > 1)
    request_tpot_.observe(r.decode_s / static_cast<double>(r.max_sample_tokens - 1));
  prompt_tokens_.observe(static_cast<double>(r.prompt_tokens));
  generation_tokens_.observe(static_cast<double>(r.generation_tokens));
  max_generation_tokens_.observe(static_cast<double>(r.max_sample_tokens));
  params_n_.observe(r.n);
  params_max_tokens_.observe(static_cast<double>(r.max_tokens));
  ++success_[finish_reason_name(r.reason)];
}

void Metrics::observe_inter_token(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
  tpot_.observe(seconds);
}

void Metrics::observe_iteration(int64_t tokens) {
  std::lock_guard lock(mu_);
  iteration_tokens_.observe(static_cast<double>(tokens));
}

void Metrics::set_cache_config(std::vector<std::pair<std::string, std::string>> labels) {
  std::lock_guard lock(mu_);
  cache_config_ = std::move(labels);
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
  // vLLM's older name, still read by its reference Grafana dashboard.
  gauge("vllm:gpu_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage);
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
  // The engine's step time by phase (EngineStats), which vLLM does not export: the host's share
  // of serving is schedule + output per step.
  counter("mlaserve:engine_steps", "Engine steps that ran a forward.",
          static_cast<double>(s.steps));
  header(out, "mlaserve:engine_step_seconds", "counter",
         "Wall time of the engine's steps by phase: schedule (scheduling, preparing the batch), "
         "forward (the runner's forward and the host work that overlaps it), output (the rest).");
  for (const auto& [phase, v] :
       {std::pair{"schedule", s.schedule_seconds}, std::pair{"forward", s.forward_seconds},
        std::pair{"output", s.output_seconds}})
    out += fmt::format("mlaserve:engine_step_seconds_total{{{},phase=\"{}\"}} {}\n", labels_, phase,
                       num(v));
  // Speculative decoding, only when it is on (k draft positions).
  if (!s.spec.accepted_per_position.empty()) {
    counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
            static_cast<double>(s.spec.num_drafts));
    counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
            static_cast<double>(s.spec.num_draft_tokens));
    counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
            static_cast<double>(s.spec.num_accepted_tokens));
    header(out, "vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
           "Accepted tokens per draft position.");
    for (size_t i = 0; i < s.spec.accepted_per_position.size(); ++i)
      out += fmt::format(
          "vllm:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", labels_,
          i, s.spec.accepted_per_position[i]);
  }

  std::lock_guard lock(mu_);
  header(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.");
  std::string info = labels_;
  for (const auto& [k, v] : cache_config_) info += fmt::format(",{}=\"{}\"", k, escape_label(v));
  out += fmt::format("vllm:cache_config_info{{{}}} 1\n", info);
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
  const auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(out, name, "histogram", help);
    h.render(out, name, labels_);
  };
  histogram("vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (the inter-token latency).", tpot_);
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            e2e_);
  histogram("vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", queue_);
  histogram("vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.", prefill_);
  histogram("vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.", decode_);
  histogram("vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.", inference_);
  histogram("vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", request_tpot_);
  histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_);
  histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
            generation_tokens_);
  histogram("vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", max_generation_tokens_);
  histogram("vllm:request_params_n", "Histogram of the n request parameter.", params_n_);
  histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            params_max_tokens_);
  histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            iteration_tokens_);
  return out;
}

}  // namespace mls::server
