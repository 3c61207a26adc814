// Prometheus metrics under vLLM's names (`vllm:*`, label model_name), so that dashboards and
// alerts written for vLLM (its reference Grafana dashboard among them) read mlaserve
// unchanged. Gauges and token counters come from the engine's EngineStats at scrape time;
// per-request histograms and finish-reason counters are observed here as requests finish,
// iteration sizes as steps run.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace mls::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // Appends the _bucket / _sum / _count samples (cumulative buckets, then +Inf).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// One finished request, in seconds and tokens. Phases never reached are negative.
struct RequestObservation {
  double ttft_s = -1;       // arrival → first token
  double e2e_s = 0;         // arrival → last sample finished
  double queue_s = -1;      // arrival → first scheduled
  double prefill_s = -1;    // first scheduled → first token
  double decode_s = -1;     // first token → finished
  double inference_s = -1;  // first scheduled → finished
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;  // over all samples
  int64_t max_sample_tokens = 0;  // of the longest sample
  int n = 1;
  int64_t max_tokens = 0;  // the request's limit (resolved, or 0 when none)
  FinishReason reason = FinishReason::kStop;
};

// Bucket ranges that depend on the server's limits, as vLLM derives them.
struct MetricsLimits {
  int64_t max_model_len = 8192;
  int64_t max_num_batched_tokens = 8192;
};

class Metrics {
 public:
  explicit Metrics(std::string model_name, MetricsLimits limits = {});

  // Called when a request's last sample finishes (any thread).
  void observe_request(const RequestObservation& r);
  // Gap between two consecutive tokens of one sample.
  void observe_inter_token(double seconds);
  // Tokens computed by one engine step.
  void observe_iteration(int64_t tokens);
  // Labels of vllm:cache_config_info (block_size, cache_dtype, ...), set once at start-up.
  void set_cache_config(std::vector<std::pair<std::string, std::string>> labels);

  // The text exposition format (version 0.0.4).
  std::string render(const EngineStats& stats) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mu_;
  Histogram ttft_, itl_, tpot_, e2e_, queue_, prefill_, decode_, inference_, request_tpot_;
  Histogram prompt_tokens_, generation_tokens_, max_generation_tokens_, params_n_,
      params_max_tokens_, iteration_tokens_;
  std::map<std::string, uint64_t> success_;  // by finished_reason
  std::vector<std::pair<std::string, std::string>> cache_config_;
};

// vLLM's 1-2-5 series up to `max` (1, 2, 5, 10, 20, 50, ...).
std::vector<double> buckets_1_2_5(int64_t max);

// A label value with \, " and newline escaped.
std::string escape_label(const std::string& v);

}  // namespace mls::server
