#include "engine/host_worker.h"

#include <utility>

#include "core/error.h"

namespace mls {

HostWorker::HostWorker() : thread_([this] { loop(); }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostWorker::start(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (running_) raise<InternalError>("HostWorker::start while a job is running");
    job_ = std::move(job);
    running_ = true;
    done_ = false;
    error_ = nullptr;
  }
  cv_.notify_all();
}

void HostWorker::wait() {
  std::unique_lock lock(mu_);
  if (!running_) return;
  cv_.wait(lock, [&] { return done_; });
  running_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostWorker::abandon() {
  std::unique_lock lock(mu_);
  if (!running_) return;
  cv_.wait(lock, [&] { return done_; });
  running_ = false;
  error_ = nullptr;
}

bool HostWorker::busy() const {
  std::lock_guard lock(mu_);
  return running_;
}

void HostWorker::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (job_ != nullptr); });
    if (stop_) return;
    std::function<void()> job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    std::exception_ptr err;
    try {
      job();
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    error_ = err;
    done_ = true;
    cv_.notify_all();
  }
}

}  // namespace mls
