// The thread that drives the engine: it calls Engine::step() while there is work and sleeps on
// a condition variable otherwise. HTTP handler threads only add and abort requests (the engine's
// thread-safe inbox) and wake it. If a step throws, the loop records why and stops; /health then
// reports 503 and waiting handlers fail their requests instead of hanging.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace mls::server {

class EngineLoop {
 public:
  // `log_stats`: a throughput / KV-usage line every kStatsInterval while busy.
  explicit EngineLoop(Engine& engine, bool log_stats = true);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Engine::add_request (InvalidArgument on a bad request), then wakes the loop.
  void submit(Request req);
  void abort(const std::string& request_id);

  bool alive() const { return !failed_.load(); }
  std::string failure() const;
  EngineStats stats() const { return engine_.stats(); }
  const EngineConfig& config() const { return engine_.config(); }

  // Stops after the step in progress and joins the thread. Work still queued is abandoned: the
  // HTTP front has drained or aborted every request by then (--shutdown-timeout), and a stuck
  // sequence must not keep the process alive.
  void stop();

 private:
  void run();
  void log_stats(const EngineStats& now, const EngineStats& before, double seconds) const;

  Engine& engine_;
  const bool log_stats_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;
  bool stopping_ = false;
  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mu_;
  std::string failure_;
  std::thread thread_;
};

}  // namespace mls::server
