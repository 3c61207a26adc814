// Weight-loading progress for `serve`: a redrawn bar when stderr is a terminal, otherwise one
// log line every few seconds (shards, GiB done of the total, GiB/s, ETA). Fed by every rank's
// WeightLoadProgress callback (model/model_weights.h), from their threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace mls::cli {

class LoadProgress {
 public:
  using Clock = std::chrono::steady_clock;
  // `sink` receives each line: with `terminal`, a bar to redraw in place (no newline).
  LoadProgress(int shards, int ranks, bool terminal, std::function<void(const std::string&)> sink,
               Clock::duration interval);

  // A rank's cumulative bytes done and in all. Thread-safe.
  void update(int rank, int64_t done, int64_t total, Clock::time_point now = Clock::now());

  // The line for the current state at `now` (what update prints when it prints).
  std::string line(Clock::time_point now) const;

 private:
  std::string line_locked(Clock::time_point now) const;

  const int shards_;
  const bool terminal_;
  const std::function<void(const std::string&)> sink_;
  const Clock::duration interval_;
  mutable std::mutex mu_;
  std::vector<std::pair<int64_t, int64_t>> ranks_;  // done, total
  Clock::time_point start_, last_print_;
  bool printed_final_ = false;
};

}  // namespace mls::cli
