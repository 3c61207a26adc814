// Prometheus metrics under vLLM's names (`vllm:*`, label model_name), so that dashboards and
// alerts written for vLLM read mlaserve unchanged. Gauges and token counters come from the
// engine's EngineStats at scrape time; latency histograms and finish-reason counters are
// observed here as requests finish.
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

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  // Called when a request's last sample finishes (any thread).
  void observe_request(double ttft_s, double e2e_s, FinishReason reason);
  // Gap between two consecutive tokens of one sample.
  void observe_inter_token(double seconds);

  // The text exposition format (version 0.0.4).
  std::string render(const EngineStats& stats) const;

 private:
  std::string labels_;  // model_name="..."
  mutable std::mutex mu_;
  Histogram ttft_, itl_, e2e_;
  std::map<std::string, uint64_t> success_;  // by finished_reason
};

// A label value with \, " and newline escaped.
std::string escape_label(const std::string& v);

}  // namespace mls::server
