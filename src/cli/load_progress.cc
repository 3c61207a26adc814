#include "cli/load_progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace mls::cli {

LoadProgress::LoadProgress(int shards, int ranks, bool terminal,
                           std::function<void(const std::string&)> sink, Clock::duration interval)
    : shards_(shards),
      terminal_(terminal),
      sink_(std::move(sink)),
      interval_(interval),
      ranks_(static_cast<size_t>(std::max(ranks, 1)), {0, 0}),
      start_(Clock::now()),
      last_print_(start_) {}

void LoadProgress::update(int rank, int64_t done, int64_t total, Clock::time_point now) {
  std::lock_guard lock(mu_);
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  ranks_[static_cast<size_t>(rank)] = {done, total};
  bool complete = true;
  for (const auto& [d, t] : ranks_) complete = complete && t > 0 && d >= t;
  if (complete && printed_final_) return;
  if (!complete && now - last_print_ < interval_) return;
  last_print_ = now;
  printed_final_ = complete;
  // The complete state always prints, once: the bar's last frame or the log's closing line.
  sink_(line_locked(now));
}

std::string LoadProgress::line(Clock::time_point now) const {
  std::lock_guard lock(mu_);
  return line_locked(now);
}

std::string LoadProgress::line_locked(Clock::time_point now) const {
  int64_t done = 0, total = 0;
  for (const auto& [d, t] : ranks_) {
    done += d;
    total += t;
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double s = std::chrono::duration<double>(now - start_).count();
  const double rate = s > 0 ? static_cast<double>(done) / s : 0.0;
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 0.0;
  const std::string eta =
      rate > 0 ? fmt::format("{:.0f} s", static_cast<double>(total - done) / rate) : "?";
  const std::string figures =
      fmt::format("{:3.0f}% {:.2f}/{:.2f} GiB, {:.2f} GiB/s, ETA {}", 100.0 * frac, done / kGiB,
                  total / kGiB, rate / kGiB, eta);
  if (!terminal_)
    return fmt::format("Loading weights ({} shard{}): {}", shards_, shards_ == 1 ? "" : "s",
                       figures);
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  return fmt::format("\rLoading {} shard{} [{}{}] {}", shards_, shards_ == 1 ? "" : "s",
                     std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kWidth - filled), '.'), figures);
}

}  // namespace mls::cli
