#include "server/engine_loop.h"

#include "core/logging.h"

namespace mls::server {
namespace {
// How often a busy server logs its throughput line.
constexpr auto kStatsInterval = std::chrono::seconds(10);
}  // namespace

EngineLoop::EngineLoop(Engine& engine, bool log_stats)
    : engine_(engine), log_stats_(log_stats), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() {
  stop();
}

void EngineLoop::submit(Request req) {
  engine_.add_request(std::move(req));
  {
    std::lock_guard lock(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

void EngineLoop::abort(const std::string& request_id) {
  engine_.abort_request(request_id);
  {
    std::lock_guard lock(mu_);
    wake_ = true;
  }
  cv_.notify_one();
}

std::string EngineLoop::failure() const {
  std::lock_guard lock(failure_mu_);
  return failure_;
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::log_stats(const EngineStats& now, const EngineStats& before,
                           double seconds) const {
  const double queries =
      static_cast<double>(now.prefix_cache_queries - before.prefix_cache_queries);
  const double hits = static_cast<double>(now.prefix_cache_hits - before.prefix_cache_hits);
  MLS_LOG_INFO(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, "
      "Running: {} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: "
      "{:.1f}%",
      static_cast<double>(now.prompt_tokens - before.prompt_tokens) / seconds,
      static_cast<double>(now.generation_tokens - before.generation_tokens) / seconds,
      now.num_running, now.num_waiting, now.kv_usage * 100.0,
      queries > 0 ? 100.0 * hits / queries : 0.0);
  const auto steps = static_cast<double>(now.steps - before.steps);
  if (steps == 0) return;
  // The host's share of a step is what the device waits for: scheduling and the output work
  // after the forward (the token reports overlap the next forward).
  const auto per_step_ms = [&](double now_s, double before_s) {
    return 1e3 * (now_s - before_s) / steps;
  };
  MLS_LOG_INFO(
      "Avg step: {:.0f} steps/s, {:.3f} ms each: schedule {:.3f} ms, forward {:.3f} ms, output "
      "{:.3f} ms",
      steps / seconds,
      per_step_ms(now.schedule_seconds + now.forward_seconds + now.output_seconds,
                  before.schedule_seconds + before.forward_seconds + before.output_seconds),
      per_step_ms(now.schedule_seconds, before.schedule_seconds),
      per_step_ms(now.forward_seconds, before.forward_seconds),
      per_step_ms(now.output_seconds, before.output_seconds));
}

void EngineLoop::run() {
  EngineStats last = engine_.stats();
  Clock::time_point last_log = Clock::now();
  try {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (stopping_) return;
        if (!engine_.has_work()) {
          cv_.wait(lock, [&] { return wake_ || stopping_; });
          wake_ = false;
          continue;
        }
      }
      engine_.step();
      const Clock::time_point now = Clock::now();
      if (log_stats_ && now - last_log >= kStatsInterval) {
        const EngineStats cur = engine_.stats();
        log_stats(cur, last, std::chrono::duration<double>(now - last_log).count());
        last = cur;
        last_log = now;
      }
    }
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(failure_mu_);
      failure_ = e.what();
    }
    failed_ = true;
    MLS_LOG_ERROR("engine loop stopped: {}", e.what());
  }
}

}  // namespace mls::server
